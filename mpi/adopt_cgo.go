//go:build mpi

package mpi

/*
#include "kbmpi.h"
*/
import "C"

import (
	"fmt"
	"strings"
	"sync/atomic"
)

// adopted is set by Adopt: MPI belongs to the program, Finalize refuses.
var adopted atomic.Bool

// Adopt makes the package use an MPI that the calling program initialised
// and will finalise itself (Python with mpi4py, for a library loaded into
// it): unlike Init it never initialises MPI, never changes the world's
// error handler, and makes Finalize refuse (ErrAdopted). Because every
// call runs on the package's own thread, not the program's, the program
// must have asked for MPI_THREAD_SERIALIZED or more (mpi4py's default is
// MPI_THREAD_MULTIPLE), and, below MULTIPLE, must make no MPI call of its
// own while one of this package's calls runs. Adopt fails with
// ErrNotInitialized when MPI is not initialised yet, ErrFinalized when it
// was finalised, and ErrThreadLevel when the level is too low. A second
// Adopt, or Adopt after Init, is a no-op.
func Adopt() error {
	var err error
	onThread(func() {
		var done bool
		if done, err = started(); done {
			return
		}
		var provided, required, flag C.int
		rc := C.kb_adopt(&provided, &required, &flag)
		if rc == C.KB_ERR_ABI {
			rt := strings.ReplaceAll(C.GoString(C.kb_runtime_version()), "\x00", "")
			rt, _, _ = strings.Cut(rt, "\n")
			err = fmt.Errorf("mpi: adopt: this code was built for %s, but the process runs %s: %w",
				familyName(BuildFamily()), strings.TrimSpace(rt), ErrABI)
			return
		}
		if err = mpiError("MPI_Query_thread", rc); err != nil {
			return
		}
		switch flag {
		case 0:
			err = fmt.Errorf("mpi: adopt: the program has not initialised MPI: %w", ErrNotInitialized)
			return
		case 2:
			err = fmt.Errorf("mpi: adopt: the program has finalised MPI: %w", ErrFinalized)
			return
		}
		if provided < required {
			err = fmt.Errorf("mpi: adopt: MPI was initialised with thread level %s; kbundle calls MPI from a thread of its own and needs MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE: %w",
				threadLevel(provided), ErrThreadLevel)
			return
		}
		if err = readWorld(); err != nil {
			return
		}
		adopted.Store(true)
		state.Store(stateInit)
	})
	return err
}

// BuildFamily names the MPI ABI the package was compiled against:
// "openmpi", "mpich" (MPICH and the MPIs sharing its ABI, libmpi.so.12),
// "mpi-abi" (the MPI-5 standard ABI, libmpi_abi.so), or "other". It makes
// no MPI call.
func BuildFamily() string { return C.GoString(C.kb_build_family()) }

// BuildHeader names the mpi.h the package was compiled with, e.g.
// "MPICH 4.0.2" or "Open MPI 4.1.4". It makes no MPI call.
func BuildHeader() string { return C.GoString(C.kb_build_header()) }

func familyName(f string) string {
	switch f {
	case "openmpi":
		return "Open MPI"
	case "mpich":
		return "MPICH (or an MPI of its ABI)"
	case "mpi-abi":
		return "the MPI standard ABI"
	}
	return f
}

// threadLevel names an MPI thread support level.
func threadLevel(l C.int) string {
	switch l {
	case C.kb_thread_single():
		return "MPI_THREAD_SINGLE"
	case C.kb_thread_funneled():
		return "MPI_THREAD_FUNNELED"
	case C.kb_thread_serialized():
		return "MPI_THREAD_SERIALIZED"
	case C.kb_thread_multiple():
		return "MPI_THREAD_MULTIPLE"
	}
	return fmt.Sprintf("%d", int(l))
}

// FromFortran returns a duplicate (MPI_Comm_dup) of the communicator
// whose Fortran handle is f, as other bindings give it (mpi4py:
// comm.py2f()); it is collective over that communicator. The duplicate
// keeps this package's messages apart from the program's and returns
// errors instead of aborting; the program's communicator is not changed.
// Free it when done. MPI must be initialised (Init or Adopt). An
// intercommunicator or the null communicator fails with an *Error.
func FromFortran(f int64) (*Comm, error) {
	return world.newComm("MPI_Comm_dup", func(h *C.int) C.int {
		return C.kb_dup_f(C.int64_t(f), h)
	})
}
