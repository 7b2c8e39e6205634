package pythontest

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// torchrun returns the torchrun of the torch environment (KBUNDLE_TORCHRUN,
// else the repository's .venv, scripts/dev/venv.sh), or skips (fails when
// KBUNDLE_TEST_PYTHON=1).
func torchrun(t *testing.T) string {
	t.Helper()
	tr := os.Getenv("KBUNDLE_TORCHRUN")
	if tr == "" {
		tr = filepath.Join(testutil.RepoRoot(), ".venv", "bin", "torchrun")
	}
	if _, err := os.Stat(tr); err != nil {
		msg := fmt.Sprintf("no torchrun (%v): make .venv with scripts/dev/venv.sh, or set KBUNDLE_TORCHRUN", err)
		if testutil.Required("PYTHON") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return tr
}

// TestDetectUnderTorchrun runs `torchrun --nproc-per-node N kbundle detect
// --json` with the real torchrun: N workers are torchelastic ranks 0..N-1
// of N in bundle mode, and one worker is no launch at all (mode write).
func TestDetectUnderTorchrun(t *testing.T) {
	tr := torchrun(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	for _, n := range []int{1, 2, 4} {
		stdout, stderr, code := testutil.Run(t, nil, tr, "--standalone", "--nnodes", "1",
			"--nproc-per-node", fmt.Sprint(n), "--no-python", kb, "detect", "--json")
		if code != 0 {
			t.Fatalf("n=%d: exit %d\n%s", n, code, stderr)
		}
		var ranks []int
		for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
			var r struct {
				Launcher   string
				MPI        bool
				Rank, Size int
				LocalRank  int `json:"local_rank"`
				LocalSize  int `json:"local_size"`
				Node       int
				Mode       string
			}
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatalf("n=%d: %q: %v", n, line, err)
			}
			wantMode := "bundle"
			if n == 1 {
				wantMode = "write"
			}
			if r.Launcher != "torchelastic" || r.MPI != (n > 1) || r.Size != n || r.Rank != r.LocalRank ||
				r.LocalSize != n || r.Node != 0 || r.Mode != wantMode {
				t.Errorf("n=%d: %s", n, line)
			}
			ranks = append(ranks, r.Rank)
		}
		sort.Ints(ranks)
		if len(ranks) != n || ranks[0] != 0 || ranks[n-1] != n-1 {
			t.Errorf("n=%d: ranks %v", n, ranks)
		}
	}
}

// torchSite makes a PYTHONPATH for the torch tests: the kbundle package
// of python/ with libkbundle built without MPI (lib/libkbundle-nompi.so,
// no libmpi linked), ahead of a folder whose mpi4py fails to import, so
// that nothing of MPI can be used.
func torchSite(t *testing.T) string {
	t.Helper()
	root := testutil.RepoRoot()
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	if err := os.MkdirAll(site, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-r", filepath.Join(root, "python", "kbundle"), site).CombinedOutput(); err != nil {
		t.Fatalf("copy python/kbundle: %v\n%s", err, out)
	}
	pkg := filepath.Join(site, "kbundle")
	libs, _ := filepath.Glob(filepath.Join(pkg, "lib", "libkbundle-*"))
	for _, l := range libs {
		os.Remove(l)
	}
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", filepath.Join(pkg, "lib", "libkbundle-nompi.so"), "./cmd/libkbundle")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build libkbundle without MPI: %v\n%s", err, b)
	}
	if err := os.WriteFile(filepath.Join(pkg, "_version.py"), []byte("__version__ = \"test\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	block := filepath.Join(dir, "block", "mpi4py")
	if err := os.MkdirAll(block, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(block, "__init__.py"), []byte("raise ImportError('mpi4py is blocked in this test')\n"), 0o644)
	return filepath.Join(dir, "block") + ":" + site
}

type torchResult struct {
	Rank      int
	Host      string
	OK        bool
	Leader    bool
	Nodes     int
	Ranks     int
	Dest      string
	Error     string
	Message   string
	Layer     string
	Files     int
	LibMPI    bool `json:"libmpi"`
	MPI4py    bool `json:"mpi4py"`
	Harvested bool `json:"harvested"`
}

// torchJob runs torch_prog.py under torchrun --nproc-per-node n and
// returns each rank's result, by rank.
func torchJob(t *testing.T, tr, pythonpath string, n int, env []string, args ...string) []torchResult {
	t.Helper()
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_prog.py")
	argv := append([]string{tr, "--standalone", "--nnodes", "1", "--nproc-per-node", fmt.Sprint(n), prog}, args...)
	stdout, stderr, code := testutil.Run(t, append([]string{"PYTHONPATH=" + pythonpath}, env...), argv...)
	all := torchResults[torchResult](t, stdout)
	res := make([]torchResult, n)
	for _, r := range all {
		if r.Rank < 0 || r.Rank >= n {
			t.Fatalf("rank %d of %d\nstdout:\n%s", r.Rank, n, stdout)
		}
		res[r.Rank] = r
	}
	if len(all) != n || code != 0 {
		t.Fatalf("torchrun %v: exit %d, %d results of %d\nstdout:\n%s\nstderr:\n%s", args, code, len(all), n, stdout, stderr)
	}
	for _, r := range res {
		if r.LibMPI || r.MPI4py {
			t.Errorf("rank %d: libmpi loaded %v, mpi4py imported %v", r.Rank, r.LibMPI, r.MPI4py)
		}
	}
	return res
}

// bigBundle packs 300 MB of random bytes (incompressible: a load of it
// takes a while) into dir/big.kbundle, and returns its path; the source
// tree is removed.
func bigBundle(t *testing.T, kb, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "big")
	os.MkdirAll(src, 0o755)
	b := make([]byte, 300<<20)
	rand.New(rand.NewSource(1)).Read(b)
	os.WriteFile(filepath.Join(src, "big.bin"), b, 0o644)
	file := src + ".kbundle"
	if _, se, code := testutil.Run(t, nil, kb, "pack", "--dir", src, "-o", file); code != 0 {
		t.Fatalf("pack %s: %s", src, se)
	}
	os.RemoveAll(src)
	return file
}

