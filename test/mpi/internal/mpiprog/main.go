// Command mpiprog exercises package mpi under a real launcher for the
// tests in test/mpi: chunked broadcasts, 64-bit all-reduce, splits,
// error returns, and (with -big) one broadcast above 4 GiB. Each rank
// prints "ok rank R size N" when every check passed on every rank, and
// exits 1 otherwise. It is test support only and must never be shipped.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/kbundle/kbundle/mpi"
)

var (
	rank  int
	fails int
)

func failf(format string, args ...any) {
	fails++
	fmt.Fprintf(os.Stderr, "rank %d: FAIL: %s\n", rank, fmt.Sprintf(format, args...))
}

func must(what string, err error) {
	if err != nil {
		failf("%s: %v", what, err)
	}
}

func pattern(i int) byte { return byte(i*7 + i>>20) }

// otherThread runs f on a goroutine locked to a fresh OS thread, so
// calls reach MPI from a thread other than the one that initialised it.
func otherThread(f func()) {
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		defer close(done)
		f()
	}()
	<-done
}

// abortWhileIdle: rank 0 never enters the barrier; the last rank waits
// in IdleBarrier while another goroutine of it calls mpi.Abort(3), which
// must end the job at once, not after Abort's 10 s fallback (test/mpi
// TestBindingIdleAbort). Rank 0 sleeps until it is killed.
func abortWhileIdle(w *mpi.Comm) {
	if rank == 0 {
		time.Sleep(time.Minute)
		failf("rank 0 was not killed by the last rank's abort")
		os.Exit(1)
	}
	if rank == w.Size()-1 {
		go func() {
			time.Sleep(300 * time.Millisecond)
			mpi.Abort(3)
		}()
	}
	err := w.IdleBarrier(10 * time.Millisecond)
	fmt.Fprintf(os.Stderr, "rank %d: IdleBarrier returned %v\n", rank, err)
	time.Sleep(time.Minute)
}

