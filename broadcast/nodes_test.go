package broadcast_test

import (
	"fmt"
	"testing"

	. "github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
)

// TestSplitNodes: every rank learns its node's ranks, the node count and
// whether it leads, for nodes by host and for a test's fake nodes, and
// names its node's DEST by the fake-node rule.
func TestSplitNodes(t *testing.T) {
	for _, c := range []struct {
		name         string
		hosts        []int // the node of each world rank (SplitShared)
		ranksPerNode int
		want         []string // per rank: first-last count leader dest
	}{
		{"one rank", []int{0}, 0, []string{"0-0 1 true /d"}},
		{"two hosts", []int{0, 0, 1, 1, 1}, 0, []string{
			"0-1 2 true /d", "0-1 2 false /d", "2-4 2 true /d", "2-4 2 false /d", "2-4 2 false /d"}},
		{"hosts not in rank order", []int{1, 0, 1}, 0, []string{
			"0-2 2 true /d", "1-1 2 true /d", "0-2 2 false /d"}},
		{"fake nodes", []int{0, 0, 0, 0, 0}, 2, []string{
			"0-1 3 true /d.node0", "0-1 3 false /d.node0", "2-3 3 true /d.node1", "2-3 3 false /d.node1", "4-4 3 true /d.node2"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := broadcasttest.OnEveryRank(broadcasttest.World(c.hosts...), func(comm *broadcasttest.Comm) string {
				n, err := SplitNodes(comm, c.ranksPerNode)
				if err != nil {
					return err.Error()
				}
				defer n.Free()
				if n.Leader && n.Leaders.Size() != n.Count {
					return fmt.Sprintf("%d leaders, %d nodes", n.Leaders.Size(), n.Count)
				}
				return fmt.Sprintf("%d-%d %d %v %s", n.First, n.Last, n.Count, n.Leader, n.Dest("/d"))
			})
			for r := range got {
				if got[r] != c.want[r] {
					t.Errorf("rank %d: got %q, want %q", r, got[r], c.want[r])
				}
			}
		})
	}
}
