package mpi

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// sharedBlobBundle packs 1024 names sharing one 1 MiB content: a 1 MiB
// bundle that unpacks to 1 GiB, slow enough to extract that a signal
// lands mid-way.
func sharedBlobBundle(t *testing.T, kb string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "shared")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1<<20)
	rand.Read(b)
	first := filepath.Join(dir, "f0000")
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 1024; i++ {
		if err := os.Link(first, filepath.Join(dir, fmt.Sprintf("f%04d", i))); err != nil {
			t.Fatal(err)
		}
	}
	return packFastest(t, kb, dir)
}

// TestKilledLoadCleanedByClean shows what docs/troubleshooting.md says of
// a load whose ranks are killed before they can clean up (SIGKILL, a node
// failure, or Open MPI's mpirun signalled itself, which kills its ranks
// at once: review finding V7): their temporary trees stay beside DEST, and
// `kbundle clean --stale DIR` (what the job scripts' EXIT trap runs) removes
// them, under both MPIs. With Open MPI, OMPI_MCA_odls_base_sigkill_timeout
// gives the ranks the time to clean up themselves: a SIGTERM to mpirun
// then leaves nothing.
func TestKilledLoadCleanedByClean(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	file := sharedBlobBundle(t, kb)
	for _, v := range testutil.MPIVariants {
		kbm := testutil.Kbundle(t, v)
		t.Run(string(v)+"/ranks-killed", func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			dir := filepath.Dir(dest)
			cmd := testutil.MPICommand(context.Background(), v, 2, kbm, "load", "--jobs", "1", "--bundle", file, "--to", dest)
			cmd.Env = append(cmd.Env, "KBUNDLE_TEST_RANKS_PER_NODE=1")
			_, _, stderr := interruptWith(t, cmd, dir, func() {
				for _, pid := range testutil.Processes(kbm) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			})
			left := temps(dir)
			if len(left) == 0 {
				t.Skipf("the ranks finished before they were killed: nothing to clean, the test proves nothing\n%s", stderr)
			}
			so, se, code := testutil.Run(t, nil, kbm, "clean", "--stale", dir)
			if code != 0 {
				t.Fatalf("kbundle clean --stale: exit %d\n%s%s", code, so, se)
			}
			if now := temps(dir); len(now) != 0 {
				t.Errorf("kbundle clean --stale left %v (before: %v)\n%s", now, left, se)
			}
			if !strings.Contains(se, "left by a kbundle run that was killed") {
				t.Errorf("kbundle clean --stale does not say what it removed\n%s", se)
			}
		})
		if v != testutil.OpenMPI {
			continue
		}
		t.Run(string(v)+"/launcher-sigkill-timeout", func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			dir := filepath.Dir(dest)
			cmd := testutil.MPICommand(context.Background(), v, 2, kbm, "load", "--jobs", "1", "--bundle", file, "--to", dest)
			cmd.Env = append(cmd.Env, "KBUNDLE_TEST_RANKS_PER_NODE=1", "OMPI_MCA_odls_base_sigkill_timeout=3")
			_, _, stderr := interrupt(t, cmd, dir, syscall.SIGTERM)
			check(t, -1, -1, 0, stderr, dir)
		})
	}
}
