//go:build mpi

package mpi

/*
#include <stdlib.h>
#include "kbmpi.h"
*/
import "C"

import (
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"
)

// Enabled reports whether this build is linked against an MPI library.
const Enabled = true

// Process-wide MPI state: stateNew, stateInit, stateDone. It changes only
// on the MPI thread; other goroutines read it.
const (
	stateNew int32 = iota
	stateInit
	stateDone
)

var (
	state     atomic.Int32
	startOnce sync.Once
	calls     chan func()
	world     = &Comm{h: 0}
)

// serve runs every MPI call on one locked OS thread.
func serve() {
	runtime.LockOSThread()
	for f := range calls {
		f()
	}
}

// onThread runs f on the MPI thread and waits for it.
func onThread(f func()) {
	startOnce.Do(func() {
		calls = make(chan func())
		go serve()
	})
	done := make(chan struct{})
	calls <- func() {
		defer close(done)
		f()
	}
	<-done
}

// mpiError converts an MPI return code; it runs on the MPI thread.
func mpiError(call string, rc C.int) error {
	switch rc {
	case C.kb_success():
		return nil
	case C.KB_ERR_HANDLE:
		return fmt.Errorf("mpi: %s: %w", call, ErrFreed)
	case C.KB_ERR_STOPPED:
		return fmt.Errorf("mpi: %s: stopped: the job is being aborted", call)
	case C.KB_ERR_NOMEM:
		return fmt.Errorf("mpi: %s: out of memory for the communicator table", call)
	}
	n := C.kb_error_string_max()
	buf := (*C.char)(C.malloc(C.size_t(n) + 1))
	defer C.free(unsafe.Pointer(buf))
	var class C.int
	C.kb_error_string(rc, buf, n+1, &class)
	msg := strings.TrimSpace(C.GoString(buf))
	if msg == "" {
		msg = "unknown error"
	}
	return &Error{Call: call, Code: int(rc), Class: int(class), Message: msg}
}

// call runs f on the MPI thread if MPI is initialised and converts its
// return code.
func call(name string, f func() C.int) error {
	var err error
	onThread(func() {
		if state.Load() != stateInit {
			err = fmt.Errorf("mpi: %s: %w", name, ErrNotInitialized)
			return
		}
		err = mpiError(name, f())
	})
	return err
}

// Init initialises MPI with MPI_THREAD_FUNNELED (all calls are funnelled
// to one thread) and fails if the library provides less. If MPI was
// already initialised by other code in the process, Init adopts it. A
// second Init is a no-op; Init after Finalize fails with ErrFinalized.
func Init() error {
	var err error
	onThread(func() {
		var done bool
		if done, err = started(); done {
			return
		}
		var provided, required C.int
		if err = mpiError("MPI_Init_thread", C.kb_init(&provided, &required)); err != nil {
			return
		}
		if provided < required {
			err = fmt.Errorf("mpi: MPI_Init_thread: provided level %d, need %d (MPI_THREAD_FUNNELED): %w", provided, required, ErrThreadLevel)
			// MPI is initialised but unusable for us; leave it to Abort
			// or exit, as finalising needs the other ranks.
			state.Store(stateInit)
			return
		}
		if err = readWorld(); err != nil {
			return
		}
		state.Store(stateInit)
	})
	return err
}

// started says whether Init or Adopt has nothing to do: MPI is this
// package's already (nil), or was finalised (ErrFinalized).
func started() (bool, error) {
	switch state.Load() {
	case stateInit:
		return true, nil
	case stateDone:
		return true, ErrFinalized
	}
	return false, nil
}

// readWorld records the world's rank and size (after Init or Adopt, on
// the MPI thread).
func readWorld() error {
	var rank, size C.int
	if err := mpiError("MPI_Comm_rank", C.kb_rank(0, &rank)); err != nil {
		return err
	}
	if err := mpiError("MPI_Comm_size", C.kb_size(0, &size)); err != nil {
		return err
	}
	world.rank, world.size = int(rank), int(size)
	return nil
}

// Finalize finalises MPI, freeing every communicator made by Split and
// SplitShared. It is collective over the world. After Adopt it does
// nothing and returns ErrAdopted.
func Finalize() error {
	var err error
	onThread(func() {
		if state.Load() != stateInit {
			err = fmt.Errorf("mpi: MPI_Finalize: %w", ErrNotInitialized)
			return
		}
		if adopted.Load() {
			err = fmt.Errorf("mpi: MPI_Finalize: %w", ErrAdopted)
			return
		}
		err = mpiError("MPI_Finalize", C.kb_finalize())
		state.Store(stateDone)
	})
	return err
}

