package slurm

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// setBundles lists the bundles of the set at path, in order: its base
// (when it exists), then its layers (path.d/NNNNNN-*.kbundle).
func setBundles(path string) []string {
	var out []string
	if _, err := os.Stat(path); err == nil {
		out = append(out, path)
	}
	layers, _ := filepath.Glob(path + ".d/*.kbundle")
	sort.Strings(layers)
	return append(out, layers...)
}

// bundleFiles returns the file names a bundle holds (`kbundle ls`,
// directories left out).
func bundleFiles(t *testing.T, b string) []string {
	t.Helper()
	so, se, code := run(t, nil, "", testutil.Kbundle(t, testutil.NoMPI), "ls", b)
	if code != 0 {
		t.Fatalf("kbundle ls %s: exit %d\n%s%s", b, code, so, se)
	}
	var names []string
	for _, l := range strings.Split(strings.TrimSpace(so), "\n") {
		if l != "" && !strings.HasSuffix(l, "/") {
			names = append(names, l)
		}
	}
	return names
}

// checkHarvested asserts that the job's output reports exactly one
// harvest that wrote a bundle, and that the set at set gained exactly one
// bundle since before (its bundles then) holding exactly the kernels
// named (tackapp's kernel-N.bin files under the tack preset's folder). It
// returns that bundle.
func checkHarvested(t *testing.T, output, set string, before []string, kernels ...int) string {
	t.Helper()
	if n := strings.Count(output, "kbundle: wrote "); n != 1 {
		t.Errorf("the output reports %d harvests that wrote a bundle, want 1 (harvest once, never twice)\n%s", n, output)
	}
	after := setBundles(set)
	if len(after) != len(before)+1 {
		t.Fatalf("the set has %q, want one bundle more than %q\n%s", after, before, output)
	}
	added := after[len(after)-1]
	if len(before) == 0 {
		added = after[0]
	}
	var want []string
	for _, k := range kernels {
		want = append(want, "tack/kernel-"+strconv.Itoa(k)+".bin")
	}
	sort.Strings(want)
	got := bundleFiles(t, added)
	sort.Strings(got)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("the harvested bundle %s holds %q, want %q", added, got, want)
	}
	return added
}

// waitFiles waits until glob matches n files, at most a minute.
func waitFiles(t *testing.T, glob string, n int) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(50 * time.Millisecond) {
		if m, _ := filepath.Glob(glob); len(m) >= n {
			return
		}
		if time.Now().After(deadline) {
			m, _ := filepath.Glob(glob)
			t.Fatalf("%s: %d files after a minute, want %d", glob, len(m), n)
		}
	}
}

