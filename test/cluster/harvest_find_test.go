package cluster

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// TestHarvestFindsDest is harvest/find.go's search across nodes (issue
// 25, U33): a load of set A on 3 nodes into the default DEST (TMPDIR each
// node's own tmpfs), each node compiling a file of its own; kbn2 then
// also holds a newer tree, loaded from set B by a single process. A
// harvest with neither --bundle nor --to (another launch, another job
// id): rank 0 (kbn1) finds its tree and so set A, and every other leader
// the newest tree of its node loaded from A (kbn2's of A, not the newer
// one of B); the layer written into A holds the three nodes' files, and B
// gets none. Then a harvest --bundle B: kbn2 finds its tree of B
// (compiled nothing), kbn1 and kbn3 none and say which set theirs came
// from. Last, two trees of A installed at once on kbn3: its leader's
// refusal (harvest.ErrRefused) is every rank's, exit 2. mpirun and Hydra.
func TestHarvestFindsDest(t *testing.T) {
	c := needCluster(t)
	src := makeTree(t, 1000)
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			kb := c.kbundle(t, l.v)
			setA, setB := pack(t, kb, src), pack(t, kb, src)
			tmp := c.localDir(t)
			// TMPDIR for the ranks only: the launcher runs here, where
			// the nodes' tmpfs is not.
			ranks := func(argv ...string) []string {
				return c.argvKeep(l, true, append([]string{"env", "TMPDIR=" + tmp}, argv...)...)
			}
			if r := run(t, nil, ranks(kb, "load", "-q", "--bundle", setA)...); r.code != 0 {
				t.Fatalf("load of A: %s", r)
			}
			trees := map[string]string{} // node -> its DEST of A
			for _, n := range c.nodes {
				e := c.entries(n, tmp)
				if len(e) != 1 || !strings.HasPrefix(e[0], "kbundle-") {
					t.Fatalf("%s: %s holds %q, want the load's DEST alone", n, tmp, e)
				}
				trees[n] = filepath.Join(tmp, e[0])
				// The job compiles a file of this node's.
				if err := os.WriteFile(c.root(n, filepath.Join(trees[n], "numba", "new-"+n+".nbi")), []byte("compiled on "+n), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			nompi := c.kbundle(t, testutil.NoMPI)
			c.mustOn(t, c.nodes[1], "env", "TMPDIR="+tmp, nompi, "load", "-q", "--bundle", setB)
			if e := c.entries(c.nodes[1], tmp); len(e) != 2 {
				t.Fatalf("%s: %s holds %q, want A's tree and B's", c.nodes[1], tmp, e)
			}

			r := run(t, nil, ranks(kb, "harvest")...)
			if r.code != 0 {
				t.Fatalf("harvest with neither --bundle nor --to: %s", r)
			}
			lines := c.harvestLines(t, r.stderr)
			for _, n := range c.nodes {
				from := setA // rank 0 looked first, for the set, and names it too
				if text := lines[n]; !strings.HasPrefix(text, "compiled 1 entry ") || !strings.Contains(text, "; DEST "+trees[n]+": the newest tree loaded from "+from+" here") {
					t.Errorf("%s: %q; want 1 entry compiled in %s, found as the newest tree of %s", n, text, trees[n], from)
				}
			}
			ls, err := bundle.ListLayers(setA, 0)
			if err != nil || len(ls) != 1 {
				t.Fatalf("set A's layers %v (%v), want one\n%s", ls, err, r)
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
			lr.Close()
			if want := []string{"numba/new-kbn1.nbi", "numba/new-kbn2.nbi", "numba/new-kbn3.nbi"}; strings.Join(files, " ") != strings.Join(want, " ") {
				t.Errorf("the layer holds %q, want %q", files, want)
			}
			if lb, _ := bundle.ListLayers(setB, 0); len(lb) != 0 {
				t.Errorf("set B got layers %v", lb)
			}

			// --bundle B: only kbn2 has a tree of B; the others say
			// whose theirs is.
			r = run(t, nil, ranks(kb, "harvest", "--bundle", setB)...)
			lines = c.harvestLines(t, r.stderr)
			for i, n := range c.nodes {
				text := lines[n]
				ok := strings.HasPrefix(text, "no DEST: nothing loaded here from "+setB+": ") &&
					strings.Contains(text, "(the newest, "+trees[n]+", was loaded from "+setA+"); pass --bundle "+setA+" to harvest the newest")
				if i == 1 {
					ok = strings.HasPrefix(text, "compiled 0 entries (0 B) the bundle lacked; DEST ") && strings.Contains(text, ": the newest tree loaded from "+setB+" here")
				}
				if !ok {
					t.Errorf("harvest --bundle B: %s: %q", n, text)
				}
			}
			if r.code != 0 || !strings.Contains(r.stderr, "kbundle: nothing new: no layer written to "+setB) {
				t.Errorf("harvest --bundle B: want exit 0 and nothing written\n%s", r)
			}

			// Two trees of A installed at once on kbn3: its leader cannot
			// tell which is the job's, and the whole harvest is refused
			// (exit 2 on every rank), naming kbn3.
			three := c.nodes[2]
			c.mustOn(t, three, "sh", "-c", `TMPDIR=$1 $2 load -q --bundle $3 & TMPDIR=$1 $2 load -q --bundle $3; wait $!`, "sh", tmp, nompi, setA)
			w := newWrapper(t, false)
			r = run(t, nil, ranks(w.script, kb, "harvest")...)
			w.wantExits(t, c, r, 2) // Open MPI's mpirun, told to let every rank end, exits 0
			if strings.Count(r.stderr, ": two trees loaded from") != 1 ||
				!strings.Contains(r.stderr, "kbundle: harvest: "+three+" (rank 4): two trees loaded from "+setA+" here are equally likely to be this job's DEST: ") {
				t.Errorf("two trees of A at once on %s: want the harvest refused (exit 2), naming it once\n%s", three, r)
			}
			if ls, _ := bundle.ListLayers(setA, 0); len(ls) != 1 {
				t.Errorf("the refused harvest left set A with layers %v", ls)
			}
		})
	}
}
