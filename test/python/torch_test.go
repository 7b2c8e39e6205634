package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

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
