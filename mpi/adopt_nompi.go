//go:build !mpi

package mpi

import "fmt"

// errNoMPI is what the stand-in's Adopt and FromFortran return: there is
// no program-initialised MPI to adopt in a build without MPI.
var errNoMPI = fmt.Errorf("mpi: this build has no MPI (build with -tags mpi and CC=mpicc): %w", ErrNotInitialized)

// Adopt fails: a build without MPI cannot use the program's MPI.
func Adopt() error { return errNoMPI }

// FromFortran fails: a build without MPI has no Fortran handles.
func FromFortran(f int64) (*Comm, error) { return nil, errNoMPI }

// BuildFamily is "none": this build has no MPI.
func BuildFamily() string { return "none" }

// BuildHeader is "none": this build has no MPI.
func BuildHeader() string { return "none" }
