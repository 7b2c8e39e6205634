package cluster

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// rankCounts is one rank's line of a JIT workload (test/jit/testdata):
// the compilations it asked the cache for, and how many hit and missed.
type rankCounts struct {
	Rank                int
	Total, Hits, Misses int
}

// loopFramework is one framework of the harvest loop.
type loopFramework struct {
	name, preset, script string
	python               func(t *testing.T) string // the interpreter, or a skip
	launches             []launch
	perNode              int
	counts               func(line []byte) (rankCounts, bool)
	// newShape reports whether a file of job 3's layer may be there (the
	// new shapes' units); nil: only files the base does not hold.
	newShape func(name string) bool
}

// newShapeUnit matches the cache files of f00-f05, the functions job 3
// gives Numba a new signature for (numba_kernels.f03-42.py311.nbi, ….2.nbc).
var newShapeUnit = regexp.MustCompile(`/numba_kernels\.f0[0-5]-[0-9]+\.py[0-9]+\.([0-9]+\.nbc|nbi)$`)

// debianPython is the Python with Debian's Numba (scripts/dev/deps.sh).
const debianPython = "/usr/bin/python3"

var loopFrameworks = []loopFramework{
	{name: "numba", preset: "numba", script: "numba_kernels.py", launches: mpiLaunches, perNode: perNode,
		python: func(t *testing.T) string {
			return needModule(t, debianPython, "numba", "JIT", "apt-get install python3-numba")
		},
		counts: func(b []byte) (rankCounts, bool) {
			var r struct{ Rank, Overloads, Hits, Misses int }
			err := json.Unmarshal(b, &r)
			return rankCounts{r.Rank, r.Overloads, r.Hits, r.Misses}, err == nil && r.Overloads > 0
		},
		newShape: newShapeUnit.MatchString},
	{name: "jax", preset: "jax", script: "jax_kernels.py", launches: mpiLaunches[:1], perNode: 1,
		python: func(t *testing.T) string { return venvModule(t, "jax") },
		counts: func(b []byte) (rankCounts, bool) {
			var r struct{ Rank, Requests, Hits, Misses, Functions int }
			err := json.Unmarshal(b, &r)
			return rankCounts{r.Rank, r.Requests, r.Hits, r.Misses}, err == nil && r.Functions > 0
		}},
	{name: "inductor", preset: "inductor", script: "inductor_kernels.py", launches: mpiLaunches[:1], perNode: 1,
		python: func(t *testing.T) string { return venvModule(t, "torch") },
		counts: func(b []byte) (rankCounts, bool) {
			var r struct {
				Rank      int `json:"rank"`
				Functions int `json:"functions"`
				Hits      int `json:"fx_hits"`
				Misses    int `json:"fx_misses"`
			}
			err := json.Unmarshal(b, &r)
			return rankCounts{r.Rank, r.Hits + r.Misses, r.Hits, r.Misses}, err == nil && r.Functions > 0
		}},
}

