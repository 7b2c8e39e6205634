package slurm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
	"github.com/kbundle/kbundle/load"
)

// Bounds on every wait: a hang is a failure.
var (
	cmdTimeout = 3 * time.Minute // one command (srun, a script)
	jobTimeout = 3 * time.Minute // one batch job, from submission to its end
)

// needSlurm skips the test when no test cluster is configured (SLURM_CONF
// unset or sinfo missing), or fails it when KBUNDLE_TEST_SLURM=1. A
// configured cluster that does not answer is always a failure.
func needSlurm(t *testing.T) {
	t.Helper()
	conf := os.Getenv("SLURM_CONF")
	_, err := exec.LookPath("sinfo")
	if conf == "" || err != nil {
		msg := "no test Slurm: start one with `eval \"$(scripts/ci/slurm-up.sh)\"` (needs slurm-wlm and munge), or set KBUNDLE_TEST_SLURM=1 to require it"
		if testutil.Required("SLURM") {
			t.Fatalf("KBUNDLE_TEST_SLURM=1 but SLURM_CONF=%q, sinfo: %v; %s", conf, err, msg)
		}
		t.Skip(msg)
	}
	// A node still completing the previous test's job ("comp": its
	// epilog, slow on a busy machine) is waited for, a bounded time.
	var state string
	var code int
	for deadline := time.Now().Add(slurmSettle); ; time.Sleep(200 * time.Millisecond) {
		var out string
		out, _, code = run(t, nil, "", "sinfo", "-h", "-o", "%t")
		state = strings.TrimSpace(out)
		if code == 0 && (strings.HasPrefix(state, "idle") || strings.HasPrefix(state, "mix") || strings.HasPrefix(state, "alloc")) {
			return
		}
		if !strings.HasPrefix(state, "comp") || time.Now().After(deadline) {
			break
		}
	}
	t.Fatalf("test Slurm (SLURM_CONF=%s) is not ready: sinfo exit %d, state %q", conf, code, state)
}

// slurmSettle is how long needSlurm waits for a node that is completing a
// job to be idle again.
const slurmSettle = 60 * time.Second

// run runs argv in dir (when not empty) with testutil.CleanEnv("SLURM_CONF")
// (the test process's environment without launcher variables, in case
// the tests themselves run inside an allocation) + env, in its own process
// group that is killed at the deadline, and returns its outputs and exit
// code. A timeout fails the test.
func run(t *testing.T, env []string, dir string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(testutil.CleanEnv("SLURM_CONF"), env...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%q: timed out after %v (a hang is a failure)\nstdout:\n%s\nstderr:\n%s", argv, cmdTimeout, so.String(), se.String())
	}
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%q: %v", argv, err)
		}
		code = ee.ExitCode()
	}
	return so.String(), se.String(), code
}

// job is a finished batch job as scontrol saw it.
type job struct {
	ID     string
	State  string // JobState, e.g. COMPLETED, FAILED
	Exit   int    // ExitCode before the colon
	Signal int    // ExitCode after the colon
	Record string // `scontrol show job -o` line
	Output string // the job's output file (stdout and stderr)
}

func (j *job) String() string {
	return fmt.Sprintf("job %s: state %s, exit %d:%d\n--- scontrol:\n%s\n--- output:\n%s", j.ID, j.State, j.Exit, j.Signal, j.Record, j.Output)
}

// requireState fails the test unless the job ended in state with exit code.
func (j *job) requireState(t *testing.T, state string, exit int) {
	t.Helper()
	if j.State != state || j.Exit != exit || j.Signal != 0 {
		t.Fatalf("want state %s exit %d:0, got %s", state, exit, j)
	}
}

// submit submits script with sbatch (the job runs in dir, its output goes
// to dir/NAME.out), then polls `scontrol show job` until the job ends, at
// most jobTimeout; a job still running then is cancelled and the test fails.
func submit(t *testing.T, dir, name string, env, sbatchArgs []string, script string, args ...string) *job {
	t.Helper()
	return submitDuring(t, dir, name, env, sbatchArgs, nil, script, args...)
}

// submitDuring is submit that calls during(job id) once, in the test's
// goroutine, after the submission and before waiting for the job's end
// (e.g. to signal it while it runs).
func submitDuring(t *testing.T, dir, name string, env, sbatchArgs []string, during func(id string), script string, args ...string) *job {
	t.Helper()
	out := filepath.Join(dir, name+".out")
	argv := append([]string{"sbatch", "--parsable", "--job-name=" + name, "--chdir=" + dir, "--output=" + out}, sbatchArgs...)
	argv = append(append(argv, script), args...)
	so, se, code := run(t, env, dir, argv...)
	if code != 0 {
		t.Fatalf("%q: exit %d\n%s%s", argv, code, so, se)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(so), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", so)
	}
	j := &job{ID: id}
	done := false
	t.Cleanup(func() {
		if !done {
			exec.Command("scancel", id).Run()
		}
	})
	deadline := time.Now().Add(jobTimeout)
	if during != nil {
		during(id)
	}
	for {
		rec, _, _ := run(t, nil, "", "scontrol", "show", "job", "-o", id)
		j.Record = strings.TrimSpace(rec)
		var ended bool
		if j.State, j.Exit, j.Signal, ended = testutil.JobEnded(j.Record); ended {
			done = true
			break
		}
		if time.Now().After(deadline) {
			exec.Command("scancel", id).Run()
			b, _ := os.ReadFile(out)
			j.Output = string(b)
			t.Fatalf("job %s (%s) did not end within %v (a hang is a failure); cancelled\n%s", id, name, jobTimeout, j)
		}
		time.Sleep(250 * time.Millisecond)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("job %s ended %s but its output: %v\n%s", id, j.State, err, j.Record)
	}
	j.Output = string(b)
	t.Logf("job %s (%s): %s exit %d:%d", id, name, j.State, j.Exit, j.Signal)
	return j
}

