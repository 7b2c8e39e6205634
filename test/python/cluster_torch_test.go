package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

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
	for d := strings.SplitN(pp, ":", 2)[1]; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
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
	jobs := 0
	job := func(shape, harvest string) []map[string]any {
		t.Helper()
		jobs++
		dest := filepath.Join(clusterLocal, fmt.Sprintf("kbundle-torch-%d-%d", os.Getpid(), jobs))
		port := fmt.Sprint(29400 + os.Getpid()%500 + jobs)
		var (
			mu  sync.Mutex
			out strings.Builder
			wg  sync.WaitGroup
		)
		codes := make([]int, len(nodes))
		for i, n := range nodes {
			wg.Add(1)
			go func() {
				defer wg.Done()
				so, se, code := testutil.Run(t, nil, filepath.Join(state, "rsh"), n, "env", "PYTHONPATH="+pp,
					"PYTHONDONTWRITEBYTECODE=1", tr, "--nnodes", "3", "--nproc-per-node", "2",
					"--rdzv-backend", "c10d", "--rdzv-endpoint", nodes[0]+":"+port, "--rdzv-id", "kbtorch"+port,
					prog, file, dest, shape, harvest)
				mu.Lock()
				defer mu.Unlock()
				codes[i] = code
				fmt.Fprintf(&out, "--- %s: exit %d\n%s%s", n, code, so, se)
			}()
		}
		wg.Wait()
		var res []map[string]any
		for _, line := range strings.Split(out.String(), "\n") {
			if js, ok := strings.CutPrefix(line, "RESULT "); ok {
				var m map[string]any
				if err := json.Unmarshal([]byte(js), &m); err != nil {
					t.Fatal(err)
				}
				res = append(res, m)
			}
		}
		if len(res) != 6 || codes[0] != 0 || codes[1] != 0 || codes[2] != 0 {
			t.Fatalf("shape %s: %d results\n%s", shape, len(res), out.String())
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
