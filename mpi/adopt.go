package mpi

import "errors"

// ErrAdopted is returned by Finalize when MPI belongs to the program that
// initialised it (see Adopt): only that program may finalise it.
var ErrAdopted = errors.New("mpi: MPI was initialised by the program, which finalises it")
