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
	if err := os.WriteFile(app, []byte(testutil.CacheUseApp), 0o644); err != nil {
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
		return sh(what, testutil.CacheUseJob(app, exports)...).stderr
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

	sh("warm-up", once...)
	testutil.CheckCacheUse(t, app, job, counts)
	for _, n := range c.nodes {
		for _, e := range c.entries(n, tmp) {
			if strings.Contains(e, "kbundle") {
				t.Errorf("left %s/%s on %s", tmp, e, n)
			}
		}
	}
}
