package harvest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
)

// Plan.Meta goes into the layer (the job's machine and toolchain, as warm
// records them for a base); kbundle's own keys stay kbundle's.
func TestLayerMeta(t *testing.T) {
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, map[string]string{"a/b.nbi": "x"})
	write(t, dest+".node0", "a/c.nbi", "new")
	world := broadcasttest.World(0)
	errs := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
		_, err := Run(context.Background(), c, Plan{Bundle: set, Dest: dest, RanksPerNode: 1,
			Meta: func(d string) map[string]string {
				if d != dest+".node0" {
					t.Errorf("Meta of %s, want rank 0's DEST %s.node0", d, dest)
				}
				return map[string]string{bundle.MetaTriton: "3.6.0", bundle.MetaCreator: "not kbundle"}
			}})
		return err
	})
	if errs[0] != nil {
		t.Fatal(errs[0])
	}
	s, err := bundle.OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if len(s.Read) != 2 {
		t.Fatalf("%d bundles in the set", len(s.Read))
	}
	m := s.Read[1].Meta()
	if m[bundle.MetaTriton] != "3.6.0" || m[bundle.MetaCreator] != "kbundle harvest" {
		t.Errorf("layer metadata %v", m)
	}
}
