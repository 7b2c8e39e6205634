package testutil

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// What test/mpi and test/cluster TestCacheUse share (issue 30): a user's
// app.py, README.md's job around it, and the four jobs whose harvest
// reports are read.

// CacheUseApp is a user's app.py of two Numba functions: the warm-up and
// a warm job compile f and g for an int; with NEW=1 the job calls f for a
// float too, a signature the bundle lacks.
const CacheUseApp = `import os
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

// CacheUseJob is README.md's job with the application's line app, run
// from the folder of app.py with the set under $SCRATCH/kcache: load,
// the exports sourced (unless a job leaves them out), app, harvest, and
// a clean that takes DEST from kenv.sh, which such a job did not source.
func CacheUseJob(app string, exports bool) []string {
	lines := []string{"mpirun --map-by ppr:1:node kbundle load --bundle $SCRATCH/kcache/cache.kbundle --print-env > kenv.sh"}
	if exports {
		lines = append(lines, ". ./kenv.sh")
	}
	return append(lines, app,
		"mpirun --map-by ppr:1:node kbundle harvest --bundle $SCRATCH/kcache/cache.kbundle",
		`mpirun --map-by ppr:1:node kbundle clean "$(. ./kenv.sh; echo "${NUMBA_CACHE_DIR%/numba}")"`)
}

// CacheUseCounts reads the harvest's numba line of a job's output: units
// used, loaded, entries new and recompiled, and the rest of the line.
type CacheUseCounts func(what, out string) (used, loaded, fresh, again int, rest string)

// CheckCacheUse runs the four jobs after the warm-up, each through job
// (CacheUseJob's lines with what it runs of app.py at app, the path),
// and checks the counts and the verdict line of each harvest:
//   - a warm job: the units were used, nothing new;
//   - new signatures: new > 0 beside used > 0;
//   - the exports left out: flagged, NUMBA_CACHE_DIR named;
//   - the source touched (a checkout, a copy without its times): Numba's
//     index no longer matches, every function is compiled again,
//     recompiled > 0 and the cause "source time".
func CheckCacheUse(t *testing.T, app string, job func(what, app string, exports bool) string, counts CacheUseCounts) {
	t.Helper()
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
	const pass = "pass NUMBA_CACHE_DIR (`mpirun -x NUMBA_CACHE_DIR`, or `srun --export=ALL`)"
	if used, _, fresh, again, rest := counts("exports left out", out); used != 0 || fresh != 0 || again != 0 ||
		!strings.Contains(rest, "NUMBA_CACHE_DIR was not passed to it: "+pass) {
		t.Errorf("exports left out: used %d, %d new, %d recompiled%s", used, fresh, again, rest)
	}
	if v := verdict(out); v != "cache: loaded but unused: "+pass {
		t.Errorf("exports left out: verdict %q", v)
	}
	os.RemoveAll(filepath.Join(filepath.Dir(app), "__pycache__")) // where that job's Numba wrote

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