// Initialized reports whether Init succeeded and Finalize was not called.
func Initialized() bool { return state.Load() == stateInit }

// LibraryVersion returns MPI_Get_library_version's text, trimmed.
func LibraryVersion() string {
	var s string
	onThread(func() {
		n := C.kb_library_version_max()
		buf := (*C.char)(C.malloc(C.size_t(n) + 1))
		defer C.free(unsafe.Pointer(buf))
		if C.kb_library_version(buf, n+1) != C.kb_success() {
			s = "unknown MPI library"
			return
		}
		s = strings.TrimSpace(C.GoString(buf))
	})
	return s
}

// Abort terminates every rank of the world with the given exit code
// (MPI_Abort). Without MPI initialised it exits the process. If the MPI
// thread is busy (in a collective that does not complete) for more than
// 10 seconds, Abort calls MPI_Abort from the calling thread instead.
func Abort(code int) {
	if state.Load() != stateInit {
		os.Exit(code)
	}
	C.kb_idle_stop() // an IdleBarrier returns: the MPI thread is free
	go onThread(func() { C.kb_abort(0, C.int(code)) })
	time.Sleep(10 * time.Second)
	C.kb_abort(0, C.int(code))
	os.Exit(code)
}

// Comm is a communicator. Its methods may be called from any goroutine;
// collectives must be called in the same order on every rank, as in MPI.
type Comm struct {
	h          int // index in the C table
	rank, size int
	freed      atomic.Bool
}

// World returns MPI_COMM_WORLD. Its Rank and Size are valid after Init
// (before, they are 0 and 0).
func World() *Comm { return world }

// Rank returns the calling process's rank in c.
func (c *Comm) Rank() int { return c.rank }

// Size returns the number of processes in c.
func (c *Comm) Size() int { return c.size }

func (c *Comm) check(call string) error {
	if c.freed.Load() {
		return fmt.Errorf("mpi: %s: %w", call, ErrFreed)
	}
	return nil
}

// Barrier blocks until every rank of c has called it.
func (c *Comm) Barrier() error {
	if err := c.check("MPI_Barrier"); err != nil {
		return err
	}
	return call("MPI_Barrier", func() C.int { return C.kb_barrier(C.int(c.h)) })
}

// idleFirstPoll is IdleBarrier's first sleep.
const idleFirstPoll = 50 * time.Microsecond

// IdleBarrier is Barrier for ranks that may wait long while others work:
// instead of spinning in MPI (as MPI_Barrier does, taking a core from the
// ranks that work), it starts MPI_Ibarrier and tests it, sleeping in
// between: first idleFirstPoll, each sleep twice the last, up to maxPoll.
// A short barrier is seen done soon after it is; a long one costs one
// test every maxPoll, and may take up to maxPoll a round to finish once
// the last rank comes (a sleeping rank forwards nothing). The whole wait
// is one call on the MPI thread, in C: a wait of Go timers and thread
// handoffs for each test cost the 9 waiting ranks of a 12-rank load on 2
// cores 0.3-0.5 s of CPU each, while their leaders worked. Abort ends the
// wait.
func (c *Comm) IdleBarrier(maxPoll time.Duration) error {
	if err := c.check("MPI_Ibarrier"); err != nil {
		return err
	}
	return call("MPI_Ibarrier", func() C.int {
		return C.kb_idle_barrier(C.int(c.h), C.long(idleFirstPoll), C.long(maxPoll)) // C caps the first at maxPoll
	})
}

// Bcast broadcasts buf from root to every rank of c; every rank must pass
// a buffer of the same length. Any length works: buffers longer than
// MaxCount go in several MPI_Bcast calls of MPI_BYTE.
func (c *Comm) Bcast(buf []byte, root int) error {
	if err := c.check("MPI_Bcast"); err != nil {
		return err
	}
	if !Initialized() {
		return fmt.Errorf("mpi: MPI_Bcast: %w", ErrNotInitialized)
	}
	if err := checkRoot("MPI_Bcast", root, c.size); err != nil {
		return err
	}
	return chunks(buf, MaxCount, func(b []byte) error {
		p := unsafe.Pointer(unsafe.SliceData(b))
		return call("MPI_Bcast", func() C.int {
			return C.kb_bcast(C.int(c.h), p, C.int(len(b)), C.int(root))
		})
	})
}

