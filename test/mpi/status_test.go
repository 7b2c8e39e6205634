package mpi

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestStatusUnderMPI: kbundle status under a launcher is collective
// (issue 18 part 1): with fake nodes at np 4, rank 0 alone prints one
// line per node and tree (a node whose tree changed says so), --json has
// every node, and a DEST that is not kbundle's on one node makes every
// rank exit 1. The no-MPI build under the launcher is refused (exit 2).
func TestStatusUnderMPI(t *testing.T) {
	tree := makeTree(t)
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=2"}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			set := packTree(t, tree)
			dest := filepath.Join(t.TempDir(), "dest")
			if _, se, code := testutil.RunMPI(t, v, 4, env, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("load: exit %d\n%s", code, se)
			}
			if err := os.WriteFile(filepath.Join(dest+".node1", "new.bin"), []byte("compiled on node 1"), 0o600); err != nil {
				t.Fatal(err)
			}
			so, se, code := testutil.RunMPI(t, v, 4, env, kb, "status", dest)
			lines := strings.Split(strings.TrimSpace(so), "\n")
			if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "dest.node0: installed by job ") ||
				!strings.HasSuffix(lines[0], "; unchanged since install") ||
				!strings.HasSuffix(lines[1], "; changed since install: 1 new file, 0 changed, 0 missing") {
				t.Fatalf("status: exit %d, want two lines, node 1's changed:\n%s\n%s", code, so, se)
			}
			so, _, code = testutil.RunMPI(t, v, 4, env, kb, "status", "--json", dest)
			var out struct {
				SchemaVersion int `json:"schema_version"`
				Nodes         []struct {
					FirstRank int `json:"first_rank"`
					Trees     []struct {
						State string `json:"state"`
					} `json:"trees"`
				} `json:"nodes"`
			}
			if err := json.Unmarshal([]byte(so), &out); err != nil || code != 0 || out.SchemaVersion != 1 || len(out.Nodes) != 2 ||
				out.Nodes[1].FirstRank != 2 || out.Nodes[1].Trees[0].State != "installed" {
				t.Fatalf("status --json: exit %d, %v, %+v\n%s", code, err, out, so)
			}
			if err := os.WriteFile(filepath.Join(dest+".node1", ".kbundle-installed"), []byte("not a record"), 0o600); err != nil {
				t.Fatal(err)
			}
			wrap, codes := rankWrapper(t)
			_, se, _ = testutil.RunMPI(t, v, 4, append(env, keepGoing...), wrap, kb, "status", dest)
			wantExits(t, codes, 4, 1, se) // node 1's DEST is not kbundle's
		})
	}
	t.Run("nompi", func(t *testing.T) {
		kb := testutil.Kbundle(t, testutil.NoMPI)
		_, se, code := testutil.RunMPI(t, testutil.OpenMPI, 2, nil, kb, "status", filepath.Join(t.TempDir(), "d"))
		if code != 2 || !strings.Contains(se, "built without MPI") {
			t.Errorf("exit %d, want 2 and the no-MPI build named\n%s", code, se)
		}
	})
}
