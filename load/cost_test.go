package load_test

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"

	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/load"
)

// TestRunCollectives counts the collectives one load takes on rank 0 and
// on another node's leader: each costs a network round trip or more at
// scale, so a load of a small set is as fast as its count allows (issue
// 31). The bound is today's count; lower it when a change saves some.
func TestRunCollectives(t *testing.T) {
	_, file := testBundle(t)
	nodes := []int{0, 0, 1, 1, 2, 2}
	world := broadcasttest.World(nodes...)
	var mu sync.Mutex
	calls := map[int]map[string]int{}
	for _, c := range world {
		r := c.Rank()
		calls[r] = map[string]int{}
		c.Trace = func(op string, _ int) {
			mu.Lock()
			calls[r][op]++
			calls[r]["all"]++
			mu.Unlock()
		}
	}
	base := t.TempDir()
	errs := broadcasttest.OnEveryRank(world, func(c *broadcasttest.Comm) error {
		_, err := load.Run(context.Background(), c, load.Plan{Bundle: file, Parents: true, Window: 1, BorrowNodeCPUs: true,
			Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[c.Rank()]), "dest"), Host: fmt.Sprintf("kbn%d", nodes[c.Rank()])})
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	t.Logf("rank 0: %v; leader of node 1: %v; a follower: %v", calls[0], calls[2], calls[1])
	const most = 19
	if n := calls[0]["all"]; n > most {
		t.Errorf("rank 0 takes %d collectives, at most %d", n, most)
	}
}
