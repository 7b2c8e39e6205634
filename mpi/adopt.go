package mpi

import "errors"

// ErrAdopted is returned by Finalize when MPI belongs to the program that
// initialised it (see Adopt): only that program may finalise it.
var ErrAdopted = errors.New("mpi: MPI was initialised by the program, which finalises it")

// ErrABI is returned by Adopt when the process runs another MPI library
// than the one the package was compiled against (a library built with
// MPICH's mpicc loaded into an Open MPI program, or the reverse): no MPI
// call is safe then.
var ErrABI = errors.New("mpi: the process runs another MPI library than this build's")
