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
	// A real C++ extension (torch.utils.cpp_extension.load: ninja, g++):
	// a hit is an extension ninja had nothing to do for, a miss one it
	// built; the new shapes are a second extension. Its build.ninja holds
	// DEST's path, and every job's DEST differs: each load relocates it.
	{name: "torch-extensions", preset: "torch-extensions", script: "torch_extension_kernels.py", launches: mpiLaunches[:1], perNode: 1,
		python: func(t *testing.T) string { return venvModule(t, "torch") },
		counts: func(b []byte) (rankCounts, bool) {
			var r struct{ Rank, Extensions, Built int }
			err := json.Unmarshal(b, &r)
			return rankCounts{r.Rank, r.Extensions, r.Extensions - r.Built, r.Built}, err == nil && r.Extensions > 0
		},
		newShape: func(name string) bool { return strings.HasPrefix(name, "torch_extensions/kb_scaled_mul/") }},
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
// (3 x 2 ranks) under Open MPI's mpirun and MPICH's Hydra, JAX,
// PyTorch Inductor and a PyTorch C++ extension (one rank per node) under
// Open MPI. Job 1 starts with
// no set (load --allow-missing --preset, the only load that names the
// preset), compiles cold and its harvest writes the set's base, which
// records the preset; job 2 hits every kernel on every rank and harvests nothing;
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
		r := launched(append([]string{kb, "load", "--bundle", set, "--to", dest}, loadArgs...)...)
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
	// Only this load names the preset: the base records it, and the later
	// jobs' loads print its exports unasked.
	ranks, h := runJob(false, "--allow-missing", "--preset", fw.preset)
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

// tritonHash is a Triton cache key (base32 of SHA-256) no generated
// kernel has: the kernel every node compiles in TestHarvestTritonRelocated.
const tritonHash = "ZZNEWKERNEL2345672345672345672345672345672345672345"

// TestHarvestTritonRelocated: a Triton cache on 3 nodes loaded into a
// different DEST on each (DEST/kbnN), so that load rewrote every group
// file with that node's path. Harvest undoes the relocation first: no
// unchanged kernel is "changed", and the kernel every node compiled (the
// same bytes once its node's path is undone) is written once, its group
// file naming the set's origin, not a node's DEST; a later load into yet
// another DEST relocates it there.
func TestHarvestTritonRelocated(t *testing.T) {
	c := needCluster(t)
	l := mpiLaunches[0]
	kb := c.kbundle(t, l.v)
	base, err := os.MkdirTemp(tmpRoot, "triton-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	origin := filepath.Join(base, "cache")
	if out, err := exec.Command("go", "run", filepath.Join(testutil.RepoRoot(), "internal", "cmd", "gencache"),
		"-kernels", "20", "-scale", "0.05", filepath.Join(origin, "triton")).CombinedOutput(); err != nil {
		t.Fatalf("gencache: %v\n%s", err, out)
	}
	store := filepath.Join(base, "store")
	os.Mkdir(store, 0o700)
	set := filepath.Join(store, "cache.kbundle")
	if r := run(t, nil, kb, "pack", "--dir", origin, "--preset", "triton", "-o", set); r.code != 0 {
		t.Fatalf("pack: %s", r)
	}
	parent := c.localDir(t)
	// Each node's DEST is parent/JOB/HOST: the same command, another path.
	perHost := func(job string, argv ...string) []string {
		return append([]string{"sh", "-c", `d="$1/$(hostname)"; shift; exec "$@" --to "$d"`, "sh", filepath.Join(parent, job)}, argv...)
	}
	if r := run(t, nil, c.argvShape(l, true, 1, perHost("j1", kb, "load", "-q", "--parents", "--bundle", set)...)...); r.code != 0 {
		t.Fatalf("load: %s", r)
	}
	for _, n := range c.nodes {
		dest := filepath.Join(parent, "j1", n)
		b, err := os.ReadFile(firstGroupFile(t, c.root(n, filepath.Join(dest, "triton"))))
		if err != nil || !strings.Contains(string(b), `"`+dest+`/triton/`) {
			t.Fatalf("%s: the group file does not name its DEST %s: %v\n%s", n, dest, err, b)
		}
		// The job compiles one kernel on every node, as Triton writes it.
		k := c.root(n, filepath.Join(dest, "triton", tritonHash))
		if err := os.Mkdir(k, 0o755); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(k, "k.cubin"), []byte("cubin of the new kernel"), 0o644)
		grp := fmt.Sprintf(`{"child_paths": {"k.cubin": "%s/triton/%s/k.cubin"}}`, dest, tritonHash)
		os.WriteFile(filepath.Join(k, "__grp__k.json"), []byte(grp), 0o644)
	}
	r := run(t, nil, c.argvShape(l, true, 1, perHost("j1", kb, "harvest", "--bundle", set)...)...)
	if r.code != 0 || !strings.Contains(r.stderr, "kbundle: kbn[1-3]: compiled 2 entries (") || !strings.Contains(r.stderr, "; 2 also on other nodes") {
		t.Fatalf("harvest: want every node to have compiled the same 2 entries, unchanged kernels not counted\n%s", r)
	}
	ls, _ := bundle.ListLayers(set, 0)
	if len(ls) != 1 {
		t.Fatalf("layers %v, want one", ls)
	}
	lr, err := bundle.Open(ls[0].Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	for _, e := range lr.Entries() {
		if !e.Dir {
			files = append(files, e.Name)
		}
	}
	grp, err := lr.ReadEntry("triton/" + tritonHash + "/__grp__k.json")
	lr.Close()
	if len(files) != 2 || err != nil || !strings.Contains(string(grp), `"`+origin+`/triton/`+tritonHash+`/k.cubin"`) {
		t.Fatalf("layer files %v; its group file %s (%v): want the new kernel's 2 files, naming the origin %s", files, grp, err, origin)
	}
	if r := run(t, nil, c.argvShape(l, true, 1, perHost("j2", kb, "load", "-q", "--parents", "--bundle", set)...)...); r.code != 0 {
		t.Fatalf("second load: %s", r)
	}
	n := c.nodes[1]
	dest := filepath.Join(parent, "j2", n)
	b, err := os.ReadFile(c.root(n, filepath.Join(dest, "triton", tritonHash, "__grp__k.json")))
	if err != nil || !strings.Contains(string(b), `"`+dest+`/triton/`+tritonHash+`/k.cubin"`) {
		t.Errorf("%s: the harvested group file, loaded again, does not name DEST %s: %v\n%s", n, dest, err, b)
	}
}

// firstGroupFile is a Triton group file under dir.
func firstGroupFile(t *testing.T, dir string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, "*", "__grp__*.json"))
	if len(m) == 0 {
		t.Fatalf("no group file under %s", dir)
	}
	return m[0]
}

