// Command libkbundle is the C library behind the Python package kbundle
// (python/): `kbundle load` and `kbundle harvest` as calls made on every
// rank of a program that already runs MPI, such as Python with mpi4py. Build it once per MPI
// library, as a shared object:
//
//	CC=mpicc.openmpi go build -buildmode=c-shared -tags mpi -o libkbundle-openmpi.so ./cmd/libkbundle
//	CC=mpicc.mpich   go build -buildmode=c-shared -tags mpi -o libkbundle-mpich.so   ./cmd/libkbundle
//
// (`make python` does both). The C interface, all strings UTF-8 and
// NUL-terminated, every returned string malloc'ed and released with
// kbundle_free:
//
//	char *kbundle_load(long long comm, const char *request);
//	char *kbundle_harvest(long long comm, const char *request);
//	char *kbundle_status(const char *request);
//	char *kbundle_mpi_family(void);
//	void  kbundle_free(char *s);
//
// kbundle_load is collective over the communicator whose Fortran handle
// is comm (mpi4py: comm.py2f()); request and the result are JSON objects
// (loadcmd.Request and loadcmd.Outcome). kbundle_harvest is `kbundle
// harvest` in the same way, under the same rules (loadcmd.HarvestRequest
// and loadcmd.HarvestOutcome). kbundle_status is `kbundle status --json`
// on this node, not collective, making no MPI call (loadcmd.StatusRequest
// and loadcmd.StatusAnswer). kbundle_mpi_family names the MPI the
// library was built for ("openmpi" or "mpich"), making no MPI call: the
// caller checks it against the program's MPI before kbundle_load, since a
// library built for another MPI has its MPI calls bound to the program's
// libmpi, whose ABI differs (kbundle_load and kbundle_harvest refuse that
// case too, before any call with a handle). Both adopt the MPI the
// program initialised (they never initialise or finalise MPI; the program
// must provide MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE), work on a
// duplicate of the communicator, never exit the process and install no
// signal handler; when the call's timeout runs out it ends the whole job
// with MPI_Abort, as `kbundle load` does, since a collective cannot be
// abandoned half-way.
package main

/*
#include <stdlib.h>
*/
import "C"

import (
	"context"
	"fmt"
	"os"
	"unsafe"

	"github.com/kbundle/kbundle/mpi"
)

//export kbundle_load
func kbundle_load(comm C.longlong, request *C.char) *C.char {
	out := loadFortran(context.Background(), int64(comm), []byte(C.GoString(request)))
	return C.CString(string(out))
}

//export kbundle_harvest
func kbundle_harvest(comm C.longlong, request *C.char) *C.char {
	out := harvestFortran(context.Background(), int64(comm), []byte(C.GoString(request)))
	return C.CString(string(out))
}

//export kbundle_mpi_family
func kbundle_mpi_family() *C.char {
	return C.CString(mpi.BuildFamily())
}

//export kbundle_free
func kbundle_free(s *C.char) {
	C.free(unsafe.Pointer(s))
}

// abortJob is the load's OnTimeout: the message on stderr, then MPI_Abort
// of the whole job (the collective cannot be abandoned half-way).
func abortJob(msg string) {
	fmt.Fprintf(os.Stderr, "kbundle: %s\n", msg)
	mpi.Abort(exitError)
}

// exitError is MPI_Abort's error code on a timeout, as `kbundle load`.
const exitError = 1

func main() {}