func main() {
	big := flag.Int64("big", 0, "also broadcast this many bytes in one Bcast call")
	truncate := flag.Bool("truncate", true, "check that a mismatched broadcast is an *mpi.Error")
	size := flag.Int("size", 1<<20+3, "bytes to broadcast in small pieces")
	piece := flag.Int("piece", 4093, "piece size for the chunked broadcast")
	idleAbort := flag.Bool("idle-abort", false, "the last rank calls mpi.Abort(3) while it waits in IdleBarrier for rank 0, which never comes")
	flag.Parse()

	if mpi.Initialized() {
		failf("Initialized before Init")
	}
	if err := mpi.World().Barrier(); !errors.Is(err, mpi.ErrNotInitialized) {
		failf("Barrier before Init: got %v, want ErrNotInitialized", err)
	}
	if err := mpi.Init(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: init: %v\n", err)
		os.Exit(1)
	}
	must("second Init", mpi.Init())
	w := mpi.World()
	rank = w.Rank()
	n := w.Size()
	if rank == 0 {
		fmt.Printf("library: %s\n", firstLine(mpi.LibraryVersion()))
		fmt.Printf("enabled: %v\n", mpi.Enabled)
	}

	if *idleAbort {
		abortWhileIdle(w)
	}
	// IdleBarrier: rank 0 comes late; every rank leaves after it came, and
	// a barrier right after still matches (the waits leave no request).
	if rank == 0 {
		time.Sleep(200 * time.Millisecond)
	}
	before := time.Now()
	must("idle barrier", w.IdleBarrier(10*time.Millisecond))
	must("idle barrier, again", w.IdleBarrier(time.Millisecond))
	if rank != 0 && n > 1 && time.Since(before) < 150*time.Millisecond {
		failf("IdleBarrier returned after %v, before rank 0 came (200 ms)", time.Since(before))
	}

	// Chunked broadcast from the last rank, in many calls, from another thread.
	buf := make([]byte, *size)
	root := n - 1
	if rank == root {
		for i := range buf {
			buf[i] = pattern(i)
		}
	}
	otherThread(func() {
		for off := 0; off < len(buf); off += *piece {
			if err := w.Bcast(buf[off:min(off+*piece, len(buf))], root); err != nil {
				failf("bcast piece at %d: %v", off, err)
				return
			}
		}
	})
	checkPattern("chunked bcast", buf)
	// The same bytes in one call, from root 0, after clearing them.
	if rank != 0 {
		clear(buf)
	}
	must("bcast whole", w.Bcast(buf, 0))
	checkPattern("whole bcast", buf)
	must("bcast empty", w.Bcast(nil, 0))

	// 64-bit all-reduce.
	const base = int64(1) << 40
	for _, c := range []struct {
		op   mpi.Op
		want int64
	}{
		{mpi.Min, base},
		{mpi.Max, base + int64(n-1)},
		{mpi.Sum, base*int64(n) + int64(n*(n-1)/2)},
	} {
		got, err := w.AllreduceInt64(base+int64(rank), c.op)
		must("allreduce "+c.op.String(), err)
		if got != c.want {
			failf("allreduce %v = %d, want %d", c.op, got, c.want)
		}
	}
	if got, err := w.AllreduceInt64(1<<rank, mpi.Bor); err != nil || got != 1<<n-1 {
		failf("allreduce bor = %d, %v; want %d", got, err, int64(1<<n-1))
	}

	// The same, as one all-reduce of a vector: each element by op.
	for _, op := range []mpi.Op{mpi.Min, mpi.Max, mpi.Sum} {
		v := []int64{base + int64(rank), -base - int64(rank), int64(rank)}
		must("allreduce vector "+op.String(), w.AllreduceInt64s(v, op))
		for i, x := range []int64{base, -base, 0} {
			var want int64
			for r := range n {
				y := x + int64(r)
				if i == 1 {
					y = x - int64(r)
				}
				switch {
				case r == 0:
					want = y
				case op == mpi.Min:
					want = min(want, y)
				case op == mpi.Max:
					want = max(want, y)
				default:
					want += y
				}
			}
			if v[i] != want {
				failf("allreduce vector %v [%d] = %d, want %d", op, i, v[i], want)
			}
		}
	}

	// Shared-memory split: one node here, so the same ranks as the world.
	node, err := w.SplitShared()
	must("split shared", err)
	if node != nil {
		if node.Size() != n || node.Rank() != rank {
			failf("split shared: rank %d size %d, want %d %d", node.Rank(), node.Size(), rank, n)
		}
		color := 1
		if node.Rank() == 0 {
			color = 0
		}
		leaders, err := w.Split(color, rank)
		must("split leaders", err)
		if leaders != nil {
			want := 1
			if color == 1 {
				want = n - 1
			}
			if leaders.Size() != want {
				failf("leaders comm: size %d, want %d", leaders.Size(), want)
			}
			must("barrier leaders", leaders.Barrier())
			must("free leaders", leaders.Free())
			if err := leaders.Free(); !errors.Is(err, mpi.ErrFreed) {
				failf("second Free: got %v, want ErrFreed", err)
			}
			if err := leaders.Barrier(); !errors.Is(err, mpi.ErrFreed) {
				failf("Barrier on freed comm: got %v, want ErrFreed", err)
			}
		}
		must("free node", node.Free())
	}
	// Undefined color: odd ranks get no communicator.
	color := 0
	if rank%2 == 1 {
		color = mpi.Undefined
	}
	even, err := w.Split(color, -rank)
	must("split undefined", err)
	switch {
	case rank%2 == 1 && even != nil:
		failf("split with Undefined returned a communicator")
	case rank%2 == 0 && even == nil:
		failf("split with color 0 returned nil")
	case even != nil:
		if want := (n + 1) / 2; even.Size() != want {
			failf("even comm: size %d, want %d", even.Size(), want)
		}
		// key -rank reverses the order.
		if want := (n+1)/2 - 1 - rank/2; even.Rank() != want {
			failf("even comm: rank %d, want %d", even.Rank(), want)
		}
		must("free even", even.Free())
	}

	// Range-checked arguments are errors, not aborts.
	for _, c := range []struct {
		name string
		err  error
	}{
		{"bcast root -1", w.Bcast(buf[:1], -1)},
		{"bcast root n", w.Bcast(buf[:1], n)},
		{"allreduce op 9", func() error { _, err := w.AllreduceInt64(1, mpi.Op(9)); return err }()},
		{"split color -2", func() error { _, err := w.Split(-2, 0); return err }()},
		{"free world", w.Free()},
	} {
		if !errors.Is(c.err, mpi.ErrRange) {
			failf("%s: got %v, want ErrRange", c.name, c.err)
		}
	}

	if *big > 0 {
		bigBcast(w, *big)
	}

	if *truncate && n <= 2 {
		truncated(w)
	}

	// Agree on the outcome before finalising.
	bad, err := w.AllreduceInt64(int64(fails), mpi.Sum)
	must("final allreduce", err)
	must("barrier", w.Barrier())
	must("finalize", mpi.Finalize())
	if err := w.Barrier(); !errors.Is(err, mpi.ErrNotInitialized) {
		failf("Barrier after Finalize: got %v, want ErrNotInitialized", err)
	}
	if err := mpi.Init(); !errors.Is(err, mpi.ErrFinalized) {
		failf("Init after Finalize: got %v, want ErrFinalized", err)
	}
	if fails > 0 || bad > 0 {
		fmt.Fprintf(os.Stderr, "rank %d: %d local failures, %d in the job\n", rank, fails, bad)
		os.Exit(1)
	}
	fmt.Printf("ok rank %d size %d\n", rank, n)
}