// needModule returns py when it imports module, else skips the test (or
// fails it when the switch requires it).
func needModule(t *testing.T, py, module, require, fix string) string {
	t.Helper()
	if out, err := exec.Command(py, "-c", "import "+module).CombinedOutput(); err != nil {
		msg := fmt.Sprintf("%s cannot import %s (%s): %s", py, module, fix, strings.TrimSpace(string(out)))
		if testutil.Required(require) {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

// venvModule is the project's framework environment's Python (.venv,
// scripts/dev/venv.sh), when KBUNDLE_TEST_BIGFRAMEWORKS=1 asks for it.
func venvModule(t *testing.T, module string) string {
	t.Helper()
	if !testutil.Required("BIGFRAMEWORKS") {
		t.Skip("JAX/PyTorch run with KBUNDLE_TEST_BIGFRAMEWORKS=1 (scripts/dev/venv.sh installs them)")
	}
	return needModule(t, filepath.Join(testutil.RepoRoot(), ".venv", "bin", "python"), module, "BIGFRAMEWORKS", "scripts/dev/venv.sh")
}

// workloadOnShared copies a JIT workload to the shared file system: its
// path and mtime stay the same from job to job, as Numba's index needs.
func workloadOnShared(t *testing.T, script string) string {
	t.Helper()
	dir, err := os.MkdirTemp(tmpRoot, "jit-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	for _, f := range []string{"_common.py", script} {
		b, err := os.ReadFile(filepath.Join("..", "jit", "testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, script)
}

// exportsOf are the NAME=VALUE pairs of load's `export NAME=VALUE` lines.
func exportsOf(stdout string) []string {
	var env []string
	for _, line := range strings.Split(stdout, "\n") {
		if kv, ok := strings.CutPrefix(line, "export "); ok {
			k, v, _ := strings.Cut(kv, "=")
			env = append(env, k+"="+strings.Trim(v, "'"))
		}
	}
	return env
}

// TestHarvestLoop is issue 17's loop on the 3 nodes, for real: Numba
// (3 x 2 ranks) under Open MPI's mpirun and MPICH's Hydra, JAX and
// PyTorch Inductor (one rank per node) under Open MPI. Job 1 starts with
// no set (load --allow-missing), compiles cold and its harvest writes the
// set's base; job 2 hits every kernel on every rank and harvests nothing;
// job 3 uses new shapes for half the functions and its harvest adds one
// layer holding only what they compiled; job 4 loads base and layer, hits
// everything and harvests nothing; after kbundle merge, job 5 loads the
// merged set and hits everything too. Status under the launcher says one
// line for all nodes.
func TestHarvestLoop(t *testing.T) {
	c := needCluster(t)
	for _, fw := range loopFrameworks {
		for _, l := range fw.launches {
			t.Run(fw.name+"/"+l.name, func(t *testing.T) { harvestLoop(t, c, fw, l) })
		}
	}
}

func harvestLoop(t *testing.T, c *cluster, fw loopFramework, l launch) {
	py := fw.python(t)
	kb := c.kbundle(t, l.v)
	script := workloadOnShared(t, fw.script)
	store, err := os.MkdirTemp(tmpRoot, "set-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(store, 0o700)
	set := filepath.Join(store, "cache.kbundle")
	parent := c.localDir(t)
	nranks := numNodes * fw.perNode
	job := 0
	launched := func(argv ...string) *result {
		t.Helper()
		return run(t, nil, c.argvShape(l, true, fw.perNode, argv...)...)
	}
	// one job: load, the application on every rank, harvest
	runJob := func(newShapes bool, loadArgs ...string) (ranks []rankCounts, harvest string) {
		t.Helper()
		job++
		dest := filepath.Join(parent, fmt.Sprintf("job%d", job))
		r := launched(append([]string{kb, "load", "--bundle", set, "--to", dest, "--preset", fw.preset}, loadArgs...)...)
		if r.code != 0 {
			t.Fatalf("job %d: load: %s", job, r)
		}
		app := append([]string{"env"}, exportsOf(r.stdout)...)
		if newShapes {
			app = append(app, "KBUNDLE_TEST_NEW_SHAPES=1")
		}
		r = launched(append(app, py, script)...)
		if r.code != 0 {
			t.Fatalf("job %d: application: %s", job, r)
		}
		for _, line := range strings.Split(r.stdout, "\n") {
			if rc, ok := fw.counts([]byte(line)); ok {
				ranks = append(ranks, rc)
			}
		}
		if len(ranks) != nranks {
			t.Fatalf("job %d: %d ranks reported, want %d\n%s", job, len(ranks), nranks, r)
		}
		if r = launched(kb, "harvest", "--bundle", set, "--to", dest); r.code != 0 {
			t.Fatalf("job %d: harvest: %s", job, r)
		}
		return ranks, r.stderr
	}
	allHits := func(ranks []rankCounts) {
		t.Helper()
		for _, r := range ranks {
			if r.Misses != 0 || r.Hits == 0 || r.Hits != r.Total {
				t.Errorf("%s job %d rank %d: %d hits, %d misses of %d; want all hits", fw.name, job, r.Rank, r.Hits, r.Misses, r.Total)
			}
		}
	}
	layers := func() []bundle.SetLayer {
		ls, err := bundle.ListLayers(set, 0)
		if err != nil {
			t.Fatal(err)
		}
		return ls
	}

	// Job 1: no set yet; every node compiles; the harvest writes the base.
	ranks, h := runJob(false, "--allow-missing")
	for node := 0; node < numNodes; node++ {
		m := 0
		for _, r := range ranks {
			if r.Rank/fw.perNode == node {
				m += r.Misses
			}
		}
		if m == 0 {
			t.Errorf("job 1: node %d compiled nothing: it was not cold", node)
		}
	}
	if _, err := os.Stat(set); err != nil || len(layers()) != 0 {
		t.Fatalf("job 1's harvest: base %v, layers %v\n%s", err, layers(), h)
	}
	base := map[string]bool{}
	if rc, err := bundle.Open(set, nil); err == nil {
		for _, e := range rc.Entries() {
			base[e.Name] = !e.Dir
		}
		rc.Close()
	}

	// Job 2: all hits on every rank of every node; no layer. Status under
	// the launcher: one line, every node alike.
	ranks, h = runJob(false)
	allHits(ranks)
	if ls := layers(); len(ls) != 0 {
		t.Errorf("job 2 (all hits) wrote layers %v\n%s", ls, h)
	}
	st := launched(kb, "status", filepath.Join(parent, "job2"))
	if lines := strings.Split(strings.TrimSpace(st.stdout), "\n"); st.code != 0 || len(lines) != 1 ||
		!strings.HasPrefix(lines[0], "kbn[1-3]: ") || !strings.Contains(lines[0], ": installed by job ") {
		t.Errorf("status of job 2's DEST on the nodes: want one line for kbn[1-3]\n%s", st)
	}

	// Job 3: new shapes for half the functions: one layer, only theirs.
	ranks, h = runJob(true)
	missed := 0
	for _, r := range ranks {
		missed += r.Misses
	}
	ls := layers()
	if missed == 0 || len(ls) != 1 {
		t.Fatalf("job 3: %d misses, layers %v; want one layer\n%s", missed, ls, h)
	}
	rc, err := bundle.Open(ls[0].Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	nfiles := 0
	for _, e := range rc.Entries() {
		if e.Dir {
			continue
		}
		nfiles++
		if fw.newShape != nil && !fw.newShape(e.Name) || fw.newShape == nil && base[e.Name] {
			t.Errorf("job 3's layer holds %s, not what the new shapes compiled", e.Name)
		}
	}
	rc.Close()
	if nfiles == 0 {
		t.Errorf("job 3's layer holds no file")
	}

	// Job 4: base and layer loaded as one: all hits, no new layer.
	ranks, h = runJob(true)
	allHits(ranks)
	if ls := layers(); len(ls) != 1 {
		t.Errorf("job 4 (all hits) left layers %v\n%s", ls, h)
	}

	// Merge; job 5 loads the merged set: all hits again.
	if r := run(t, nil, kb, "merge", set); r.code != 0 {
		t.Fatalf("merge: %s", r)
	}
	ranks, _ = runJob(true)
	allHits(ranks)
	c.noStrays(t, kb, 10e9)
}
