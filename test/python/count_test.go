package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestCountsUnderMPI proves load_bundle(..., count=True)'s hooks with
// real JAX and PyTorch (the .venv of scripts/dev/venv.sh) under Open
// MPI's mpirun at 2 ranks (issue 30): two jobs of count_prog.py, the
// first on no set (it compiles, its harvest writes the set), the second
// on the set; on every rank the counts harvest gathered equal the
// program's own (a JAX listener of its own, Inductor's counters read
// itself): misses then hits, and the report says them.
func TestCountsUnderMPI(t *testing.T) {
	if !testutil.Required("BIGFRAMEWORKS") {
		t.Skip("JAX/PyTorch tests run with KBUNDLE_TEST_BIGFRAMEWORKS=1 (scripts/dev/venv.sh installs them)")
	}
	py := filepath.Join(testutil.RepoRoot(), ".venv", "bin", "python")
	if out, err := exec.Command(py, "-c", "import jax, torch, mpi4py").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot import jax, torch, mpi4py (scripts/dev/venv.sh): %v\n%s", py, err, out)
	}
	site := install(t, py)
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "count_prog.py")
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "kcache", "cache.kbundle"), filepath.Join(dir, "dest")
	os.MkdirAll(filepath.Dir(set), 0o755)
	env := []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1", "KBUNDLE_LIBRARY=", "KBUNDLE_CACHE_DIR=", "KBUNDLE_LOCAL_DIR=",
		"KBUNDLE_BUNDLE=", "JAX_PLATFORMS=cpu", "CUDA_VISIBLE_DEVICES=", "TMPDIR=" + dir}
	type rankOut struct {
		Own     map[string][2]int `json:"own"`
		Harvest map[string][2]int `json:"harvest"`
		Report  []string          `json:"report"`
	}
	job := func(name string) []rankOut {
		t.Helper()
		out := t.TempDir()
		so, se, code := testutil.RunMPI(t, testutil.OpenMPI, 2, env, py, prog, set, dest+"-"+name, out)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", name, code, so, se)
		}
		var ranks []rankOut
		for r := range 2 {
			b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("rank.%d", r)))
			var ro rankOut
			if err == nil {
				err = json.Unmarshal(b, &ro)
			}
			if err != nil {
				t.Fatalf("%s: rank %d: %v\n%s", name, r, err, se)
			}
			ranks = append(ranks, ro)
		}
		t.Logf("%s: %+v", name, ranks)
		return ranks
	}
	// The cold job's ranks share the node's DEST: a rank may hit what the
	// other compiled a moment before; the job misses. The warm job hits.
	check := func(name string, ranks []rankOut, hits bool) {
		t.Helper()
		for _, fw := range []string{"JAX", "Inductor"} {
			var sum [2]int
			for r, ro := range ranks {
				own, got := ro.Own[fw], ro.Harvest[fw]
				if own != got {
					t.Errorf("%s: rank %d: %s harvest counted %v (hits, misses), the program %v", name, r, fw, got, own)
				}
				sum[0], sum[1] = sum[0]+own[0], sum[1]+own[1]
				if hits && (own[0] == 0 || own[1] != 0) {
					t.Errorf("%s: rank %d: %s %v, want hits only", name, r, fw, own)
				}
			}
			if !hits && sum[1] == 0 {
				t.Errorf("%s: %s %v over the ranks, want misses", name, fw, sum)
			}
		}
		for r, ro := range ranks {
			if !strings.Contains(strings.Join(ro.Report, "\n"), "JAX: ") {
				t.Errorf("%s: rank %d: no JAX line in the report %q", name, r, ro.Report)
			}
		}
	}
	check("cold job", job("cold"), false)
	check("warm job", job("warm"), true)
}
