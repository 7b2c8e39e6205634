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
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// cacheUseApp is a user's app.py of two Numba functions: the warm-up
// and a warm job compile f and g for an int; with NEW=1 the job calls f
// for a float too, a signature the bundle lacks.
const cacheUseApp = `import os
from numba import njit

@njit(cache=True)
def f(x):
    return x * 2 + 1

@njit(cache=True)
def g(x):
    return x - 3

f(1)
g(1)
if os.environ.get("NEW") == "1":
    f(1.5)
`

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
	if err := os.WriteFile(app, []byte(cacheUseApp), 0o644); err != nil {
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
	// README.md's job, with the application's line given; the clean
	// takes DEST from kenv.sh, which a job that left the exports out
	// did not source.
	job := func(what, app string, exports bool) string {
		t.Helper()
		lines := []string{"mpirun --map-by ppr:1:node kbundle load --bundle $SCRATCH/kcache/cache.kbundle --print-env > kenv.sh"}
		if exports {
			lines = append(lines, ". ./kenv.sh")
		}
		lines = append(lines, app,
			"mpirun --map-by ppr:1:node kbundle harvest --bundle $SCRATCH/kcache/cache.kbundle",
			`mpirun --map-by ppr:1:node kbundle clean "$(. ./kenv.sh; echo "${NUMBA_CACHE_DIR%/numba}")"`)
		out := sh(what, lines...)
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
	verdict := func(out string) string {
		m := regexp.MustCompile(`(?m)^kbundle: (cache: .*)$`).FindAllStringSubmatch(out, -1)
		if len(m) == 0 {
			return ""
		}
		return m[len(m)-1][1]
	}

	out := job("warm job", "mpirun -x NUMBA_CACHE_DIR python3 app.py", true)
	if used, loaded, fresh, again, rest := counts("warm job", out); used == 0 || loaded != 2 || fresh != 0 || again != 0 || rest != "" {
		t.Errorf("warm job: used %d of %d, %d new, %d recompiled%s", used, loaded, fresh, again, rest)
	}
	if v := verdict(out); v != "cache: warm (2 of 2 units used)" {
		t.Errorf("warm job: verdict %q", v)
	}

	out = job("new signatures", "NEW=1 mpirun -x NUMBA_CACHE_DIR -x NEW python3 app.py", true)
	if used, _, fresh, again, rest := counts("new signatures", out); used == 0 || fresh == 0 || again != 0 || rest != "" {
		t.Errorf("new signatures: used %d, %d new, %d recompiled%s", used, fresh, again, rest)
	}
	if v := verdict(out); !strings.HasPrefix(v, "cache: warm (") || !strings.Contains(v, "; 1 new)") {
		t.Errorf("new signatures: verdict %q", v)
	}

	out = job("exports left out", "mpirun python3 app.py", false)
	if used, _, fresh, again, rest := counts("exports left out", out); used != 0 || fresh != 0 || again != 0 ||
		!strings.Contains(rest, "NUMBA_CACHE_DIR was not passed to it: pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)") {
		t.Errorf("exports left out: used %d, %d new, %d recompiled%s", used, fresh, again, rest)
	}
	if v := verdict(out); v != "cache: loaded but unused: pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)" {
		t.Errorf("exports left out: verdict %q", v)
	}
	os.RemoveAll(filepath.Join(work, "__pycache__")) // where that job's Numba wrote

	// The source touched (a checkout, a copy without its times): Numba's
	// index no longer matches, it compiles every function of app.py again.
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(app, later, later); err != nil {
		t.Fatal(err)
	}
	out = job("sources touched", "mpirun -x NUMBA_CACHE_DIR python3 app.py", true)
	if _, _, _, again, rest := counts("sources touched", out); again == 0 || !strings.Contains(rest, "the source changed: Numba keys its index on the source file's time and size") {
		t.Errorf("sources touched: %d recompiled%s", again, rest)
	}
	if v := verdict(out); !strings.Contains(v, "source time") {
		t.Errorf("sources touched: verdict %q", v)
	}
}
