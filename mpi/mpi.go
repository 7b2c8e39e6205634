package mpi

import (
	"errors"
	"fmt"
	"math"
)

// MaxCount is the largest element count one MPI call takes (a C int).
// Bcast splits longer buffers into chunks of at most MaxCount bytes.
const MaxCount = math.MaxInt32

// Undefined as Split's color leaves the calling rank out of every new
// communicator: Split then returns a nil *Comm and a nil error.
const Undefined = -1

// Op is a reduction operation for AllreduceInt64.
type Op int

// Reduction operations.
const (
	Min Op = iota
	Max
	Sum
	Bor // bitwise or
)

func (o Op) String() string {
	switch o {
	case Min:
		return "min"
	case Max:
		return "max"
	case Sum:
		return "sum"
	case Bor:
		return "bor"
	}
	return fmt.Sprintf("Op(%d)", int(o))
}

var (
	// ErrNotInitialized is returned by calls made before Init or after
	// Finalize.
	ErrNotInitialized = errors.New("mpi: not initialized")
	// ErrFinalized is returned by Init after Finalize (MPI cannot be
	// initialised twice in one process).
	ErrFinalized = errors.New("mpi: already finalized")
	// ErrFreed is returned by calls on a communicator after its Free.
	ErrFreed = errors.New("mpi: communicator freed")
	// ErrRange is returned when an argument (root, color, op, count) is
	// out of range; the call was not made.
	ErrRange = errors.New("mpi: argument out of range")
	// ErrThreadLevel is returned by Init when the MPI library does not
	// provide MPI_THREAD_FUNNELED.
	ErrThreadLevel = errors.New("mpi: thread support level too low")
)

// Error is a failed MPI call: the call's name, MPI's error code and
// class, and MPI's own message for the code (MPI_Error_string).
type Error struct {
	Call    string
	Code    int
	Class   int
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("mpi: %s: %s (error code %d, class %d)", e.Call, e.Message, e.Code, e.Class)
}

func checkRoot(call string, root, size int) error {
	if root < 0 || root >= size {
		return fmt.Errorf("mpi: %s: root %d not in [0, %d): %w", call, root, size, ErrRange)
	}
	return nil
}

// Apply combines a and b by o, as MPI_Allreduce does for each pair of
// values: for communicators that reduce without MPI (broadcast's
// FromTransport, broadcasttest). An unknown Op gives a.
func (o Op) Apply(a, b int64) int64 {
	switch o {
	case Min:
		return min(a, b)
	case Max:
		return max(a, b)
	case Sum:
		return a + b
	case Bor:
		return a | b
	}
	return a
}

func checkOp(op Op) error {
	if op < Min || op > Bor {
		return fmt.Errorf("mpi: allreduce: unknown operation %d: %w", int(op), ErrRange)
	}
	return nil
}

func checkColor(color int) error {
	if color < 0 && color != Undefined {
		return fmt.Errorf("mpi: split: color %d is negative (use Undefined): %w", color, ErrRange)
	}
	return nil
}

// chunks calls f for consecutive pieces of b of at most max bytes.
func chunks(b []byte, max int, f func([]byte) error) error {
	for len(b) > 0 {
		n := min(len(b), max)
		if err := f(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}
