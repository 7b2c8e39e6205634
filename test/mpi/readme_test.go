package mpi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// readmeLoop returns the lines of README.md's first sh block, backslash
// continuations joined: the part before "# in every job" (once) and the
// rest (every job).
func readmeLoop(t *testing.T) (once, job []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(testutil.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)```sh\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("README.md has no sh block")
	}
	block := strings.ReplaceAll(string(m[1]), "\\\n", "")
	part := &once
	for _, line := range strings.Split(block, "\n") {
		if strings.HasPrefix(line, "# in every job") {
			part = &job
		}
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			*part = append(*part, line)
		}
	}
	if len(once) == 0 || len(job) == 0 {
		t.Fatalf("README.md's sh block has no once/every-job parts:\n%s", block)
	}
	return once, job
}

// readmeApp is the user's app.py: one Numba function, compiled for an
// int by the warm-up (one process) and for a float too under MPI, which
// the warm-up did not see: the first job compiles something new.
const readmeApp = `import os
from numba import njit

@njit(cache=True)
def f(x):
    return x * 2 + 1

f(1)
if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE"):
    f(1.5)
`

// frontBin makes a directory holding what `make install` puts in bin/:
// the front kbundle and the builds it runs (kbundle-nompi, -openmpi,
// -mpich).
func frontBin(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	for name, build := range map[string]string{
		"kbundle":         testutil.Build(t, testutil.NoMPI, "./cmd/kbundle-front"),
		"kbundle-nompi":   testutil.Kbundle(t, testutil.NoMPI),
		"kbundle-openmpi": testutil.Kbundle(t, testutil.OpenMPI),
		"kbundle-mpich":   testutil.Kbundle(t, testutil.MPICH),
	} {
		// A copy, not a symlink: the front looks beside its own file.
		b, err := os.ReadFile(build)
		if err == nil {
			err = os.WriteFile(filepath.Join(dir, name), b, 0o755)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestReadmeLoop runs README.md's loop verbatim, its lines read from the
// README, under a bare mpirun (Open MPI's, then MPICH's as `mpirun`),
// as a new user does (U33): warm up and pack once, then two jobs, each
// load, run, harvest, clean, with no --to. The first job compiles what
// the warm-up did not and its harvest finds the DEST its load made
// (another launch, another job id) and writes a layer; the second job is
// warm: it compiles nothing, so its harvest writes nothing. Each job's
// clean leaves nothing in $TMPDIR. For MPICH, the application's line is
// the one README.md names for it.
func TestReadmeLoop(t *testing.T) {
	if _, err := exec.Command("/usr/bin/python3", "-c", "import numba").CombinedOutput(); err != nil {
		if testutil.Required("JIT") {
			t.Fatalf("Debian's python3-numba is missing (make deps): %v", err)
		}
		t.Skip("Debian's python3-numba is missing")
	}
	once, job := readmeLoop(t)
	bin := frontBin(t)
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			launchers := t.TempDir()
			// mpirun is this MPI's launcher (a script: Hydra finds its proxy
			// beside the file it was started as).
			wrapper := "#!/bin/sh\nexec " + testutil.Launcher(v) + " \"$@\"\n"
			if err := os.WriteFile(filepath.Join(launchers, "mpirun"), []byte(wrapper), 0o755); err != nil {
				t.Fatal(err)
			}
			work, tmp, scratch := t.TempDir(), t.TempDir(), t.TempDir()
			if err := os.WriteFile(filepath.Join(work, "app.py"), []byte(readmeApp), 0o644); err != nil {
				t.Fatal(err)
			}
			lines := job
			if v == testutil.MPICH {
				lines = mpichLines(t, job)
			}
			env := append(os.Environ(), testutil.MPIEnv...)
			env = append(env, "PATH="+bin+":"+launchers+":/usr/bin:"+os.Getenv("PATH"), "TMPDIR="+tmp, "SCRATCH="+scratch)
			sh := func(what string, lines []string) string {
				t.Helper()
				ctx, cancel := context.WithTimeout(context.Background(), testutil.LaunchTimeout)
				defer cancel()
				script := "set -euo pipefail\n" + strings.Join(lines, "\n") + "\n"
				cmd := exec.CommandContext(ctx, "bash", "-c", script)
				cmd.Dir, cmd.Env = work, env
				out, err := cmd.CombinedOutput()
				if err != nil {
					t.Fatalf("%s: %v\n%s\n%s", what, err, script, out)
				}
				return string(out)
			}
			sh("warm-up", once)
			first := sh("job 1", lines)
			if !strings.Contains(first, "kbundle: wrote a new layer") || !strings.Contains(first, "the newest tree loaded from") {
				t.Errorf("job 1's harvest wrote no layer from the DEST its load made:\n%s", first)
			}
			left, _ := filepath.Glob(filepath.Join(tmp, "kbundle-*"))
			if len(left) != 0 {
				t.Errorf("job 1 left %v", left)
			}
			second := sh("job 2", lines)
			if !regexp.MustCompile(`(?m)^kbundle: \S+ \(rank 0\): compiled 0 entries \(0 B\) the bundle lacked`).MatchString(second) ||
				!strings.Contains(second, "kbundle: nothing new: no layer written to") {
				t.Errorf("job 2 is not warm (it compiled something, or its harvest found nothing):\n%s", second)
			}
			if layers, _ := filepath.Glob(filepath.Join(scratch, "kcache", "cache.kbundle.d", "*.kbundle")); len(layers) != 1 {
				t.Errorf("layers %v, want job 1's alone", layers)
			}
			left, _ = filepath.Glob(filepath.Join(tmp, "kbundle-*"))
			if len(left) != 0 {
				t.Errorf("job 2 left %v", left)
			}
		})
	}
}

// mpichLines is the job's lines for MPICH: the application's line is
// the one its comment names, "(MPICH: CMD)".
func mpichLines(t *testing.T, job []string) []string {
	t.Helper()
	var out []string
	re := regexp.MustCompile(`\(MPICH: ([^)]*)\)`)
	for _, l := range job {
		if m := re.FindStringSubmatch(l); m != nil {
			l = m[1]
		}
		out = append(out, l)
	}
	return out
}
