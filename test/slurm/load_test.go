package slurm

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// srunMPI is srun's --mpi plugin for each MPI build: Open MPI programs
// start under PMIx, MPICH programs under PMI-2 (the other pairings abort
// or start singletons, see ../shared/notes/launchers.md).
var srunMPI = map[testutil.Variant]string{
	testutil.OpenMPI: "pmix",
	testutil.MPICH:   "pmi2",
}

// loadTask runs `kbundle load` as one srun task and records its exit status
// in STATUS_DIR/<rank>; sh stays the parent so the task's environment
// (PMIx or PMI-2 variables and descriptors) reaches kbundle unchanged.
// Use as: sh -c loadTask KBUNDLE BUNDLE DEST STATUS_DIR.
const loadTask = `"$0" load --bundle "$1" --to "$2"; echo $? > "$3/$SLURM_PROCID"`

// taskStatuses reads the exit statuses loadTask recorded, by rank.
func taskStatuses(t *testing.T, dir string, np int) []int {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*"))
	sort.Strings(files)
	st := make([]int, np)
	seen := 0
	for _, f := range files {
		rank, err := strconv.Atoi(filepath.Base(f))
		if err != nil || rank < 0 || rank >= np {
			t.Fatalf("unexpected status file %s", f)
		}
		b, _ := os.ReadFile(f)
		st[rank], err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatalf("%s: %q", f, b)
		}
		seen++
	}
	if seen != np {
		t.Fatalf("%d of %d tasks recorded an exit status", seen, np)
	}
	return st
}

// packedCache makes a test cache in a temporary folder and packs it there.
func packedCache(t *testing.T) (base, src, bundle string) {
	t.Helper()
	base = t.TempDir()
	src = filepath.Join(base, "cache")
	makeCache(t, src)
	bundle = filepath.Join(base, "cache.kbundle")
	pack(t, testutil.Kbundle(t, testutil.NoMPI), src, bundle)
	return base, src, bundle
}

// TestLoadUnderSrun loads a bundle with `srun --mpi=pmix` (Open MPI build)
// and `srun --mpi=pmi2` (MPICH build), 2 and 4 tasks on the one node
// (overcommitted): every task exits 0 and DEST holds the cache; then a
// missing and a damaged bundle: every task exits 3.
func TestLoadUnderSrun(t *testing.T) {
	needSlurm(t)
	base, src, bundle := packedCache(t)
	damaged := filepath.Join(base, "damaged.kbundle")
	damage(t, bundle, damaged)

	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			try := func(t *testing.T, np int, bundle string) (statuses []int, dest, out string) {
				dir := t.TempDir()
				dest = filepath.Join(dir, "dest")
				st := filepath.Join(dir, "status")
				if err := os.Mkdir(st, 0o755); err != nil {
					t.Fatal(err)
				}
				argv := []string{"srun", "--mpi=" + srunMPI[v], "-n", strconv.Itoa(np), "-O",
					"sh", "-c", loadTask, kb, bundle, dest, st}
				so, se, code := run(t, testutil.MPIEnv, dir, argv...)
				out = fmt.Sprintf("srun exit %d\n--- stdout:\n%s--- stderr:\n%s", code, so, se)
				return taskStatuses(t, st, np), dest, out
			}
			for _, np := range []int{2, 4} {
				t.Run(fmt.Sprintf("np%d", np), func(t *testing.T) {
					st, dest, out := try(t, np, bundle)
					for r, s := range st {
						if s != 0 {
							t.Errorf("task %d: exit %d, want 0\n%s", r, s, out)
						}
					}
					if t.Failed() {
						return
					}
					sameTree(t, src, dest)
				})
			}
			for _, c := range []struct{ name, bundle string }{
				{"missing", filepath.Join(base, "no-such.kbundle")},
				{"damaged", damaged},
			} {
				t.Run(c.name, func(t *testing.T) {
					st, dest, out := try(t, 2, c.bundle)
					for r, s := range st {
						if s != 3 {
							t.Errorf("task %d: exit %d, want 3 (bundle unusable) on every task\n%s", r, s, out)
						}
					}
					// Rank 0's reason names the file.
					if !strings.Contains(out, filepath.Base(c.bundle)) {
						t.Errorf("no reason naming %s in the output\n%s", filepath.Base(c.bundle), out)
					}
					if _, err := os.Stat(dest); err == nil {
						entries, _ := os.ReadDir(dest)
						if len(entries) > 0 {
							t.Errorf("DEST %s holds %d entries after a failed load", dest, len(entries))
						}
					}
				})
			}
		})
	}
}

// TestLoadMismatchedPMI starts each MPI build under the OTHER srun --mpi
// type, the mistake docs/slurm.md warns about: it must end (no hang), and
// both tasks refuse before MPI_Init (exit 2, docs/launchers.md "Build and
// launcher"), rank 0 naming the plugin; before that refusal Open MPI
// failed in MPI_Init and MPICH's singletons each loaded alone.
func TestLoadMismatchedPMI(t *testing.T) {
	needSlurm(t)
	_, _, bundle := packedCache(t)
	for _, c := range []struct {
		v        testutil.Variant
		mpi      string
		mustFail bool
		stderr   string // what the output must say
	}{
		{testutil.OpenMPI, "pmi2", true, "built for Open MPI but runs under srun --mpi=pmi2 (2 tasks): use srun --mpi=pmix"},
		{testutil.MPICH, "pmix", true, "but runs under srun --mpi=pmix (2 tasks): use srun --mpi=pmi2"},
	} {
		t.Run(string(c.v)+"-under-"+c.mpi, func(t *testing.T) {
			kb := testutil.Kbundle(t, c.v)
			dir := t.TempDir()
			st := filepath.Join(dir, "status")
			if err := os.Mkdir(st, 0o755); err != nil {
				t.Fatal(err)
			}
			so, se, code := run(t, testutil.MPIEnv, dir, "srun", "--mpi="+c.mpi, "-n", "2", "-O",
				"sh", "-c", loadTask, kb, bundle, filepath.Join(dir, "dest"), st)
			out := fmt.Sprintf("srun exit %d\n--- stdout:\n%s--- stderr:\n%s", code, so, se)
			failed := 0
			for _, s := range taskStatuses(t, st, 2) {
				if s != 0 {
					failed++
				}
			}
			t.Logf("%d of 2 tasks failed", failed)
			if c.mustFail && failed == 0 {
				t.Errorf("every task succeeded under the wrong PMI type\n%s", out)
			}
			for i, s := range taskStatuses(t, st, 2) {
				if s != 2 {
					t.Errorf("task %d exited %d, want 2 (refused)\n%s", i, s, out)
				}
			}
			if !strings.Contains(se, c.stderr) {
				t.Errorf("stderr does not mention %q\n%s", c.stderr, out)
			}
		})
	}
}
