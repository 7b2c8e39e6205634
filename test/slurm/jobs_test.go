package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestSlurmScripts submits the shipped job scripts to the test cluster, for
// each MPI build with its srun --mpi type, with testdata/tackapp.sh as the
// application (a Tack-like JIT stand-in that reports cache hits):
//
//   - kbundle-warm.sbatch: the application runs once as a plain process
//     (no rank) and compiles everything; the bundle is written;
//   - kbundle-run.sbatch, 2 tasks: every task hits every kernel from the
//     node-local copy, which is removed at the end;
//   - kbundle-run.sbatch with a damaged bundle: the job fails with exit 3
//     and the application does not run;
//   - kbundle-job.sbatch without a bundle and KBUNDLE_WARM_IF_MISSING=1:
//     it warms, loads and every task hits (without it, the default with the
//     harvest on, the first job runs cold and harvests: TestSlurmHarvest);
//     with a damaged bundle: it falls back, every task compiles, the job
//     completes.
func TestSlurmScripts(t *testing.T) {
	needSlurm(t)
	app := repoPath("test/slurm/testdata/tackapp.sh")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			dir := t.TempDir()
			cache := filepath.Join(dir, "cache")
			env := append([]string{
				"KBUNDLE=" + kb,
				"KBUNDLE_SRUN_MPI=" + srunMPI[v],
				"KBUNDLE_PRESET=tack",
				"KBUNDLE_CACHE_DIR=" + cache,
				"TMPDIR=" + dir, // the application's cold-run caches go here
			}, testutil.MPIEnv...)
			bundle := filepath.Join(cache, "cache.kbundle")

			t.Run("warm", func(t *testing.T) {
				j := submit(t, dir, "kbundle-warm-"+string(v), env, nil, repoPath("scripts/slurm/kbundle-warm.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				ls := tackLines(j.Output)
				if len(ls) != 1 || !strings.HasPrefix(ls[0], "tackapp: rank=none ") || !strings.Contains(ls[0], " hits=0 compiled=5 ") {
					t.Fatalf("want one plain (rank=none) run compiling 5 kernels, got %q\n%s", ls, j)
				}
				if _, err := os.Stat(bundle); err != nil {
					t.Fatalf("no bundle after the warm-up job: %v\n%s", err, j)
				}
			})
			if t.Failed() {
				return
			}

			t.Run("run", func(t *testing.T) {
				j := submit(t, dir, "kbundle-run-"+string(v), env, []string{"-n", "2"}, repoPath("scripts/slurm/kbundle-run.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				local := localDir(t, dir, j.ID)
				for _, d := range checkTack(t, j.Output, 2, 5, 0) {
					if !strings.HasPrefix(d, local+"/") {
						t.Errorf("application used %s, want a cache under the loaded copy %s\n%s", d, local, j)
					}
				}
				if _, err := os.Stat(local); err == nil {
					t.Errorf("%s still exists after the job (KBUNDLE_CLEANUP=1 is the default)", local)
				}
			})

			damaged := filepath.Join(dir, "damaged.kbundle")
			if _, err := os.Stat(bundle); err == nil {
				damage(t, bundle, damaged)
			}
			t.Run("run-damaged", func(t *testing.T) {
				envD := append(env[:len(env):len(env)], "KBUNDLE_BUNDLE="+damaged)
				j := submit(t, dir, "kbundle-run-damaged-"+string(v), envD, []string{"-n", "2"}, repoPath("scripts/slurm/kbundle-run.sbatch"), app)
				j.requireState(t, "FAILED", 3)
				if ls := tackLines(j.Output); len(ls) != 0 {
					t.Errorf("the application ran although the load failed: %q", ls)
				}
				if !strings.Contains(j.Output, "exit status 3") {
					t.Errorf("the output does not say why the job stopped\n%s", j)
				}
			})

			t.Run("job-warms", func(t *testing.T) {
				cache2 := filepath.Join(dir, "cache2")
				env2 := append(env[:len(env):len(env)], "KBUNDLE_CACHE_DIR="+cache2, "KBUNDLE_WARM_IF_MISSING=1")
				j := submit(t, dir, "kbundle-job-"+string(v), env2, []string{"-n", "2"}, repoPath("scripts/slurm/kbundle-job.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				if !strings.Contains(j.Output, "kbundle-job: cache: warm") {
					t.Errorf("no 'cache: warm' line\n%s", j)
				}
				ls := tackLines(j.Output)
				// One warm-up run (rank=none, compiles) + two warm ranks.
				if len(ls) != 3 || !strings.HasPrefix(ls[2], "tackapp: rank=none ") || !strings.Contains(ls[2], " hits=0 compiled=5 ") {
					t.Fatalf("want 2 ranks and 1 warm-up run, got %q\n%s", ls, j)
				}
				checkTack(t, strings.Join(ls[:2], "\n"), 2, 5, 0)
				if _, err := os.Stat(filepath.Join(cache2, "cache.kbundle")); err != nil {
					t.Errorf("the job did not leave its bundle for the next one: %v", err)
				}
			})

			t.Run("job-fallback", func(t *testing.T) {
				envD := append(env[:len(env):len(env)], "KBUNDLE_BUNDLE="+damaged)
				j := submit(t, dir, "kbundle-job-fallback-"+string(v), envD, []string{"-n", "2"}, repoPath("scripts/slurm/kbundle-job.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				if !strings.Contains(j.Output, "kbundle-job: cache: cold") {
					t.Errorf("no 'cache: cold' line\n%s", j)
				}
				checkTack(t, j.Output, 2, 0, 5)
			})
		})
	}
}