// TestTorchLoad: load_bundle(torch.distributed.group.WORLD) under the
// real torchrun, gloo, 2 and 4 workers (KBUNDLE_TEST_RANKS_PER_NODE=2
// makes 4 workers two nodes), with mpi4py not importable and no libmpi
// loaded: every node's DEST holds the bundle, one leader a node, every
// rank the same outcome. A damaged bundle: every rank raises the same
// error, nothing installed; a node's DEST taken: every rank raises,
// naming it, and no node keeps a copy.
func TestTorchLoad(t *testing.T) {
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	src := filepath.Join(t.TempDir(), "cache")
	for _, f := range []string{"numba/a.nbi", "numba/a.1.nbc", "triton/k1/kernel.json", "top.txt"} {
		os.MkdirAll(filepath.Join(src, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(src, f), []byte(strings.Repeat(f, 5000)), 0o644)
	}
	store := t.TempDir()
	file := filepath.Join(store, "cache.kbundle")
	if _, stderr, code := testutil.Run(t, nil, kb, "pack", "--dir", src, "-o", file); code != 0 {
		t.Fatalf("pack: %s", stderr)
	}
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprintf("np%d", n), func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "dest")
			res := torchJob(t, tr, pp, n, []string{"KBUNDLE_TEST_RANKS_PER_NODE=2"}, "load", file, dest)
			leaders := 0
			for _, r := range res {
				if !r.OK || r.Nodes != n/2 || r.Ranks != n {
					t.Errorf("rank %d: %+v", r.Rank, r)
				}
				if r.Leader {
					leaders++
				}
			}
			if leaders != n/2 {
				t.Errorf("%d leaders, want %d", leaders, n/2)
			}
			for k := range n / 2 {
				d := fmt.Sprintf("%s.node%d", dest, k)
				if b, err := os.ReadFile(filepath.Join(d, "top.txt")); err != nil || string(b) != strings.Repeat("top.txt", 5000) {
					t.Errorf("%s: %v", d, err)
				}
			}
		})
	}
	t.Run("damaged", func(t *testing.T) {
		b, _ := os.ReadFile(file)
		bad := filepath.Join(store, "bad.kbundle")
		b[len(b)/2] ^= 0xff
		os.WriteFile(bad, b, 0o644)
		dest := filepath.Join(t.TempDir(), "dest")
		res := torchJob(t, tr, pp, 4, []string{"KBUNDLE_TEST_RANKS_PER_NODE=2"}, "load", bad, dest)
		for _, r := range res {
			if r.OK || r.Error != "BundleUnusableError" || r.Message != res[0].Message {
				t.Errorf("rank %d: %+v, want rank 0's BundleUnusableError", r.Rank, r)
			}
		}
		if m, _ := filepath.Glob(dest + "*"); len(m) != 0 {
			t.Errorf("left: %v", m)
		}
	})
	t.Run("dest-taken", func(t *testing.T) {
		dest := filepath.Join(t.TempDir(), "dest")
		os.MkdirAll(dest+".node1", 0o755)
		os.WriteFile(filepath.Join(dest+".node1", "results"), []byte("mine"), 0o644)
		res := torchJob(t, tr, pp, 4, []string{"KBUNDLE_TEST_RANKS_PER_NODE=2"}, "load", file, dest)
		for _, r := range res {
			if r.OK || r.Error != "LoadFailedError" || !strings.Contains(r.Message, "dest.node1") {
				t.Errorf("rank %d: %+v, want LoadFailedError naming dest.node1", r.Rank, r)
			}
		}
		if _, err := os.Stat(dest + ".node0"); err == nil {
			t.Errorf("node 0 kept a copy")
		}
	})
}

