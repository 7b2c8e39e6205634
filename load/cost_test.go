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
	}{
		{"3 nodes x 2", []int{0, 0, 1, 1, 2, 2}, false, 13, 2},
		{"3 nodes x 2, placed", []int{0, 0, 1, 1, 2, 2}, true, 14, 2},
		{"3 nodes x 1, placed", []int{0, 1, 2}, true, 9, 0},
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
			errs := broadcasttest.OnEveryRank(world, func(w *broadcasttest.Comm) error {
				var comm broadcast.NodeComm = w
				if c.placed {
					comm = broadcasttest.Placed(w, w.OnNode())
				}
				_, err := load.Run(context.Background(), comm, load.Plan{Bundle: file, Parents: true, Window: 1, BorrowNodeCPUs: true,
					Dest: filepath.Join(base, fmt.Sprintf("n%d", c.nodes[w.Rank()]), "dest"), Host: fmt.Sprintf("kbn%d", c.nodes[w.Rank()])})
				return err
			})
			for r, err := range errs {
				if err != nil {
					t.Fatalf("rank %d: %v", r, err)
				}
			}
			t.Logf("rank 0: %v; leader of node 1: %v; rank 1: %v", calls[0], calls[slices.Index(c.nodes, 1)], calls[1])
			if n := calls[0]["all"]; n > c.most {
				t.Errorf("rank 0 takes %d collectives, at most %d", n, c.most)
			}
			if n := calls[0]["split"]; n > c.splits {
				t.Errorf("rank 0 takes %d splits, at most %d", n, c.splits)
			}
		})
	}
}
