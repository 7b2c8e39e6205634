package mpi

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// libraryName is what MPI_Get_library_version starts with for a variant.
var libraryName = map[testutil.Variant]string{
	testutil.OpenMPI: "Open MPI",
	testutil.MPICH:   "MPICH",
	testutil.NoMPI:   "built without MPI",
}

// TestBinding runs test/mpi/internal/mpiprog, which checks package mpi
// on every rank (chunked broadcasts from another OS thread, 64-bit
// all-reduce, splits, range errors, an error reported by MPI itself) and
// agrees on the outcome, under both MPIs with 1, 2 and 4 ranks.
func TestBinding(t *testing.T) {
	for _, v := range testutil.MPIVariants {
		for _, np := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", v, np), func(t *testing.T) {
				prog := testutil.Build(t, v, "./test/mpi/internal/mpiprog")
				stdout, stderr, code := testutil.RunMPI(t, v, np, nil, prog)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				for r := range np {
					if want := fmt.Sprintf("ok rank %d size %d\n", r, np); !strings.Contains(stdout, want) {
						t.Errorf("missing %q\nstdout:\n%s", want, stdout)
					}
				}
				if want := "library: " + libraryName[v]; !strings.Contains(stdout, want) {
					t.Errorf("missing %q\nstdout:\n%s", want, stdout)
				}
				if np == 2 && !strings.Contains(stdout, "truncated bcast error: mpi: MPI_Bcast: ") {
					t.Errorf("no MPI error message for the truncated broadcast\nstdout:\n%s", stdout)
				}
			})
		}
	}
}

// TestBindingIdleAbort: a rank that calls mpi.Abort while it waits in
// IdleBarrier (as a load's timeout guard does on a rank waiting for its
// node's leader) ends the job at once: the wait, one call on the MPI
// thread, returns for the abort, not after Abort's 10 s fallback.
func TestBindingIdleAbort(t *testing.T) {
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			prog := testutil.Build(t, v, "./test/mpi/internal/mpiprog")
			start := time.Now()
			stdout, stderr, code := testutil.RunMPI(t, v, 2, nil, prog, "-idle-abort")
			took := time.Since(start)
			if code == 0 || strings.Contains(stderr, "was not killed") {
				t.Fatalf("exit %d, want the job aborted\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if took > 8*time.Second {
				t.Errorf("the job ended %v after its start, want well before Abort's 10 s fallback\nstderr:\n%s", took.Round(time.Millisecond), stderr)
			}
		})
	}
}

// TestBindingWithoutMPI runs the same program built without MPI: one rank.
func TestBindingWithoutMPI(t *testing.T) {
	prog := testutil.Build(t, testutil.NoMPI, "./test/mpi/internal/mpiprog")
	stdout, stderr, code := testutil.Run(t, nil, prog)
	if code != 0 || !strings.Contains(stdout, "ok rank 0 size 1\n") || !strings.Contains(stdout, "library: built without MPI") {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestBindingBigBcast broadcasts 2 GiB + 4097 bytes in one Bcast call,
// which must be split at mpi.MaxCount (one MPI_Bcast of 2^31 bytes fails,
// and counts wrap beyond 4 GiB). Needs KBUNDLE_TEST_BIG=1 (set by `make
// test`): about 5 GiB of memory and 10 seconds per MPI.
func TestBindingBigBcast(t *testing.T) {
	if os.Getenv("KBUNDLE_TEST_BIG") != "1" {
		t.Skip("set KBUNDLE_TEST_BIG=1 to broadcast more than 2 GiB")
	}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			prog := testutil.Build(t, v, "./test/mpi/internal/mpiprog")
			size := int64(1)<<31 + 4097
			stdout, stderr, code := testutil.RunMPI(t, v, 2, nil, prog, "-truncate=false", fmt.Sprint("-big=", size))
			if code != 0 || !strings.Contains(stdout, fmt.Sprintf("big bcast %d bytes ok", size)) {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		})
	}
}
