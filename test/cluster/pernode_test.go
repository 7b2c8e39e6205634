package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// TestSlurmPerNode: docs/slurm.md's `srun torchrun` recipe without MPI, on
// the test Slurm's 3 nodes with the build without MPI. `srun
// --ntasks-per-node=1 --kill-on-bad-exit=1 kbundle load --per-node` has
// each node read, check and install the bundle itself (the launcher's rank
// 0 prints DEST and the summary); `harvest --per-node` writes one layer a
// node, which the next per-node load reads and `merge` folds. A node whose
// DEST is taken fails alone, named, and leaves that DEST as it was.
func TestSlurmPerNode(t *testing.T) {
	c := needCluster(t)
	c.needSlurm(t)
	tree := makeTree(t, 1<<20)
	kb := c.kbundle(t, testutil.NoMPI)
	file := pack(t, kb, tree)
	parent := c.localDir(t)
	srun := func(args ...string) *result {
		t.Helper()
		return c.slurm(t, nil, append([]string{"srun", "-N", fmt.Sprint(numNodes), "--ntasks-per-node=1", "--kill-on-bad-exit=1", kb}, args...)...)
	}

	dest := filepath.Join(parent, "dest")
	r := srun("load", "--per-node", "--bundle", file, "--to", dest)
	if r.code != 0 {
		t.Fatalf("load --per-node: %s", r)
	}
	if strings.TrimSpace(r.stdout) != dest || strings.Count(r.stderr, "kbundle: loaded ") != 1 ||
		!strings.Contains(r.stderr, "(--per-node: each node's task loads its own)") {
		t.Errorf("want DEST once on stdout and one summary (rank 0's): %s", r)
	}
	for _, n := range c.nodes {
		sameTrees(t, n, tree, c.root(n, dest))
	}

	// The job compiled something different on each node.
	for i, n := range c.nodes {
		if err := os.WriteFile(filepath.Join(c.root(n, dest), "numba", fmt.Sprintf("node%d.nbi", i)), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r = srun("harvest", "--per-node", "--bundle", file, "--to", dest)
	if r.code != 0 {
		t.Fatalf("harvest --per-node: %s", r)
	}
	if layers, err := bundle.ListLayers(file, 0); err != nil || len(layers) != numNodes {
		t.Errorf("want %d layers, one a node: %v, %v\n%s", numNodes, layers, err, r)
	}
	for _, step := range []string{"layers", "merged"} {
		if step == "merged" {
			if m := run(t, nil, kb, "merge", file); m.code != 0 {
				t.Fatalf("merge: %s", m)
			}
		}
		d := filepath.Join(parent, "again-"+step)
		if r := srun("load", "--per-node", "--bundle", file, "--to", d); r.code != 0 {
			t.Fatalf("%s: load --per-node: %s", step, r)
		}
		for _, n := range c.nodes {
			for i := range c.nodes {
				if b, err := os.ReadFile(filepath.Join(c.root(n, d), "numba", fmt.Sprintf("node%d.nbi", i))); err != nil || string(b) != c.nodes[i] {
					t.Errorf("%s: %s: node %d's harvested file: %q, %v", step, n, i, b, err)
				}
			}
		}
	}

	// A DEST taken on the second node: that node fails, named; its DEST
	// keeps what it held; the step's status is the failure's.
	taken := filepath.Join(parent, "taken")
	bad := c.nodes[1]
	if err := os.MkdirAll(c.root(bad, taken), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(c.root(bad, taken), "results"), []byte("mine"), 0o644)
	r = srun("load", "--per-node", "--bundle", file, "--to", taken)
	if r.code == 0 || !strings.Contains(r.stderr, "kbundle: node "+bad+": ") {
		t.Errorf("want a failure naming node %s: %s", bad, r)
	}
	if b, _ := os.ReadFile(filepath.Join(c.root(bad, taken), "results")); string(b) != "mine" || len(c.entries(bad, taken)) != 1 {
		t.Errorf("%s: the taken DEST was changed: %v", bad, c.entries(bad, taken))
	}
	for _, n := range c.nodes {
		for _, e := range c.entries(n, parent) {
			if strings.HasPrefix(e, ".kbundle-tmp") {
				t.Errorf("%s: a temporary is left: %s", n, e)
			}
		}
	}
}