// TestTorchHarvest: harvest(torch.distributed.group.WORLD) after
// load_bundle, 4 workers as 2 nodes: each node's leader compiled a file
// of its own; one layer holds both, and the next job's load has them.
func TestTorchHarvest(t *testing.T) {
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	src := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(filepath.Join(src, "numba"), 0o755)
	os.WriteFile(filepath.Join(src, "numba", "a.nbi"), []byte("index"), 0o644)
	file := filepath.Join(t.TempDir(), "cache.kbundle")
	if _, stderr, code := testutil.Run(t, nil, kb, "pack", "--dir", src, "-o", file); code != 0 {
		t.Fatalf("pack: %s", stderr)
	}
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=2"}
	dest := filepath.Join(t.TempDir(), "dest")
	res := torchJob(t, tr, pp, 4, env, "harvest", file, dest, "new.nbi")
	for _, r := range res {
		if !r.OK || !r.Harvested || r.Layer == "" || r.Layer != res[0].Layer {
			t.Errorf("rank %d: %+v", r.Rank, r)
		}
	}
	again := filepath.Join(t.TempDir(), "again")
	torchJob(t, tr, pp, 4, env, "load", file, again)
	for k := range 2 {
		b, err := os.ReadFile(filepath.Join(fmt.Sprintf("%s.node%d", again, k), "numba", "new.nbi"))
		if err != nil || !strings.HasPrefix(string(b), "compiled on "+dest+".node") {
			t.Errorf("node %d: the harvested file: %q, %v", k, b, err)
		}
	}
}

// TestTorchNodes: without the test's fake nodes, the node is the host:
// 2 workers of one torchrun are one node with one leader (LOCAL_RANK 0);
// two torchrun agents on one host (GROUP_RANK 0 and 1, each with its own
// LOCAL_RANK 0) contradict the host name, and every rank refuses.
func TestTorchNodes(t *testing.T) {
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	src := filepath.Join(t.TempDir(), "cache")
	os.MkdirAll(src, 0o755)
	os.WriteFile(filepath.Join(src, "top.txt"), []byte("top"), 0o644)
	file := filepath.Join(t.TempDir(), "cache.kbundle")
	if _, stderr, code := testutil.Run(t, nil, kb, "pack", "--dir", src, "-o", file); code != 0 {
		t.Fatalf("pack: %s", stderr)
	}
	dest := filepath.Join(t.TempDir(), "dest")
	res := torchJob(t, tr, pp, 2, nil, "load", file, dest)
	for _, r := range res {
		if !r.OK || r.Nodes != 1 || r.Leader != (r.Rank == 0) || r.Dest != dest {
			t.Errorf("rank %d: %+v", r.Rank, r)
		}
	}

	// Two agents, 2 workers each, on this one host.
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_prog.py")
	port := fmt.Sprint(29700 + os.Getpid()%200)
	var outs [2]string
	done := make(chan int, 2)
	for a := range 2 {
		go func() {
			so, _, _ := testutil.Run(t, []string{"PYTHONPATH=" + pp}, tr, "--nnodes", "2", "--nproc-per-node", "2",
				"--rdzv-backend", "c10d", "--rdzv-endpoint", "127.0.0.1:"+port, "--rdzv-id", "kbtest", prog, "load", file, dest+"2")
			outs[a] = so
			done <- a
		}()
	}
	<-done
	<-done
	all := outs[0] + outs[1]
	if n := strings.Count(all, `"error": "LoadFailedError"`) + strings.Count(all, `"error": "KbundleMPIError"`); n != 4 ||
		strings.Count(all, "both have local rank") != 4 {
		t.Errorf("want every rank to refuse two agents on one host:\n%s", all)
	}
}

