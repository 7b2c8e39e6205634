package broadcast

import (
	"time"

	"github.com/kbundle/kbundle/mpi"
)

// Comm is what LoadBundle needs from a communicator. *mpi.Comm implements
// it; a program that uses another MPI binding can wrap its communicator.
// Bcast must accept buffers of any length (up to the chunk size in use,
// see WithChunkSize), and collectives are called in the same order on
// every rank.
type Comm interface {
	Rank() int
	Size() int
	Bcast(buf []byte, root int) error
	AllreduceInt64(v int64, op mpi.Op) (int64, error)
}

// NodeComm is what load.Run needs besides Comm: splitting by node and
// by color, a barrier, and freeing the communicators it made.
type NodeComm interface {
	Comm
	Barrier() error
	// SplitShared returns the communicator of the ranks on this node.
	SplitShared() (NodeComm, error)
	// Split is MPI_Comm_split; every color must be >= 0.
	Split(color, key int) (NodeComm, error)
	Free() error
}

// FromMPI adapts an mpi communicator to NodeComm. Its Barrier sleeps
// between polls (mpi.Comm.IdleBarrier) so that ranks waiting for their
// node's leader leave the cores to it.
func FromMPI(c *mpi.Comm) NodeComm { return mpiComm{c} }

type mpiComm struct{ *mpi.Comm }

// idlePoll is the longest a waiting rank sleeps between checks of whether
// the barrier is done (its sleeps double up to it). Without an MPI
// progress thread a sleeping rank also forwards the barrier's messages
// only when it tests, so each of the barrier's log2(ranks) rounds may wait
// up to idlePoll once the last rank comes: 1 ms keeps that to about 12 ms
// at 4,096 ranks (10 ms would be 0.12 s). Its CPU is the test's: on one
// machine, 11 waiting ranks of a 12-rank load used 0.63 s in all at 1 ms
// and 0.57-0.64 s at 10 ms (0.9 s when each test went through Go).
const idlePoll = time.Millisecond

func (c mpiComm) Barrier() error { return c.Comm.IdleBarrier(idlePoll) }

func (c mpiComm) SplitShared() (NodeComm, error) {
	n, err := c.Comm.SplitShared()
	if err != nil {
		return nil, err
	}
	return mpiComm{n}, nil
}

func (c mpiComm) Split(color, key int) (NodeComm, error) {
	n, err := c.Comm.Split(color, key)
	if err != nil {
		return nil, err
	}
	return mpiComm{n}, nil
}

// Self returns a communicator of one rank, for a load without MPI: its
// collectives return at once, and its splits are itself.
func Self() NodeComm { return selfComm{} }

type selfComm struct{}

func (selfComm) Rank() int                                       { return 0 }
func (selfComm) Size() int                                       { return 1 }
func (selfComm) Bcast([]byte, int) error                         { return nil }
func (selfComm) AllreduceInt64(v int64, _ mpi.Op) (int64, error) { return v, nil }
func (selfComm) Barrier() error                                  { return nil }
func (selfComm) SplitShared() (NodeComm, error)                  { return selfComm{}, nil }
func (selfComm) Split(int, int) (NodeComm, error)                { return selfComm{}, nil }
func (selfComm) Free() error                                     { return nil }

// AllreduceInts combines each element of v from every rank of c with op,
// in place: in one collective where c has AllreduceInt64s (*mpi.Comm and
// the communicators of FromMPI do), else one AllreduceInt64 per element.
// Folding a summary's counts into one call saves a network round trip per
// count (issue 31).
func AllreduceInts(c Comm, v []int64, op mpi.Op) error {
	if vc, ok := c.(interface {
		AllreduceInt64s([]int64, mpi.Op) error
	}); ok {
		return vc.AllreduceInt64s(v, op)
	}
	for i, x := range v {
		r, err := c.AllreduceInt64(x, op)
		if err != nil {
			return err
		}
		v[i] = r
	}
	return nil
}