// AllreduceInt64 combines v from every rank of c with op and returns the
// result on every rank.
func (c *Comm) AllreduceInt64(v int64, op Op) (int64, error) {
	if err := c.check("MPI_Allreduce"); err != nil {
		return 0, err
	}
	if err := checkOp(op); err != nil {
		return 0, err
	}
	var out C.int64_t
	err := call("MPI_Allreduce", func() C.int {
		return C.kb_allreduce_i64(C.int(c.h), C.int64_t(v), &out, C.int(op))
	})
	return int64(out), err
}

// AllreduceInt64s combines each element of v from every rank of c with op,
// in place: one MPI_Allreduce for the lot.
func (c *Comm) AllreduceInt64s(v []int64, op Op) error {
	if err := c.check("MPI_Allreduce"); err != nil {
		return err
	}
	if err := checkOp(op); err != nil {
		return err
	}
	if len(v) == 0 {
		return nil
	}
	if len(v) > MaxCount {
		return fmt.Errorf("mpi: MPI_Allreduce: %d values, at most %d", len(v), MaxCount)
	}
	return call("MPI_Allreduce", func() C.int {
		return C.kb_allreduce_i64s(C.int(c.h), (*C.int64_t)(unsafe.Pointer(unsafe.SliceData(v))), C.int(len(v)), C.int(op))
	})
}

// Split partitions c by color (>= 0, or Undefined) and orders each part
// by key, then rank (MPI_Comm_split). A rank with color Undefined gets a
// nil *Comm and a nil error.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.check("MPI_Comm_split"); err != nil {
		return nil, err
	}
	if err := checkColor(color); err != nil {
		return nil, err
	}
	col := C.int(color)
	if color == Undefined {
		col = C.kb_undefined()
	}
	return c.newComm("MPI_Comm_split", func(h *C.int) C.int {
		return C.kb_split(C.int(c.h), col, C.int(key), h)
	})
}

// SplitShared partitions c into communicators of ranks that can share
// memory, that is one per node (MPI_Comm_split_type with
// MPI_COMM_TYPE_SHARED), keeping the order of c.
func (c *Comm) SplitShared() (*Comm, error) {
	if err := c.check("MPI_Comm_split_type"); err != nil {
		return nil, err
	}
	return c.newComm("MPI_Comm_split_type", func(h *C.int) C.int {
		return C.kb_split_shared(C.int(c.h), C.int(c.rank), h)
	})
}

func (c *Comm) newComm(name string, f func(*C.int) C.int) (*Comm, error) {
	var n *Comm
	err := call(name, func() C.int {
		var h C.int
		if rc := f(&h); rc != C.kb_success() {
			return rc
		}
		if h < 0 {
			return C.kb_success() // MPI_COMM_NULL: color Undefined
		}
		n = &Comm{h: int(h)}
		var r, s C.int
		if rc := C.kb_rank(h, &r); rc != C.kb_success() {
			return rc
		}
		if rc := C.kb_size(h, &s); rc != C.kb_success() {
			return rc
		}
		n.rank, n.size = int(r), int(s)
		return C.kb_success()
	})
	if err != nil {
		return nil, err
	}
	return n, nil
}

// Free releases a communicator made by Split or SplitShared. The world
// cannot be freed.
func (c *Comm) Free() error {
	if c.h == 0 {
		return fmt.Errorf("mpi: MPI_Comm_free: the world communicator cannot be freed: %w", ErrRange)
	}
	if c.freed.Swap(true) {
		return fmt.Errorf("mpi: MPI_Comm_free: %w", ErrFreed)
	}
	return call("MPI_Comm_free", func() C.int { return C.kb_free(C.int(c.h)) })
}

// Exit ends the process with code. After MPI was initialised it leaves
// through the C library's exit, not os.Exit: the MPI library's atexit
// handlers run, and MPICH 5's PMI client tells its process manager that
// this process ended cleanly there. Go's os.Exit skips them, and MPICH
// 5.0's Hydra then takes the first rank to exit for a failed one and
// kills the others (the job ends with 9).
func Exit(code int) {
	if state.Load() == stateNew {
		os.Exit(code)
	}
	os.Stdout.Sync()
	os.Stderr.Sync()
	C.exit(C.int(code))
}