// TestTorchInductor is the proof with a real Inductor program (CPU): a
// warm-up fills an Inductor cache, pack makes the bundle, and under
// torchrun (2 workers as 2 nodes) load_bundle(group) before the first
// compiled call makes every worker's FX-graph cache hit with no miss. A
// job of a new shape misses, harvest(group) writes it back, and the next
// job of that shape hits on every worker.
func TestTorchInductor(t *testing.T) {
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	py := filepath.Join(filepath.Dir(tr), "python")
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_inductor_prog.py")
	cache := filepath.Join(t.TempDir(), "cache")
	// torchrun sets OMP_NUM_THREADS=1 for its workers, and Inductor's CPU
	// code keys on the thread count: the warm-up runs with the job's.
	warm := []string{"TORCHINDUCTOR_CACHE_DIR=" + filepath.Join(cache, "inductor"), "TRITON_CACHE_DIR=" + filepath.Join(cache, "triton"),
		"OMP_NUM_THREADS=1"}
	if so, se, code := testutil.Run(t, warm, py, prog, "-", "-", "64", "0"); code != 0 || !strings.Contains(so, `"miss": 1`) {
		t.Fatalf("warm-up: exit %d\n%s\n%s", code, so, se)
	}
	file := filepath.Join(t.TempDir(), "cache.kbundle")
	if _, se, code := testutil.Run(t, nil, kb, "pack", "--dir", cache, "--preset", "inductor", "-o", file); code != 0 {
		t.Fatalf("pack: %s", se)
	}
	job := func(shape, harvest string) []map[string]any {
		t.Helper()
		dest := filepath.Join(t.TempDir(), "dest")
		argv := []string{tr, "--standalone", "--nnodes", "1", "--nproc-per-node", "2", prog, file, dest, shape, harvest}
		so, se, code := testutil.Run(t, []string{"PYTHONPATH=" + pp, "KBUNDLE_TEST_RANKS_PER_NODE=1"}, argv...)
		res := torchResults[map[string]any](t, so)
		if code != 0 || len(res) != 2 {
			t.Fatalf("shape %s: exit %d\n%s\n%s", shape, code, so, se)
		}
		return res
	}
	for _, r := range job("64", "0") {
		if r["ok"] != true || r["hit"].(float64) < 1 || r["miss"].(float64) != 0 || r["nodes"].(float64) != 2 {
			t.Errorf("loaded shape 64: %v", r)
		}
	}
	for _, r := range job("200", "1") {
		if r["miss"].(float64) != 1 || r["harvested"] != true || r["layer"] == "" {
			t.Errorf("new shape 200, harvested: %v", r)
		}
	}
	for _, r := range job("200", "0") {
		if r["hit"].(float64) < 1 || r["miss"].(float64) != 0 {
			t.Errorf("harvested shape 200: %v", r)
		}
	}
}

// TestTorchKilled: a worker killed (SIGKILL) in the middle of
// load_bundle(group): the job ends at once, well within the timeout
// (torchrun's agent ends the other workers with SIGTERM, which the load
// answers by removing what it had written), no node has a DEST, and no
// staging tree is left beside it.
func TestTorchKilled(t *testing.T) {
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	file := bigBundle(t, kb, t.TempDir())
	parent := t.TempDir()
	dest := filepath.Join(parent, "dest")
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_prog.py")
	start := time.Now()
	so, se, code := testutil.Run(t, []string{"PYTHONPATH=" + pp, "KBUNDLE_TEST_RANKS_PER_NODE=2", "KBUNDLE_BCAST_CHUNK=65536",
		"TORCH_PROG_KILL=3:0.3"}, tr, "--standalone", "--nnodes", "1", "--nproc-per-node", "4", prog, "load", file, dest)
	took := time.Since(start)
	if code == 0 || strings.Contains(so, `"ok": true`) {
		t.Fatalf("the job succeeded with a worker killed (exit %d)\n%s\n%s", code, so, se)
	}
	if took > 60*time.Second { // the load's timeout is 60 s (torch_prog.py)
		t.Errorf("the job took %v", took)
	}
	left, _ := os.ReadDir(parent)
	for _, e := range left {
		t.Errorf("left beside DEST: %s", e.Name())
	}
}