// TestSlurmHarvest submits the Slurm scripts with the harvest on (the
// default), under both MPIs, 2 tasks on the test cluster's one node:
//
//   - end: kbundle-run.sbatch loads the warm-up's bundle (5 kernels), the
//     application compiles a sixth into DEST, and the harvest after it
//     writes one layer holding just that kernel; DEST is cleaned after;
//   - usr1: the application (testdata/slowapp.sh) compiles a seventh and
//     keeps running; the test sends the batch shell SIGUSR1 as Slurm does
//     on the time-limit warning (`scancel --signal=USR1 --batch`, which
//     `#SBATCH --signal=B:USR1@N` sends N s before the limit): the trap
//     harvests beside the running application (srun --overlap: the
//     application's step holds both CPUs), the application sees the layer
//     and exits 5, and that is the job's exit status (the script's wait is
//     interrupted by the trap and waits again); no second harvest at the
//     end; DEST cleaned;
//   - first: kbundle-job.sbatch with no bundle yet (its folder missing
//     too): no warm-up run, the load installs an empty DEST
//     (--allow-missing), the application compiles, and the harvest writes
//     the set's base with all 5 kernels.
//
// The test cluster runs with the default KillWait (30 s) and MinJobAge
// (300 s: a finished job stays in scontrol); Slurm's time limits are
// whole minutes and its time-limit checks, which send --signal's warning,
// some 30 s apart: a job that waits for a real warning takes 5 to 35 s
// more, which is why usr1 sends the signal itself.
// TestSlurmHarvestTimeLimit waits for one real warning.
func TestSlurmHarvest(t *testing.T) {
	needSlurm(t)
	app := repoPath("test/slurm/testdata/tackapp.sh")
	slow := repoPath("test/slurm/testdata/slowapp.sh")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			dir := t.TempDir()
			set, _ := warmBundle(t, dir)
			env := append([]string{"KBUNDLE=" + testutil.Kbundle(t, v), "KBUNDLE_SRUN_MPI=" + srunMPI[v], "KBUNDLE_PRESET=tack",
				"KBUNDLE_BUNDLE=" + set, "TMPDIR=" + dir}, testutil.MPIEnv...)

			t.Run("end", func(t *testing.T) {
				before := setBundles(set)
				j := submit(t, dir, "harvest-end-"+string(v), append(env, "KERNELS=6"), []string{"-n", "2"},
					repoPath("scripts/slurm/kbundle-run.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				if len(tackLines(j.Output)) != 2 {
					t.Errorf("want 2 application tasks\n%s", j)
				}
				checkHarvested(t, j.Output, set, before, 6)
				if _, err := os.Stat(localDir(t, dir, j.ID)); err == nil {
					t.Errorf("DEST %s still exists after the job: the clean-up did not follow the harvest", localDir(t, dir, j.ID))
				}
			})

			t.Run("usr1", func(t *testing.T) {
				before := setBundles(set)
				marks := filepath.Join(dir, "marks-usr1")
				os.Mkdir(marks, 0o755)
				envU := append(env[:len(env):len(env)], "KERNELS=7", "SLOWAPP_DIR="+marks, "SLOWAPP_SET="+set, "SLOWAPP_EXIT=5")
				j := submitDuring(t, dir, "harvest-usr1-"+string(v), envU, []string{"-n", "2"}, func(id string) {
					waitFiles(t, filepath.Join(marks, "compiled.*"), 2) // both tasks compiled, and still run
					if so, se, code := run(t, nil, "", "scancel", "--signal=USR1", "--batch", id); code != 0 {
						t.Fatalf("scancel --signal=USR1 --batch %s: exit %d\n%s%s", id, code, so, se)
					}
				}, repoPath("scripts/slurm/kbundle-run.sbatch"), slow)
				j.requireState(t, "FAILED", 5)
				if !strings.Contains(j.Output, "kbundle-run: time-limit warning (SIGUSR1): harvesting now") ||
					strings.Count(j.Output, "slowapp: the set has a new bundle") != 2 {
					t.Errorf("the trap did not harvest while the application ran\n%s", j)
				}
				checkHarvested(t, j.Output, set, before, 7)
				if _, err := os.Stat(localDir(t, dir, j.ID)); err == nil {
					t.Errorf("DEST %s still exists after the job", localDir(t, dir, j.ID))
				}
			})

			t.Run("first", func(t *testing.T) {
				fresh := filepath.Join(dir, "new", "cache.kbundle")
				j := submit(t, dir, "harvest-first-"+string(v), append(env, "KBUNDLE_BUNDLE="+fresh), []string{"-n", "2"},
					repoPath("scripts/slurm/kbundle-job.sbatch"), app)
				j.requireState(t, "COMPLETED", 0)
				if !strings.Contains(j.Output, "kbundle-job: cache: cold (no bundle at "+fresh+" yet") {
					t.Errorf("no 'cache: cold (no bundle ... yet' line\n%s", j)
				}
				ls := tackLines(j.Output)
				if len(ls) != 2 || strings.Contains(j.Output, "rank=none") {
					t.Errorf("want the 2 tasks and no warm-up run, got %q\n%s", ls, j)
				}
				checkHarvested(t, j.Output, fresh, nil, 1, 2, 3, 4, 5)
				if !strings.Contains(j.Output, "kbundle: wrote the set's first bundle") {
					t.Errorf("the harvest did not write the set's base\n%s", j)
				}
				if _, err := os.Stat(localDir(t, dir, j.ID)); err == nil {
					t.Errorf("DEST %s still exists after the job", localDir(t, dir, j.ID))
				}
			})
		})
	}
}

