package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestClusterTorch is the cluster proof of load_bundle(group): on the
// namespace cluster's 3 nodes, one torchrun a node (`torchrun --nnodes 3
// --nproc-per-node 2 --rdzv-backend c10d`), 6 workers over gloo on the
// nodes' links, mpi4py blocked, no libmpi, a real Inductor program: the
// node is each worker's host (no test knob), one leader a node installs
// the bundle to node-local storage before torch.compile, and every
// worker's FX-graph cache hits with no miss. A new shape then misses,
// harvest(group) writes it back, and the next job hits it on every worker.
func TestClusterTorch(t *testing.T) {
	state, nodes := clusterState(t)
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	py := filepath.Join(filepath.Dir(tr), "python")
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_inductor_prog.py")
	clusterReadable(strings.SplitN(pp, ":", 2)[1])
	base := t.TempDir()
	os.Chmod(base, 0o755)
	cache := filepath.Join(base, "cache")
	warm := []string{"TORCHINDUCTOR_CACHE_DIR=" + filepath.Join(cache, "inductor"), "OMP_NUM_THREADS=1"}
	if so, se, code := testutil.Run(t, warm, py, prog, "-", "-", "64", "0"); code != 0 || !strings.Contains(so, `"miss": 1`) {
		t.Fatalf("warm-up: exit %d\n%s\n%s", code, so, se)
	}
	file := filepath.Join(base, "cache.kbundle")
	if _, se, code := testutil.Run(t, nil, kb, "pack", "--dir", cache, "--preset", "inductor", "-o", file); code != 0 {
		t.Fatalf("pack: %s", se)
	}
	job := func(shape, harvest string) []map[string]any {
		t.Helper()
		dest := filepath.Join(clusterLocal, fmt.Sprintf("kbundle-torch-%d-%s-%s", os.Getpid(), shape, harvest))
		runs := clusterTorchrun(t, state, nodes, tr, pp, nil, prog, file, dest, shape, harvest)
		out := torchOutput(runs)
		res := torchResults[map[string]any](t, out)
		if len(res) != 6 || runs[0].Code != 0 || runs[1].Code != 0 || runs[2].Code != 0 {
			t.Fatalf("shape %s: %d results\n%s", shape, len(res), out)
		}
		leaders := 0
		for _, r := range res {
			if r["leader"] == true {
				leaders++
			}
			if r["ok"] != true || r["nodes"].(float64) != 3 {
				t.Errorf("shape %s: %v", shape, r)
			}
		}
		if leaders != 3 {
			t.Errorf("shape %s: %d leaders, want 3", shape, leaders)
		}
		return res
	}
	for _, r := range job("64", "0") {
		if r["hit"].(float64) < 1 || r["miss"].(float64) != 0 {
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

// clusterJobs counts the cluster's torchrun jobs of this process: each
// has its own rendezvous port and id.
var clusterJobs atomic.Int32

// torchNodeRun is one node's torchrun of a cluster job: its exit code,
// outputs, and when it ended.
type torchNodeRun struct {
	Node           string
	Code           int
	Stdout, Stderr string
	End            time.Time
}

// clusterTorchrun runs prog with args as one torchrun a node on the
// cluster (`torchrun --nnodes 3 --nproc-per-node 2 --rdzv-backend c10d`,
// the rendezvous on the first node), each started through the cluster's
// rsh with PYTHONPATH pp and env, and returns each node's run once all
// have ended. env's values and args are single words (the rsh joins a
// command's words for sh -c, as ssh does).
func clusterTorchrun(t *testing.T, state string, nodes []string, tr, pp string, env []string, prog string, args ...string) []torchNodeRun {
	t.Helper()
	n := clusterJobs.Add(1)
	port := fmt.Sprint(29400 + os.Getpid()%500 + int(n))
	argv := append([]string{"env", "PYTHONPATH=" + pp, "PYTHONDONTWRITEBYTECODE=1"}, env...)
	argv = append(argv, tr, "--nnodes", fmt.Sprint(clusterNodes), "--nproc-per-node", fmt.Sprint(clusterPerNode),
		"--rdzv-backend", "c10d", "--rdzv-endpoint", nodes[0]+":"+port, "--rdzv-id", "kbtorch"+port, prog)
	argv = append(argv, args...)
	runs := make([]torchNodeRun, len(nodes))
	var wg sync.WaitGroup
	for i, node := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			so, se, code := testutil.Run(t, nil, append([]string{filepath.Join(state, "rsh"), node}, argv...)...)
			runs[i] = torchNodeRun{Node: node, Code: code, Stdout: so, Stderr: se, End: time.Now()}
		}()
	}
	wg.Wait()
	for _, r := range runs {
		if r.End.IsZero() { // it timed out, which failed the test
			t.FailNow()
		}
	}
	return runs
}

// torchOutput is the runs' outputs, node by node, for results and
// failure messages.
func torchOutput(runs []torchNodeRun) string {
	var b strings.Builder
	for _, r := range runs {
		fmt.Fprintf(&b, "--- %s: exit %d\n%s%s", r.Node, r.Code, r.Stdout, r.Stderr)
	}
	return b.String()
}

// torchResults decodes the "RESULT {json}" lines of a torchrun job's
// output.
func torchResults[T any](t *testing.T, out string) []T {
	t.Helper()
	var res []T
	for _, line := range strings.Split(out, "\n") {
		if js, ok := strings.CutPrefix(line, "RESULT "); ok {
			var r T
			if err := json.Unmarshal([]byte(js), &r); err != nil {
				t.Fatalf("%q: %v", line, err)
			}
			res = append(res, r)
		}
	}
	return res
}
