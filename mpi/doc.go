// Package mpi is kbundle's thin cgo binding to the site's MPI library
// (Open MPI or MPICH), just large enough for collective loading: init and
// finalize, the world communicator, barrier, byte broadcast of any
// length, a 64-bit integer all-reduce, split and split-by-shared-node,
// free and abort.
//
// Build it with the mpi build tag and the MPI compiler wrapper as cgo's
// C compiler:
//
//	CC=mpicc.openmpi go build -tags mpi ./cmd/kbundle   # Open MPI
//	CC=mpicc.mpich   go build -tags mpi ./cmd/kbundle   # MPICH
//
// Without the tag the package is a stand-in with Enabled == false whose
// World is a communicator of size one: every collective is trivial, so
// programs built without MPI behave as a job of one rank.
//
// Every MPI call runs on one locked OS thread, whichever goroutine makes
// it, so MPI is initialised with (and checked for) MPI_THREAD_FUNNELED.
// Communicators use MPI_ERRORS_RETURN: every failed call returns an
// *Error carrying MPI's own message. MPI handles (whose C types differ
// between MPI libraries) never leave the C side; Go holds table indexes.
//
// A library loaded into a program that initialised MPI itself (Python with
// mpi4py: cmd/libkbundle) calls Adopt instead of Init, which needs
// MPI_THREAD_SERIALIZED or more since the calls come from the package's
// own thread, never finalises, and refuses (ErrABI) a process that runs
// another MPI library than the one it was compiled for; and FromFortran
// to use the program's communicator (a duplicate of it) from its Fortran
// handle.
//
// The package must never call MPI from any other thread, never pass a
// count above MaxCount to MPI (counts are C ints: larger ones fail or
// silently wrap), and never terminate the process except in Abort.
package mpi