// TestSlurmHarvestTimeLimit lets Slurm itself send the time-limit warning,
// once (Open MPI build, kbundle-job.sbatch): a job of `--time=1
// --signal=B:USR1@25` (the command line overriding the script's #SBATCH
// --signal) is warned at slurmctld's first time-limit check that finds
// less than 25 s plus one check period (about 30 s) left, i.e. at the
// first check 5 s or more after it starts: 5 to 35 s (measured: 30 to
// 40 s for the test). A larger N is no faster and not safe: the warning
// may then come before the application has compiled, even during the
// load. Its application keeps running until the trap's harvest has
// written a layer, then ends, well before the limit.
func TestSlurmHarvestTimeLimit(t *testing.T) {
	needSlurm(t)
	v := testutil.OpenMPI
	dir := t.TempDir()
	set, _ := warmBundle(t, dir)
	marks := filepath.Join(dir, "marks")
	os.Mkdir(marks, 0o755)
	env := append([]string{"KBUNDLE=" + testutil.Kbundle(t, v), "KBUNDLE_SRUN_MPI=" + srunMPI[v], "KBUNDLE_PRESET=tack",
		"KBUNDLE_BUNDLE=" + set, "TMPDIR=" + dir, "KERNELS=6", "SLOWAPP_DIR=" + marks, "SLOWAPP_SET=" + set, "SLOWAPP_WAIT=50"}, testutil.MPIEnv...)
	before := setBundles(set)
	j := submit(t, dir, "harvest-timelimit", env, []string{"-n", "2", "--time=1", "--signal=B:USR1@25"},
		repoPath("scripts/slurm/kbundle-job.sbatch"), repoPath("test/slurm/testdata/slowapp.sh"))
	j.requireState(t, "COMPLETED", 0)
	if !strings.Contains(j.Output, "kbundle-job: time-limit warning (SIGUSR1): harvesting now") {
		t.Errorf("no harvest on the time-limit warning\n%s", j)
	}
	checkHarvested(t, j.Output, set, before, 6)
	if _, err := os.Stat(localDir(t, dir, j.ID)); err == nil {
		t.Errorf("DEST %s still exists after the job", localDir(t, dir, j.ID))
	}
}

