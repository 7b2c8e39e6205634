package loadcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/harvest"
)

// TestStartCollectives: a load and a harvest over a world whose every
// rank is alone on its node take the placement agreed in agreeStart's
// all-reduce, not one of the split's own: the load takes 1 + 5
// collectives on rank 0 at 3 x 1 (load's TestRunCollectives: 5 with the
// placement agreed), for both fronts, and the harvest as many as
// harvest.Run asking for the placement itself.
func TestStartCollectives(t *testing.T) {
	src := t.TempDir()
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(src, fmt.Sprintf("k%d", i)), []byte("kernel"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := filepath.Join(t.TempDir(), "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), src, set, nil); err != nil {
		t.Fatal(err)
	}
	// count runs f on every rank of a 3 x 1 Placed world and returns
	// rank 0's collectives.
	count := func(f func(w broadcast.NodeComm, rank int) error) int {
		world := broadcasttest.World(0, 1, 2)
		var mu sync.Mutex
		n := 0
		world[0].Trace = func(string, int) { mu.Lock(); n++; mu.Unlock() }
		errs := broadcasttest.OnEveryRank(world, func(w *broadcasttest.Comm) error {
			return f(broadcasttest.Placed(w, w.OnNode()), w.Rank())
		})
		for r, err := range errs {
			if err != nil {
				t.Fatalf("rank %d: %v", r, err)
			}
		}
		return n
	}
	base := t.TempDir()
	dest := func(rank int) string { return filepath.Join(base, fmt.Sprintf("n%d", rank), "dest") }
	for _, f := range []Front{CLI, Python} {
		os.RemoveAll(base)
		n := count(func(w broadcast.NodeComm, rank int) error {
			o, err := Resolve(Request{Bundle: set, Dest: dest(rank), Parents: true, Environ: map[string]string{}}, f, rank)
			if err != nil {
				return err
			}
			if out := Load(context.Background(), w, f, o, nil, true, false); !out.OK {
				return fmt.Errorf("%s", out.Reason)
			}
			return nil
		})
		if n != 6 {
			t.Errorf("%v: load: rank 0 takes %d collectives, want 6", f, n)
		}
	}
	// The harvest of the DESTs just loaded (nothing new), through the
	// front and by harvest.Run asking itself.
	front := count(func(w broadcast.NodeComm, rank int) error {
		o, err := ResolveHarvest(HarvestRequest{Bundle: set, Dest: dest(rank), Environ: map[string]string{}}, Python, rank)
		if err != nil {
			return err
		}
		if out := Harvest(context.Background(), w, Python, o, nil, true); !out.OK {
			return fmt.Errorf("%s", out.Reason)
		}
		return nil
	})
	alone := count(func(w broadcast.NodeComm, rank int) error {
		_, err := harvest.Run(context.Background(), w, harvest.Plan{Bundle: set, Dest: dest(rank)})
		return err
	})
	if front != alone {
		t.Errorf("harvest: rank 0 takes %d collectives through the front, %d by harvest.Run asking the placement itself", front, alone)
	}
}
