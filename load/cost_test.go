package load_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"sync"
	"testing"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/load"
	"github.com/kbundle/kbundle/preset"
)

// TestRunCollectives counts the collectives one load takes on rank 0 and
// on another node's leader: each costs a network round trip or more at
// scale, so a load of a small set is as fast as its count allows (issue
// 31); a split, which makes a communicator, costs several. The bounds are
// today's counts; lower them when a change saves some. The CLI's world and
// the library's communicator are Placed (broadcast.FromOwn): with one
// rank a node they make no split.
func TestRunCollectives(t *testing.T) {
	_, file := testBundle(t)
	for _, c := range []struct {
		name         string
		nodes        []int
		placed       bool
		most, splits int
		known        broadcast.Placement // Plan.Placement
	}{
		{"3 nodes x 2", []int{0, 0, 1, 1, 2, 2}, false, 11, 2, broadcast.PlacementUnknown},
		{"3 nodes x 2, placed", []int{0, 0, 1, 1, 2, 2}, true, 12, 2, broadcast.PlacementUnknown},
		{"3 nodes x 1, placed", []int{0, 1, 2}, true, 6, 0, broadcast.PlacementUnknown},
		// The placement agreed before (loadcmd's start) is not asked.
		{"3 nodes x 2, placed, agreed", []int{0, 0, 1, 1, 2, 2}, true, 11, 2, broadcast.NotAllAlone},
		{"3 nodes x 1, placed, agreed", []int{0, 1, 2}, true, 5, 0, broadcast.AllAlone},
	} {
		t.Run(c.name, func(t *testing.T) {
			world := broadcasttest.World(c.nodes...)
			var mu sync.Mutex
			calls := map[int]map[string]int{}
			for _, w := range world {
				r := w.Rank()
				calls[r] = map[string]int{}
				w.Trace = func(op string, _ int) {
					mu.Lock()
					calls[r][op]++
					calls[r]["all"]++
					mu.Unlock()
				}
			}
			base := t.TempDir()
			presets, err := preset.ParseList("triton")
			if err != nil {
				t.Fatal(err)
			}
			nodes := c.nodes[len(c.nodes)-1] + 1
			loadAll := func() []*load.Summary {
				sums := make([]*load.Summary, len(world))
				errs := broadcasttest.OnEveryRank(world, func(w *broadcasttest.Comm) error {
					var comm broadcast.NodeComm = w
					if c.placed {
						comm = broadcasttest.Placed(w, w.OnNode())
					}
					s, err := load.Run(context.Background(), comm, load.Plan{Bundle: file, Parents: true, Window: 1, BorrowNodeCPUs: true, Presets: presets, Placement: c.known,
						Dest: filepath.Join(base, fmt.Sprintf("n%d", c.nodes[w.Rank()]), "dest"), Host: fmt.Sprintf("kbn%d", c.nodes[w.Rank()])})
					sums[w.Rank()] = s
					return err
				})
				for r, err := range errs {
					if err != nil {
						t.Fatalf("rank %d: %v", r, err)
					}
				}
				// What the summary's collectives carry reaches every
				// rank, however few they are.
				for r, s := range sums {
					if s.ContentDigest == "" || s.ContentDigest != sums[0].ContentDigest || !slices.Equal(s.Presets, []string{"triton"}) ||
						s.Entries != sums[0].Entries || s.Entries == 0 || s.Nodes != nodes || len(s.Env) == 0 {
						t.Errorf("rank %d: digest %q presets %v entries %d nodes %d env %v; rank 0: %q, %d entries",
							r, s.ContentDigest, s.Presets, s.Entries, s.Nodes, s.Env, sums[0].ContentDigest, sums[0].Entries)
					}
				}
				return sums
			}
			loadAll()
			t.Logf("rank 0: %v; leader of node 1: %v; rank 1: %v", calls[0], calls[slices.Index(c.nodes, 1)], calls[1])
			if n := calls[0]["all"]; n > c.most {
				t.Errorf("rank 0 takes %d collectives, at most %d", n, c.most)
			}
			if n := calls[0]["split"]; n > c.splits {
				t.Errorf("rank 0 takes %d splits, at most %d", n, c.splits)
			}
			// Again: every node holds the set, and nothing streams.
			for r, s := range loadAll() {
				if s.InstalledNodes != nodes {
					t.Errorf("again: rank %d: %d of %d nodes held the set", r, s.InstalledNodes, nodes)
				}
			}
		})
	}
}
