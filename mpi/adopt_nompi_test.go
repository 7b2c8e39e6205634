//go:build !mpi

package mpi

import (
	"errors"
	"testing"
)

// Without MPI there is no program-initialised MPI to adopt: Adopt and
// FromFortran fail with ErrNotInitialized, saying how to build with MPI.
// (With MPI they are tested from Python: test/python.)
func TestAdoptWithoutMPI(t *testing.T) {
	if err := Adopt(); !errors.Is(err, ErrNotInitialized) {
		t.Errorf("Adopt: %v, want ErrNotInitialized", err)
	}
	if c, err := FromFortran(0); c != nil || !errors.Is(err, ErrNotInitialized) {
		t.Errorf("FromFortran: %v %v, want nil and ErrNotInitialized", c, err)
	}
}
