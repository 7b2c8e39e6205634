package cluster

import (
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDefaultDestTaken: the default DEST ($TMPDIR/kbundle-USER-JOB), made
// in advance on ONE node (kbn2) by another user to deny the load (W6):
// every rank of every node exits 0, every node installs the bundle into
// the same unguessable sibling, which rank 0 prints first, the warning is
// said once, and the other user's directory is left as it was. Under
// mpirun (Open MPI) and mpiexec.hydra (MPICH).
func TestDefaultDestTaken(t *testing.T) {
	c := needCluster(t)
	me, err := user.Current()
	if err != nil {
		t.Fatal(err)
	}
	tree := makeTree(t, 1<<20)
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			kb := c.kbundle(t, l.v)
			file := pack(t, kb, tree)
			parent := c.localDir(t)
			name := "kbundle-" + me.Username + "-w6"
			bad := c.nodes[1]
			theirs := c.root(bad, filepath.Join(parent, name))
			if err := os.Mkdir(theirs, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(theirs, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			w := newWrapper(t, false)
			// PBS_JOBID: a job id the same on every rank, whatever the launcher.
			r := c.job(t, l, []string{"TMPDIR=" + parent, "PBS_JOBID=w6", "KBUNDLE_LOCAL_DIR="}, w.script, kb, "load", "--bundle", file)
			w.wantExits(t, c, r, 0)
			if r.code != 0 {
				t.Fatalf("%s", r)
			}
			if n := strings.Count(r.stderr, filepath.Join(parent, name)+" belongs to another user on 1 node"); n != 1 {
				t.Errorf("the warning is said %d times, want once\n%s", n, r)
			}
			first, _, _ := strings.Cut(r.stdout, "\n")
			moved := regexp.MustCompile(`^` + regexp.QuoteMeta(filepath.Join(parent, name)) + `-[0-9a-f]{16}$`)
			if !moved.MatchString(first) {
				t.Fatalf("first line %q, want %s-<16 hex digits>\n%s", first, filepath.Join(parent, name), r)
			}
			for _, n := range c.nodes {
				sameTrees(t, n, tree, c.root(n, first))
			}
			if ents, err := os.ReadDir(theirs); err != nil || len(ents) != 0 {
				t.Errorf("%s: the other user's %s was changed: %v (%v)", bad, name, ents, err)
			}
			base := filepath.Base(first)
			c.wantOnly(t, parent, map[string][]string{c.nodes[0]: {base}, bad: {base, name}, c.nodes[2]: {base}})
			c.noStrays(t, kb, 10e9)
		})
	}
}
