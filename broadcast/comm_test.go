package broadcast

import (
	"testing"

	"github.com/kbundle/kbundle/mpi"
)

// TestSelf: the one-rank communicator is rank 0 of 1, its reductions
// return the value given, and its splits are one rank too.
func TestSelf(t *testing.T) {
	c := Self()
	if c.Rank() != 0 || c.Size() != 1 {
		t.Fatalf("rank %d size %d", c.Rank(), c.Size())
	}
	if v, err := c.AllreduceInt64(7, mpi.Max); v != 7 || err != nil {
		t.Errorf("allreduce %d %v", v, err)
	}
	n, err := c.SplitShared()
	if err != nil || n.Size() != 1 || c.Barrier() != nil || n.Free() != nil {
		t.Errorf("split %v", err)
	}
}
