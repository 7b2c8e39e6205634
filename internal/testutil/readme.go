package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// README.md's loop, for the tests that run it verbatim (test/mpi and
// test/cluster TestReadmeLoop; issue 25): its lines are read from the
// README itself, so a change there is what the tests run.

// ReadmeLoop returns the lines of README.md's first sh block, backslash
// continuations joined, comments and blank lines dropped: the part before
// "# in every job" (once) and the rest (every job).
func ReadmeLoop(t testing.TB) (once, job []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(RepoRoot(), "README.md"))
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

// ReadmeMPICH is the job's lines for MPICH: a line whose comment names
// MPICH's own command, "(MPICH: CMD)", is CMD.
func ReadmeMPICH(job []string) []string {
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

// ReadmeApp is the user's app.py of README.md's loop: one Numba function,
// compiled for an int by the warm-up (one process) and for a float too
// under MPI, which the warm-up did not see: the first job compiles
// something new.
const ReadmeApp = `import os
from numba import njit

@njit(cache=True)
def f(x):
    return x * 2 + 1

f(1)
if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE"):
    f(1.5)
`

// FrontBin makes a directory (under dir: "" for a test's own temporary
// one) holding what `make install` puts in bin/: the front kbundle and
// the builds it runs (kbundle-nompi, -openmpi, -mpich), and returns it.
func FrontBin(t testing.TB, dir string) string {
	t.Helper()
	var err error
	if dir, err = os.MkdirTemp(dir, "bin-"); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	for name, build := range map[string]string{
		"kbundle":         Build(t, NoMPI, "./cmd/kbundle-front"),
		"kbundle-nompi":   Kbundle(t, NoMPI),
		"kbundle-openmpi": Kbundle(t, OpenMPI),
		"kbundle-mpich":   Kbundle(t, MPICH),
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
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
