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
	once, job := testutil.ReadmeLoop(t)
	bin := testutil.FrontBin(t, "")
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
			if err := os.WriteFile(filepath.Join(work, "app.py"), []byte(testutil.ReadmeApp), 0o644); err != nil {
				t.Fatal(err)
			}
			lines := job
			if v == testutil.MPICH {
				lines = testutil.ReadmeMPICH(job)
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