// detectCmd is a shell command that runs `KBUNDLE detect --json` into a
// file of its own under DIR (one per process: no interleaved output).
// Use as: sh -c detectCmd KBUNDLE DIR.
const detectCmd = `exec "$0" detect --json > "$1/detect.$$.json"`

// readDetections decodes every detect.*.json in dir, sorted by rank.
func readDetections(t *testing.T, dir string) []testutil.Detection {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "detect.*.json"))
	var ds []testutil.Detection
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d testutil.Detection
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: not the JSON of kbundle detect: %v\n%s", f, err, b)
		}
		ds = append(ds, d)
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i].Rank < ds[j].Rank })
	return ds
}

// checkDetections asserts np processes reported launcher, MPI-ness, mode,
// size np and ranks 0..np-1 (one node: local rank and size equal rank and
// size when it is an MPI launch).
func checkDetections(t *testing.T, ds []testutil.Detection, np int, launcher string, mpi bool, mode string) {
	t.Helper()
	if len(ds) != np {
		t.Fatalf("want %d detections, got %d: %+v", np, len(ds), ds)
	}
	for i, d := range ds {
		if d.Launcher != launcher || d.MPI != mpi || d.Rank != i || d.Size != np || d.Mode != mode {
			t.Errorf("process %d: got launcher=%s mpi=%v rank=%d size=%d mode=%s (reason %q); want launcher=%s mpi=%v rank=%d size=%d mode=%s",
				i, d.Launcher, d.MPI, d.Rank, d.Size, d.Mode, d.Reason, launcher, mpi, i, np, mode)
		}
		if mpi && (d.LocalRank != i || d.LocalSize != np) {
			t.Errorf("process %d: local rank %d of %d, want %d of %d (one node)", i, d.LocalRank, d.LocalSize, i, np)
		}
	}
}

// makeCache writes a small cache tree resembling a JIT cache: nested
// folders, text and binary files, an empty file, distinct permissions.
func makeCache(t *testing.T, dir string) {
	t.Helper()
	tree.Write(t, dir, tree.Spec{
		"index.json":               {Data: `{"version":1,"kernels":3}`},
		"ab/abcdef0123.ptx":        {Data: strings.Repeat("// ptx kernel text\n.visible .entry k0()\n", 50)},
		"ab/abcdef0123.cubin":      {Data: string(bytes.Repeat([]byte{0x7f, 'E', 'L', 'F', 0, 1, 2, 3}, 300))},
		"cd/cd01/kernel.so":        {Data: string(bytes.Repeat([]byte{0, 0xff, 0x10}, 1000)), Mode: 0o755},
		"cd/cd01/kernel.json":      {Data: `{"name":"k1","num_warps":4}`},
		"empty":                    {},
		"deep/a/b/c/d/e/leaf.llir": {Data: "define void @k() { ret void }\n"},
	})
}

// sameTree asserts dest holds exactly src's files and folders with the same
// contents and permission bits (tree.Same; mtimes are not compared here,
// as this helper never did).
func sameTree(t *testing.T, src, dest string) {
	t.Helper()
	tree.Same(t, src, dest, tree.Options{})
}

// pack makes a bundle of src at out with kb (`kbundle pack`).
func pack(t *testing.T, kb, src, out string) {
	t.Helper()
	so, se, code := run(t, nil, "", kb, "pack", "--dir", src, "-o", out)
	if code != 0 {
		t.Fatalf("kbundle pack: exit %d\n%s%s", code, so, se)
	}
}

// damage copies bundle to a new file with one byte flipped in its middle.
func damage(t *testing.T, bundle, out string) {
	t.Helper()
	b, err := os.ReadFile(bundle)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		t.Fatal(err)
	}
	tree.Flip(t, out, int64(len(b)/2))
}

// localDir is the scripts' default node-local destination for a job id
// when no other user holds it: kbundle load's default, under tmp (the
// job's TMPDIR).
func localDir(t *testing.T, tmp, jobID string) string {
	t.Helper()
	u, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	return load.Dest(tmp, u.Username, jobID)
}

// repoPath is an absolute path inside the repository.
func repoPath(rel string) string { return filepath.Join(testutil.RepoRoot(), filepath.FromSlash(rel)) }

// tackLines returns the "tackapp: ..." lines of an output, sorted.
func tackLines(out string) []string {
	var ls []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "tackapp: ") {
			ls = append(ls, l)
		}
	}
	sort.Strings(ls)
	return ls
}

// checkTack asserts np application processes ran with ranks 0..np-1, each
// with the given hits and compiled counts, and returns their cache dirs.
func checkTack(t *testing.T, out string, np, hits, compiled int) []string {
	t.Helper()
	ls := tackLines(out)
	if len(ls) != np {
		t.Fatalf("want %d application lines, got %d:\n%s", np, len(ls), out)
	}
	var dirs []string
	for i, l := range ls {
		want := fmt.Sprintf("tackapp: rank=%d size=%d hits=%d compiled=%d dir=", i, np, hits, compiled)
		if !strings.HasPrefix(l, want) {
			t.Errorf("application line %q, want prefix %q\n%s", l, want, out)
		}
		_, d, _ := strings.Cut(l, " dir=")
		dirs = append(dirs, d)
	}
	return dirs
}
