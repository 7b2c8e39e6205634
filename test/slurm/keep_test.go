package slurm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// userDir makes dir holding a file of the user's (a data directory that
// KBUNDLE_LOCAL_DIR names by mistake) and returns a check that it is
// still all there.
func userDir(t *testing.T, dir string) func(t *testing.T, what string) {
	t.Helper()
	f := filepath.Join(dir, "sub", "thesis.tex")
	if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f, []byte("precious\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return func(t *testing.T, what string) {
		t.Helper()
		if b, err := os.ReadFile(f); err != nil || string(b) != "precious\n" {
			t.Errorf("%s: the user's file %s is gone or changed (%q, %v): the job deleted a directory its load did not install", what, f, b, err)
		}
	}
}

// warmBundle packs the Tack-like application's cache into dir/cache.kbundle
// with one plain warm-up run.
func warmBundle(t *testing.T, dir string) (good, damaged string) {
	t.Helper()
	good = filepath.Join(dir, "cache.kbundle")
	so, se, code := run(t, []string{"TMPDIR=" + dir}, dir, testutil.Kbundle(t, testutil.NoMPI), "warm", "--preset", "tack",
		"--dir", filepath.Join(dir, "warm"), "--pack", "-o", good, "--", repoPath("test/slurm/testdata/tackapp.sh"))
	if code != 0 {
		t.Fatalf("kbundle warm: exit %d\n%s%s", code, so, se)
	}
	damaged = filepath.Join(dir, "damaged.kbundle")
	damage(t, good, damaged)
	return good, damaged
}

// TestScriptsKeepUserDirectory is the regression test of S2/U1 of the
// 2026-12-01 reviews: with KBUNDLE_LOCAL_DIR naming an existing directory
// that kbundle did not install, the load refuses it (exit 1), or, with an
// unusable bundle, exits 3 and the fallback runs the application cold;
// in every case the job's clean-up must leave that directory alone. All
// four production scripts, with cleanup on (the default), and the exit-3
// fallback of kbundle-job.sbatch and of the PBS scripts
// (KBUNDLE_FALLBACK=1).
func TestScriptsKeepUserDirectory(t *testing.T) {
	testutil.NeedMPI(t, testutil.OpenMPI)
	testutil.NeedMPI(t, testutil.MPICH)
	app := repoPath("test/slurm/testdata/tackapp.sh")
	dir := t.TempDir()
	good, damaged := warmBundle(t, dir)

	t.Run("pbs", func(t *testing.T) {
		base := append(pbsEnv(t, dir, 2), "KBUNDLE_PRESET=tack", "KBUNDLE_APP="+app)
		base = append(base, testutil.MPIEnv...)
		for _, c := range pbsRunScripts() {
			t.Run(c.name, func(t *testing.T) {
				mine := filepath.Join(dir, "mydata-"+c.name)
				intact := userDir(t, mine)
				env := append(append(base[:len(base):len(base)], c.env...), "KBUNDLE="+testutil.Kbundle(t, c.v), "KBUNDLE_LOCAL_DIR="+mine)
				script := repoPath(c.script)

				so, se, code := run(t, append(env, "KBUNDLE_BUNDLE="+good), dir, "bash", script)
				if code != 1 || len(tackLines(so)) != 0 || !strings.Contains(se, "did not install this directory") {
					t.Errorf("load into the user's directory: want exit 1, the refusal and no application run, got exit %d\n%s%s", code, so, se)
				}
				intact(t, "refused load")

				so, se, code = run(t, append(env, "KBUNDLE_BUNDLE="+damaged, "KBUNDLE_FALLBACK=1"), dir, "bash", script)
				if code != 0 || !strings.Contains(se, "cache: cold") {
					t.Errorf("damaged bundle with KBUNDLE_FALLBACK=1: want exit 0 and a cold run, got exit %d\n%s%s", code, so, se)
				}
				checkTack(t, so, 2, 0, 5)
				intact(t, "cold fallback")
			})
		}
	})

	t.Run("slurm", func(t *testing.T) {
		needSlurm(t)
		for _, v := range testutil.MPIVariants {
			t.Run(string(v), func(t *testing.T) {
				mine := filepath.Join(dir, "mydata-slurm-"+string(v))
				intact := userDir(t, mine)
				env := append([]string{"KBUNDLE=" + testutil.Kbundle(t, v), "KBUNDLE_SRUN_MPI=" + srunMPI[v], "KBUNDLE_PRESET=tack",
					"KBUNDLE_LOCAL_DIR=" + mine, "TMPDIR=" + dir}, testutil.MPIEnv...)
				for _, s := range []string{"kbundle-run", "kbundle-job"} {
					j := submit(t, dir, s+"-refused-"+string(v), append(env, "KBUNDLE_BUNDLE="+good), []string{"-n", "2"},
						repoPath("scripts/slurm/"+s+".sbatch"), app)
					j.requireState(t, "FAILED", 1)
					if len(tackLines(j.Output)) != 0 {
						t.Errorf("%s: the application ran although the load refused its destination\n%s", s, j)
					}
					intact(t, s+", refused load")
				}
				j := submit(t, dir, "kbundle-job-cold-"+string(v), append(env, "KBUNDLE_BUNDLE="+damaged, "KBUNDLE_WARM_IF_MISSING=0"),
					[]string{"-n", "2"}, repoPath("scripts/slurm/kbundle-job.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				if !strings.Contains(j.Output, "kbundle-job: cache: cold") {
					t.Errorf("no 'cache: cold' line\n%s", j)
				}
				checkTack(t, j.Output, 2, 0, 5)
				intact(t, "kbundle-job, cold fallback")
			})
		}
	})
}
