package mpi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestHarvestKindConflict is the review's h1b (2026-12-01b, H1) under both
// MPIs, np 2 with fake nodes: node 0 compiled into a new directory x
// (x/y), node 1 wrote a file x, and replaced the set's directory
// triton/def456 by a file. The harvest takes node 0's x/y, reports node
// 1's x skipped, and takes node 1's file triton/def456 (the newest layer
// wins with the whole subtree); the next load installs that view, a merge
// writes a base that verifies, and a load of the merged set installs the
// same. Before, the layer held a file x and a file x/y: every later load
// failed (exit 3), and so did the merge.
func TestHarvestKindConflict(t *testing.T) {
	tree := makeTree(t)
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			set := packTree(t, tree)
			dir := t.TempDir()
			dest := filepath.Join(dir, "dest")
			if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("load: exit %d\n%s", code, se)
			}
			write := func(name, content string) {
				t.Helper()
				if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(name, []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			write(filepath.Join(dest+".node0", "x", "y"), "node 0")
			write(filepath.Join(dest+".node1", "x"), "node 1")
			if err := os.RemoveAll(filepath.Join(dest+".node1", "triton", "def456")); err != nil {
				t.Fatal(err)
			}
			write(filepath.Join(dest+".node1", "triton", "def456"), "now a file")
			_, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--bundle", set, "--to", dest)
			layers, _ := filepath.Glob(set + ".d/*.kbundle")
			if code != 0 || len(layers) != 1 || !strings.Contains(se, "skipped x (a file here and a directory on") {
				t.Fatalf("harvest: exit %d, layers %v, want one layer and node 1's x skipped\n%s", code, layers, se)
			}
			check := func(what, to string) {
				t.Helper()
				if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--bundle", set, "--to", to); code != 0 {
					t.Fatalf("%s: exit %d\n%s", what, code, se)
				}
				for _, node := range []string{".node0", ".node1"} {
					y, err := os.ReadFile(filepath.Join(to+node, "x", "y"))
					f, ferr := os.ReadFile(filepath.Join(to+node, "triton", "def456"))
					if err != nil || string(y) != "node 0" || ferr != nil || string(f) != "now a file" {
						t.Errorf("%s, %s: x/y %q (%v), triton/def456 %q (%v)", what, node, y, err, f, ferr)
					}
				}
			}
			check("the next load", filepath.Join(dir, "next"))
			if _, se, code := testutil.Run(t, nil, kb, "merge", "-q", set); code != 0 {
				t.Fatalf("merge: exit %d\n%s", code, se)
			}
			if _, se, code := testutil.Run(t, nil, kb, "verify", set); code != 0 {
				t.Fatalf("verify of the merged base: exit %d\n%s", code, se)
			}
			check("the load after the merge", filepath.Join(dir, "merged"))
		})
	}
}
