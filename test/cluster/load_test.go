package cluster

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestDetect: `kbundle detect --json` on every rank of every node reports
// its rank, the job's size, its local rank and size and, where the launcher
// says it (Slurm), its node; each rank runs on the node its rank implies.
func TestDetect(t *testing.T) {
	c := needCluster(t)
	for _, l := range append(mpiLaunches, srunLaunches...) {
		t.Run(l.name, func(t *testing.T) { checkDetect(t, c, l) })
	}
}

// checkDetect is TestDetect under launch l.
func checkDetect(t *testing.T, c *cluster, l launch) {
	t.Helper()
	kb := c.kbundle(t, l.v)
	r := c.job(t, l, nil, "sh", "-c", `echo "$(hostname) $(`+kb+` detect --json)"`)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	seen := map[int]bool{}
	for _, line := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
		host, js, _ := strings.Cut(line, " ")
		var d testutil.Detection
		if err := json.Unmarshal([]byte(js), &d); err != nil {
			t.Fatalf("line %q: %v\n%s", line, err, r)
		}
		node := d.Rank / perNode
		if d.Rank < 0 || d.Rank >= np || seen[d.Rank] {
			t.Errorf("%s: rank %d (seen twice or out of range)", host, d.Rank)
			continue
		}
		seen[d.Rank] = true
		if host != c.nodes[node] {
			t.Errorf("rank %d runs on %s, want %s", d.Rank, host, c.nodes[node])
		}
		if !d.MPI || d.Size != np || d.LocalRank != d.Rank%perNode || d.LocalSize != perNode {
			t.Errorf("%s rank %d: %+v, want mpi, size %d, local rank %d of %d", host, d.Rank, d, np, d.Rank%perNode, perNode)
		}
		if l.rt != "" && string(d.Launcher) != testutil.RuntimeByName(l.rt).Family {
			t.Errorf("%s rank %d: launcher %s, want %s", host, d.Rank, d.Launcher, testutil.RuntimeByName(l.rt).Family)
		}
		// Only Slurm names the node; mpirun and Hydra say -1 (unknown).
		wantNode := -1
		if l.srun {
			wantNode = node
		}
		if d.Node != wantNode {
			t.Errorf("%s rank %d: node %d, want %d", host, d.Rank, d.Node, wantNode)
		}
	}
	if len(seen) != np {
		t.Errorf("%d ranks answered, want %d\n%s", len(seen), np, r)
	}
}

// TestLoad: `kbundle load` on 3 nodes x 2 ranks, under mpirun, Hydra,
// srun --mpi=pmix and srun --mpi=pmi2: every rank exits 0, every node's
// node-local DEST is the source tree (content, modes, ns mtimes), nothing
// else is left beside it, and the bundle is opened exactly once in the
// whole job (every rank of every node is traced).
func TestLoad(t *testing.T) {
	c := needCluster(t)
	tree := makeTree(t, 3<<20)
	for _, l := range append(mpiLaunches, srunLaunches...) {
		t.Run(l.name, func(t *testing.T) { checkLoad(t, c, l, tree, newWrapper(t, true)) })
	}
}

// checkLoad is TestLoad under launch l, whose ranks run under wrapper w
// (traced).
func checkLoad(t *testing.T, c *cluster, l launch, tree string, w *wrapper) {
	t.Helper()
	kb := c.kbundle(t, l.v)
	file := pack(t, kb, tree)
	parent := c.localDir(t)
	dest := filepath.Join(parent, "dest")
	// Small chunks: the broadcast between leaders takes many steps.
	r := c.job(t, l, []string{"KBUNDLE_BCAST_CHUNK=262144"}, w.script, kb, "load", "--bundle", file, "--to", dest)
	w.wantExits(t, c, r, 0)
	if r.code != 0 {
		t.Fatalf("%s", r)
	}
	if n := strings.Count(r.stderr, "kbundle: loaded "); n != 1 {
		t.Errorf("%d summaries, want 1\n%s", n, r)
	}
	if !strings.Contains(r.stderr, fmt.Sprintf(" on %d nodes", numNodes)) {
		t.Errorf("summary does not say %d nodes\n%s", numNodes, r)
	}
	for _, n := range c.nodes {
		sameTrees(t, n, tree, c.root(n, dest))
	}
	c.wantOnly(t, parent, map[string][]string{c.nodes[0]: {"dest"}, c.nodes[1]: {"dest"}, c.nodes[2]: {"dest"}})
	opens, where := w.opens(t, file)
	if opens != 1 {
		sort.Strings(where)
		t.Errorf("the bundle was opened %d times in the job, want once:\n%s", opens, strings.Join(where, "\n"))
	}
	c.noStrays(t, kb, 10e9)
}
