package mpi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestCacheUse runs README.md's loop with real Numba (Debian's
// python3-numba) under a bare Open MPI mpirun, four jobs after one
// warm-up, and reads the harvest's per-preset line and its verdict
// (issue 30):
//   - a warm job: the units were used, nothing new;
//   - new signatures: new > 0 beside used > 0;
//   - the exports left out (no `. ./kenv.sh`, no -x): flagged, the
//     variable named;
//   - the sources touched: recompiled > 0, cause "source time".
func TestCacheUse(t *testing.T) {
	if _, err := exec.Command("/usr/bin/python3", "-c", "import numba").CombinedOutput(); err != nil {
		if testutil.Required("JIT") {
			t.Fatalf("Debian's python3-numba is missing (make deps): %v", err)
		}
		t.Skip("Debian's python3-numba is missing")
	}
	once, _ := testutil.ReadmeLoop(t)
	bin := testutil.FrontBin(t, "")
	launchers := t.TempDir()
	wrapper := "#!/bin/sh\nexec " + testutil.Launcher(testutil.OpenMPI) + " \"$@\"\n"
	if err := os.WriteFile(filepath.Join(launchers, "mpirun"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	work, tmp, scratch := t.TempDir(), t.TempDir(), t.TempDir()
	app := filepath.Join(work, "app.py")
	if err := os.WriteFile(app, []byte(testutil.CacheUseApp), 0o644); err != nil {
		t.Fatal(err)
	}
	env := append(os.Environ(), testutil.MPIEnv...)
	env = append(env, "PATH="+bin+":"+launchers+":/usr/bin:"+os.Getenv("PATH"), "TMPDIR="+tmp, "SCRATCH="+scratch)
	sh := func(what string, lines ...string) string {
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
	sh("warm-up", once...)
	job := func(what, app string, exports bool) string {
		t.Helper()
		out := sh(what, testutil.CacheUseJob(app, exports)...)
		t.Logf("%s:\n%s", what, out)
		if left, _ := filepath.Glob(filepath.Join(tmp, "kbundle-*")); len(left) != 0 {
			t.Errorf("%s left %v", what, left)
		}
		return out
	}
	// numba's line: used, loaded, new, recompiled, and the rest.
	re := regexp.MustCompile(`(?m)^kbundle: \S+ \(rank 0\): numba: (\d+) of (\d+) units? used; (\d+) new, (\d+) recompiled(.*)$`)
	counts := func(what, out string) (used, loaded, fresh, again int, rest string) {
		t.Helper()
		m := re.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("%s: no numba line in the harvest's report:\n%s", what, out)
		}
		n := func(s string) int { i, _ := strconv.Atoi(s); return i }
		return n(m[1]), n(m[2]), n(m[3]), n(m[4]), m[5]
	}
	testutil.CheckCacheUse(t, app, job, counts)
}
