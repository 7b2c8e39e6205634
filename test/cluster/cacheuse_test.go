package cluster

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/internal/testutil"
)

// cacheUseApp is test/mpi's: f and g compiled for an int, and with
// NEW=1 f for a float too.
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

// TestCacheUse is test/mpi's TestCacheUse on 3 nodes of 2 ranks (issue
// 30): README.md's loop with real Numba under Open MPI's mpirun, the
// harvest's numba line the same on every node (one line, kbn[1-3]):
//   - a warm job: used > 0, nothing new;
//   - new signatures: new > 0 beside used > 0;
//   - the exports left out: flagged, NUMBA_CACHE_DIR named;
//   - the source touched: recompiled > 0, cause "source time".
func TestCacheUse(t *testing.T) {
	c := needCluster(t)
	py := needModule(t, debianPython, "numba", "JIT", "apt-get install python3-numba")
	once, _ := testutil.ReadmeLoop(t)
	bin := testutil.FrontBin(t, tmpRoot)
	launchers, env := c.readmeLaunchers(t, testutil.OpenMPI)
	work, err := os.MkdirTemp(tmpRoot, "work-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(work, 0o755)
	app := filepath.Join(work, "app.py")
	if err := os.WriteFile(app, []byte(cacheUseApp), 0o644); err != nil {
		t.Fatal(err)
	}
	scratch, err := os.MkdirTemp(tmpRoot, "scratch-")
	if err != nil {
		t.Fatal(err)
	}
	tmp := c.localDir(t)
	env = append(env, "PATH="+bin+":"+launchers+":"+filepath.Dir(py)+":"+os.Getenv("PATH"), "TMPDIR="+tmp, "SCRATCH="+scratch)
	sh := func(what string, lines ...string) *result {
		t.Helper()
		script := "set -euo pipefail\n" + strings.Join(lines, "\n") + "\n"
		argv := []string{"nsenter", "-t", strconv.Itoa(c.pids[c.nodes[0]]), "-n", "-u", "-m", "--wd=" + work, "--", "bash", "-c", script}
		r := run(t, env, argv...)
		if r.code != 0 {
			t.Fatalf("%s:\n%s\n%s", what, script, r)
		}
		t.Logf("%s: %v\n%s", what, r.took.Round(time.Millisecond), r.stderr)
		return r
	}
	job := func(what, app string, exports bool) string {
		t.Helper()
		lines := []string{"mpirun --map-by ppr:1:node kbundle load --bundle $SCRATCH/kcache/cache.kbundle --print-env > kenv.sh"}
		if exports {
			lines = append(lines, ". ./kenv.sh")
		}
		lines = append(lines, app,
			"mpirun --map-by ppr:1:node kbundle harvest --bundle $SCRATCH/kcache/cache.kbundle",
			`mpirun --map-by ppr:1:node kbundle clean "$(. ./kenv.sh; echo "${NUMBA_CACHE_DIR%/numba}")"`)
		return sh(what, lines...).stderr
	}
	all := hostlist.Format(c.nodes)
	re := regexp.MustCompile(`(?m)^kbundle: (.+?): numba: (\d+) of (\d+) units? used; (\d+) new, (\d+) recompiled(.*)$`)
	// counts reads the one numba line, which must name every node.
	counts := func(what, out string) (used, loaded, fresh, again int, rest string) {
		t.Helper()
		m := re.FindAllStringSubmatch(out, -1)
		if len(m) != 1 || m[0][1] != all {
			t.Fatalf("%s: numba lines %q, want one for %s:\n%s", what, m, all, out)
		}
		n := func(s string) int { i, _ := strconv.Atoi(s); return i }
		return n(m[0][2]), n(m[0][3]), n(m[0][4]), n(m[0][5]), m[0][6]
	}
	verdict := func(out string) string {
		m := regexp.MustCompile(`(?m)^kbundle: (cache: .*)$`).FindAllStringSubmatch(out, -1)
		if len(m) == 0 {
			return ""
		}
		return m[len(m)-1][1]
	}

	sh("warm-up", once...)
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
	for _, n := range c.nodes {
		for _, e := range c.entries(n, tmp) {
			if strings.Contains(e, "kbundle") {
				t.Errorf("left %s/%s on %s", tmp, e, n)
			}
		}
	}
}