// TestPBSHarvest runs the PBS production scripts as TestPBSScripts does
// (bash in pbsEnv, the real mpirun.openmpi or the PALS stand-in), with the
// harvest on (the default):
//
//   - end: the application compiles a sixth kernel; the harvest after it
//     writes one layer holding just that kernel; DEST cleaned after;
//   - timer: PBS sends no warning before the walltime, so the scripts set
//     a timer: with a walltime of 8 s (PBS_WALLTIME for PALS, as some PBS
//     versions set it; `qstat -f`'s Resource_List.walltime from a stand-in
//     qstat for Open MPI, as PBS Pro gives it) and KBUNDLE_HARVEST_BEFORE=4,
//     the timer signals the script some 3 s into the application, which
//     compiled a seventh kernel and runs until the harvest wrote it; no
//     second harvest at the end;
//   - first: no bundle yet: load --allow-missing, the application compiles
//     all 5 kernels, the harvest writes the set's base.
func TestPBSHarvest(t *testing.T) {
	testutil.NeedMPI(t, testutil.OpenMPI)
	testutil.NeedMPI(t, testutil.MPICH)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	os.Mkdir(bin, 0o755)
	qstat := "#!/bin/sh\n[ \"$1 $2\" = \"-f 4242.pbs-test\" ] || exit 1\nprintf 'Job Id: %s\\n    Job_Name = kbundle-test\\n    Resource_List.walltime = 00:00:08\\n' \"$2\"\n"
	if err := os.WriteFile(filepath.Join(bin, "qstat"), []byte(qstat), 0o755); err != nil {
		t.Fatal(err)
	}
	app := repoPath("test/slurm/testdata/tackapp.sh")
	slow := repoPath("test/slurm/testdata/slowapp.sh")
	local := localDir(t, filepath.Join(dir, "pbs.tmp"), "4242.pbs-test")
	for _, c := range pbsRunScripts() {
		t.Run(c.name, func(t *testing.T) {
			sdir := filepath.Join(dir, c.name)
			os.Mkdir(sdir, 0o700)
			set, _ := warmBundle(t, sdir)
			env := append(append(pbsEnv(t, dir, 2), testutil.MPIEnv...), "KBUNDLE_PRESET=tack", "KBUNDLE_BUNDLE="+set)
			env = append(append(env, c.env...), "KBUNDLE="+testutil.Kbundle(t, c.v))
			script := repoPath(c.script)
			gone := func(t *testing.T) {
				t.Helper()
				if _, err := os.Stat(local); err == nil {
					t.Errorf("DEST %s still exists after the job", local)
				}
			}

			t.Run("end", func(t *testing.T) {
				before := setBundles(set)
				so, se, code := run(t, append(env, "KBUNDLE_APP="+app, "KERNELS=6"), dir, "bash", script)
				if code != 0 || len(tackLines(so)) != 2 {
					t.Fatalf("exit %d, want 0 and 2 application ranks\n%s%s", code, so, se)
				}
				checkHarvested(t, se, set, before, 6)
				if !strings.Contains(se, "harvest timer: no walltime known") {
					t.Errorf("no walltime here (no PBS_WALLTIME, no qstat), and the script does not say so\n%s", se)
				}
				gone(t)
			})

			t.Run("timer", func(t *testing.T) {
				before := setBundles(set)
				marks := filepath.Join(sdir, "marks")
				os.Mkdir(marks, 0o755)
				envT := append(env[:len(env):len(env)], "KBUNDLE_APP="+slow, "KERNELS=7", "KBUNDLE_HARVEST_BEFORE=4",
					"SLOWAPP_DIR="+marks, "SLOWAPP_SET="+set, "SLOWAPP_WAIT=30")
				if c.name == "pals" {
					envT = append(envT, "PBS_WALLTIME=8")
				} else {
					envT = append(envT, "PATH="+bin+":"+os.Getenv("PATH"))
				}
				so, se, code := run(t, envT, dir, "bash", script)
				if code != 0 {
					t.Fatalf("exit %d\n%s%s", code, so, se)
				}
				if !strings.Contains(se, "s before the walltime (8 s)") || !strings.Contains(se, "SIGUSR1 (the walltime timer): harvesting now") ||
					strings.Count(so, "slowapp: the set has a new bundle") != 2 {
					t.Errorf("the timer did not harvest while the application ran\n%s%s", so, se)
				}
				checkHarvested(t, se, set, before, 7)
				gone(t)
			})

			t.Run("first", func(t *testing.T) {
				fresh := filepath.Join(sdir, "new", "cache.kbundle")
				so, se, code := run(t, append(env, "KBUNDLE_APP="+app, "KBUNDLE_BUNDLE="+fresh), dir, "bash", script)
				if code != 0 || len(tackLines(so)) != 2 || !strings.Contains(se, "kbundle-run: cache: cold (no bundle at "+fresh+" yet") {
					t.Fatalf("exit %d, want 0, a cold run of 2 ranks and the 'no bundle yet' line\n%s%s", code, so, se)
				}
				checkHarvested(t, se, fresh, nil, 1, 2, 3, 4, 5)
				gone(t)
			})
		})
	}
}