// TestHarvestNumbaConflict is item 2's conflict on 3 real nodes: after a
// load, each node gives the first half of the functions a new signature
// of its own (int32, int16, float32), so each writes its own index
// (….nbi) and a data file of the same name (….2.nbc) with other bytes.
// The harvest takes every file of each unit from one node, the lowest
// rank's (kbn1), never mixing one node's index with another's data, and
// says so; a job then running kbn1's signature on every node hits.
func TestHarvestNumbaConflict(t *testing.T) {
	c := needCluster(t)
	l := mpiLaunches[0]
	py := needModule(t, debianPython, "numba", "JIT", "apt-get install python3-numba")
	kb := c.kbundle(t, l.v)
	script := workloadOnShared(t, "numba_kernels.py")
	store, err := os.MkdirTemp(tmpRoot, "set-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(store, 0o700)
	set := filepath.Join(store, "cache.kbundle")
	parent := c.localDir(t)
	launched := func(argv ...string) *result {
		t.Helper()
		return run(t, nil, c.argvShape(l, true, 1, argv...)...)
	}
	app := func(dest, dtype string) *result {
		t.Helper()
		sh := `case $(hostname) in kbn1) d=int32;; kbn2) d=int16;; *) d=float32;; esac; [ -n "$2" ] && d=$2; ` +
			`NUMBA_CACHE_DIR=$1/numba KBUNDLE_TEST_NEW_SHAPES=$3 KBUNDLE_TEST_EXTRA_DTYPE=$d exec ` + py + ` ` + script
		shapes := "1"
		if dtype == "none" {
			shapes, dtype = "0", ""
		}
		r := launched("sh", "-c", sh, "sh", dest, dtype, shapes)
		if r.code != 0 {
			t.Fatalf("application: %s", r)
		}
		return r
	}
	step := func(job string, loadArgs ...string) string {
		t.Helper()
		dest := filepath.Join(parent, job)
		if r := launched(append([]string{kb, "load", "-q", "--bundle", set, "--to", dest}, loadArgs...)...); r.code != 0 {
			t.Fatalf("%s: load: %s", job, r)
		}
		return dest
	}
	harvestTo := func(dest string) string {
		t.Helper()
		r := launched(kb, "harvest", "--bundle", set, "--to", dest)
		if r.code != 0 {
			t.Fatalf("harvest: %s", r)
		}
		return r.stderr
	}
	// The base: three signatures of every function, the same on every node.
	d0 := step("j0", "--allow-missing")
	app(d0, "none")
	harvestTo(d0)
	// Each node a fourth signature of its own for f00-f05.
	d1 := step("j1")
	app(d1, "")
	h := harvestTo(d1)
	if !strings.Contains(h, "kbn1 (rank 0): compiled ") || !strings.Contains(h, "kbn2 (rank 1): compiled ") {
		t.Errorf("the report does not say what each node compiled:\n%s", h)
	}
	ls, _ := bundle.ListLayers(set, 0)
	if len(ls) != 1 {
		t.Fatalf("layers %v, want one\n%s", ls, h)
	}
	lr, err := bundle.Open(ls[0].Path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lr.Close()
	kbn1, kbn2 := c.filesOn(t, c.nodes[0], d1), c.filesOn(t, c.nodes[1], d1)
	indexes := 0
	for _, e := range lr.Entries() {
		if e.Dir {
			continue
		}
		b, err := lr.ReadEntry(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != kbn1[e.Name] {
			t.Errorf("%s in the layer is not kbn1's (the lowest rank's): a unit mixed from several nodes", e.Name)
		}
		if strings.HasSuffix(e.Name, ".nbi") {
			indexes++
			if kbn2[e.Name] == string(b) {
				t.Errorf("%s: kbn2's index is the same as kbn1's: the nodes did not conflict", e.Name)
			}
		}
	}
	if indexes != 6 {
		t.Errorf("the layer holds %d indexes, want those of f00-f05", indexes)
	}
	// kbn1's signature everywhere: every overload hits on every node.
	d2 := step("j2")
	r := app(d2, "int32")
	for _, line := range strings.Split(r.stdout, "\n") {
		var nr struct{ Rank, Overloads, Hits, Misses int }
		if json.Unmarshal([]byte(line), &nr) == nil && nr.Overloads > 0 && (nr.Misses != 0 || nr.Hits != nr.Overloads) {
			t.Errorf("rank %d with kbn1's signature: %d hits, %d misses of %d", nr.Rank, nr.Hits, nr.Misses, nr.Overloads)
		}
	}
}