// truncated broadcasts 1000 bytes from rank 0 into 10-byte buffers: MPI
// itself reports the error (MPI_ERRORS_RETURN), on the receiving ranks,
// as an *mpi.Error with MPI's message, and the job goes on. Only with two
// ranks or fewer: with more, a failed rank stops forwarding in the
// broadcast tree and the ranks below it wait forever (MPI promises
// nothing after a failed collective).
func truncated(w *mpi.Comm) {
	n := 1000
	if w.Rank() != 0 {
		n = 10
	}
	err := w.Bcast(make([]byte, n), 0)
	if w.Rank() == 0 {
		return // the sender may or may not notice
	}
	var me *mpi.Error
	if !errors.As(err, &me) || me.Message == "" || me.Call != "MPI_Bcast" {
		failf("truncated bcast: got %v, want an *mpi.Error from MPI_Bcast", err)
		return
	}
	if rank == 1 {
		fmt.Printf("truncated bcast error: %s\n", firstLine(err.Error()))
	}
}

// bigBcast sends size bytes in one Bcast call (which must split it at
// mpi.MaxCount) and checks a sample of them and the tail.
func bigBcast(w *mpi.Comm, size int64) {
	b := make([]byte, size)
	if w.Rank() == 0 {
		for i := range b {
			b[i] = pattern(i)
		}
	}
	must("big bcast", w.Bcast(b, 0))
	for i := 0; i < len(b); i += 4093 {
		if b[i] != pattern(i) {
			failf("big bcast: byte %d is %d, want %d", i, b[i], pattern(i))
			return
		}
	}
	for i := len(b) - 1<<20; i < len(b); i++ {
		if b[i] != pattern(i) {
			failf("big bcast: byte %d is %d, want %d", i, b[i], pattern(i))
			return
		}
	}
	if rank == 0 {
		fmt.Printf("big bcast %d bytes ok\n", size)
	}
}

func checkPattern(what string, b []byte) {
	for i := range b {
		if b[i] != pattern(i) {
			failf("%s: byte %d is %d, want %d", what, i, b[i], pattern(i))
			return
		}
	}
}

func firstLine(s string) string {
	for i := range len(s) {
		if s[i] == '\n' {
			return s[:i]
		}
	}
	return s
}
