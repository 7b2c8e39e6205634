package mpi

import (
	"errors"
	"testing"
)

func TestChunks(t *testing.T) {
	for _, c := range []struct {
		name      string
		n, max    int
		wantSizes []int
	}{
		{"empty", 0, 4, nil},
		{"one short", 3, 4, []int{3}},
		{"exact", 8, 4, []int{4, 4}},
		{"tail", 9, 4, []int{4, 4, 1}},
		{"max one", 3, 1, []int{1, 1, 1}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := make([]byte, c.n)
			for i := range b {
				b[i] = byte(i)
			}
			var sizes []int
			next := 0
			err := chunks(b, c.max, func(p []byte) error {
				sizes = append(sizes, len(p))
				for _, x := range p {
					if x != byte(next) {
						t.Fatalf("byte %d out of order", next)
					}
					next++
				}
				return nil
			})
			if err != nil || len(sizes) != len(c.wantSizes) {
				t.Fatalf("sizes %v err %v, want %v", sizes, err, c.wantSizes)
			}
			for i := range sizes {
				if sizes[i] != c.wantSizes[i] {
					t.Fatalf("sizes %v, want %v", sizes, c.wantSizes)
				}
			}
		})
	}
	stop := errors.New("stop")
	calls := 0
	if err := chunks(make([]byte, 10), 2, func([]byte) error { calls++; return stop }); err != stop || calls != 1 {
		t.Fatalf("chunks did not stop at the first error: %v after %d calls", err, calls)
	}
}

func TestChecks(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want error
	}{
		{"root ok", checkRoot("x", 0, 1), nil},
		{"root last", checkRoot("x", 3, 4), nil},
		{"root negative", checkRoot("x", -1, 4), ErrRange},
		{"root size", checkRoot("x", 4, 4), ErrRange},
		{"op sum", checkOp(Sum), nil},
		{"op bor", checkOp(Bor), nil},
		{"op unknown", checkOp(Op(4)), ErrRange},
		{"op negative", checkOp(Op(-1)), ErrRange},
		{"color 0", checkColor(0), nil},
		{"color undefined", checkColor(Undefined), nil},
		{"color negative", checkColor(-5), ErrRange},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.want == nil && c.err != nil || c.want != nil && !errors.Is(c.err, c.want) {
				t.Fatalf("got %v, want %v", c.err, c.want)
			}
		})
	}
}

// TestLifecycle runs in one process as a job of one rank: the stand-in
// without the mpi tag, an MPI singleton with it.
func TestLifecycle(t *testing.T) {
	w := World()
	if Initialized() {
		t.Fatal("initialized before Init")
	}
	if err := w.Barrier(); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Barrier before Init: %v", err)
	}
	if err := Init(); err != nil {
		t.Fatal(err)
	}
	if err := Init(); err != nil {
		t.Fatalf("second Init: %v", err)
	}
	if !Initialized() || w.Rank() != 0 || w.Size() != 1 {
		t.Fatalf("after Init: initialized %v rank %d size %d", Initialized(), w.Rank(), w.Size())
	}
	if LibraryVersion() == "" {
		t.Error("empty LibraryVersion")
	}
	buf := []byte("unchanged")
	if err := w.Bcast(buf, 0); err != nil || string(buf) != "unchanged" {
		t.Errorf("Bcast: %v %q", err, buf)
	}
	if err := w.Bcast(buf, 1); !errors.Is(err, ErrRange) {
		t.Errorf("Bcast root 1: %v", err)
	}
	for _, op := range []Op{Min, Max, Sum} {
		if v, err := w.AllreduceInt64(-1<<40, op); err != nil || v != -1<<40 {
			t.Errorf("AllreduceInt64 %v: %d %v", op, v, err)
		}
	}
	if v := []int64{7, -1 << 40}; w.AllreduceInt64s(v, Sum) != nil || v[0] != 7 || v[1] != -1<<40 {
		t.Errorf("AllreduceInt64s: %v", v)
	}
	if err := w.AllreduceInt64s([]int64{1}, Op(9)); err == nil {
		t.Error("AllreduceInt64s op 9: no error")
	}
	node, err := w.SplitShared()
	if err != nil || node.Size() != 1 || node.Rank() != 0 {
		t.Fatalf("SplitShared: %v", err)
	}
	if err := node.Free(); err != nil {
		t.Error(err)
	}
	if err := node.Free(); !errors.Is(err, ErrFreed) {
		t.Errorf("second Free: %v", err)
	}
	if err := node.Barrier(); !errors.Is(err, ErrFreed) {
		t.Errorf("Barrier on freed: %v", err)
	}
	if c, err := w.Split(Undefined, 0); err != nil || c != nil {
		t.Errorf("Split Undefined: %v %v", c, err)
	}
	c, err := w.Split(3, 0)
	if err != nil || c.Size() != 1 {
		t.Fatalf("Split: %v", err)
	}
	if err := w.Free(); !errors.Is(err, ErrRange) {
		t.Errorf("Free world: %v", err)
	}
	if err := Finalize(); err != nil {
		t.Fatal(err)
	}
	if err := c.Barrier(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("Barrier after Finalize: %v", err)
	}
	if err := Init(); !errors.Is(err, ErrFinalized) {
		t.Errorf("Init after Finalize: %v", err)
	}
}
