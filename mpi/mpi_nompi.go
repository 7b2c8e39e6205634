//go:build !mpi

package mpi

import (
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"
)

// Enabled reports whether this build is linked against an MPI library.
const Enabled = false

const (
	stateNew int32 = iota
	stateInit
	stateDone
)

var (
	state   atomic.Int32
	stateMu sync.Mutex
	world   = &Comm{world: true}
)

// Init marks the stand-in as initialised; the world has one rank.
func Init() error {
	stateMu.Lock()
	defer stateMu.Unlock()
	switch state.Load() {
	case stateDone:
		return ErrFinalized
	case stateNew:
		world.size = 1
		state.Store(stateInit)
	}
	return nil
}

// Finalize ends the stand-in's initialised state.
func Finalize() error {
	stateMu.Lock()
	defer stateMu.Unlock()
	if state.Load() != stateInit {
		return fmt.Errorf("mpi: MPI_Finalize: %w", ErrNotInitialized)
	}
	state.Store(stateDone)
	return nil
}

// Initialized reports whether Init succeeded and Finalize was not called.
func Initialized() bool { return state.Load() == stateInit }

// LibraryVersion says that this build has no MPI.
func LibraryVersion() string { return "built without MPI" }

// Abort exits the process with code.
func Abort(code int) { os.Exit(code) }

// Comm is a communicator of one rank.
type Comm struct {
	world bool
	size  int
	freed atomic.Bool
}

// World returns the one-rank world. Its Size is 1 after Init (0 before).
func World() *Comm { return world }

// Rank returns 0.
func (c *Comm) Rank() int { return 0 }

// Size returns 1 (0 for the world before Init).
func (c *Comm) Size() int { return c.size }

func (c *Comm) check(call string) error {
	if !Initialized() {
		return fmt.Errorf("mpi: %s: %w", call, ErrNotInitialized)
	}
	if c.freed.Load() {
		return fmt.Errorf("mpi: %s: %w", call, ErrFreed)
	}
	return nil
}

// Barrier returns at once.
func (c *Comm) Barrier() error { return c.check("MPI_Barrier") }

// IdleBarrier returns at once.
func (c *Comm) IdleBarrier(maxPoll time.Duration) error { return c.check("MPI_Ibarrier") }

// Bcast leaves buf as it is; root must be 0.
func (c *Comm) Bcast(buf []byte, root int) error {
	if err := c.check("MPI_Bcast"); err != nil {
		return err
	}
	return checkRoot("MPI_Bcast", root, c.size)
}

// AllreduceInt64 returns v.
func (c *Comm) AllreduceInt64(v int64, op Op) (int64, error) {
	if err := c.check("MPI_Allreduce"); err != nil {
		return 0, err
	}
	if err := checkOp(op); err != nil {
		return 0, err
	}
	return v, nil
}

// AllreduceInt64s leaves v as it is.
func (c *Comm) AllreduceInt64s(v []int64, op Op) error {
	if err := c.check("MPI_Allreduce"); err != nil {
		return err
	}
	return checkOp(op)
}

// Split returns a new one-rank communicator, or nil for color Undefined.
func (c *Comm) Split(color, key int) (*Comm, error) {
	if err := c.check("MPI_Comm_split"); err != nil {
		return nil, err
	}
	if err := checkColor(color); err != nil {
		return nil, err
	}
	if color == Undefined {
		return nil, nil
	}
	return &Comm{size: 1}, nil
}

// SplitShared returns a new one-rank communicator.
func (c *Comm) SplitShared() (*Comm, error) {
	if err := c.check("MPI_Comm_split_type"); err != nil {
		return nil, err
	}
	return &Comm{size: 1}, nil
}

// Free releases a communicator made by Split or SplitShared.
func (c *Comm) Free() error {
	if c.world {
		return fmt.Errorf("mpi: MPI_Comm_free: the world communicator cannot be freed: %w", ErrRange)
	}
	if err := c.check("MPI_Comm_free"); err != nil {
		return err
	}
	if c.freed.Swap(true) {
		return fmt.Errorf("mpi: MPI_Comm_free: %w", ErrFreed)
	}
	return nil
}

// Exit ends the process with code (os.Exit: there is no MPI library).
func Exit(code int) { os.Exit(code) }
