package broadcast_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	. "github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
)

// TestSplitNodes: every rank learns its node's ranks, the node count and
// whether it leads, for nodes by host and for a test's fake nodes, and
// names its node's DEST by the fake-node rule; the same over a Placed
// communicator (broadcasttest.Placed, whose launcher says how many ranks
// share each node), which makes none where every rank is alone.
func TestSplitNodes(t *testing.T) {
	honest := func(c *broadcasttest.Comm) int { return c.OnNode() }
	for _, c := range []struct {
		name         string
		hosts        []int // the node of each world rank (SplitShared)
		ranksPerNode int
		onNode       func(*broadcasttest.Comm) int // nil: not Placed
		want         []string                      // per rank: first-last count leader dest
		ops          string                        // rank 0's collectives
		known        Placement                     // what the ranks agreed before
	}{
		{"one rank", []int{0}, 0, nil, []string{"0-0 1 true /d"}, "split split", PlacementUnknown},
		{"two hosts", []int{0, 0, 1, 1, 1}, 0, nil, []string{
			"0-1 2 true /d", "0-1 2 false /d", "2-4 2 true /d", "2-4 2 false /d", "2-4 2 false /d"}, "split allreduce split", PlacementUnknown},
		{"hosts not in rank order", []int{1, 0, 1}, 0, nil, []string{
			"0-2 2 true /d", "1-1 2 true /d", "0-2 2 false /d"}, "split allreduce split", PlacementUnknown},
		{"fake nodes", []int{0, 0, 0, 0, 0}, 2, nil, []string{
			"0-1 3 true /d.node0", "0-1 3 false /d.node0", "2-3 3 true /d.node1", "2-3 3 false /d.node1", "4-4 3 true /d.node2"}, "split allreduce split", PlacementUnknown},
		{"one rank a host", []int{0, 1, 2}, 0, nil, []string{"0-0 3 true /d", "1-1 3 true /d", "2-2 3 true /d"}, "split split", PlacementUnknown},
		{"placed: one rank", []int{0}, 0, honest, []string{"0-0 1 true /d"}, "allreduce", PlacementUnknown},
		{"placed: one rank a host", []int{0, 1, 2}, 0, honest, []string{"0-0 3 true /d", "1-1 3 true /d", "2-2 3 true /d"}, "allreduce", PlacementUnknown},
		{"placed: two hosts", []int{0, 0, 1, 1, 1}, 0, honest, []string{
			"0-1 2 true /d", "0-1 2 false /d", "2-4 2 true /d", "2-4 2 false /d", "2-4 2 false /d"}, "allreduce split allreduce split", PlacementUnknown},
		{"placed: fake nodes split as asked", []int{0, 1, 2}, 2, honest, []string{"0-1 2 true /d.node0", "0-1 2 false /d.node0", "2-2 2 true /d.node1"}, "split allreduce split", PlacementUnknown},
		{"placed: one rank says it is alone", []int{0, 0, 1}, 0, func(c *broadcasttest.Comm) int { return 1 + c.Rank()%2 }, []string{
			"0-1 2 true /d", "0-1 2 false /d", "2-2 2 true /d"}, "allreduce split allreduce split", PlacementUnknown},
		{"placed: nothing said", []int{0, 1}, 0, func(*broadcasttest.Comm) int { return 0 }, []string{"0-0 2 true /d", "1-1 2 true /d"}, "allreduce split split", PlacementUnknown},
		// What the ranks agreed (Alone, by min) is not asked again.
		{"placed, agreed: one rank a host", []int{0, 1, 2}, 0, honest, []string{"0-0 3 true /d", "1-1 3 true /d", "2-2 3 true /d"}, "", AllAlone},
		{"placed, agreed: two hosts", []int{0, 0, 1, 1, 1}, 0, honest, []string{
			"0-1 2 true /d", "0-1 2 false /d", "2-4 2 true /d", "2-4 2 false /d", "2-4 2 false /d"}, "split allreduce split", NotAllAlone},
		{"not placed: agreed is ignored", []int{0, 0, 1}, 0, nil, []string{"0-1 2 true /d", "0-1 2 false /d", "2-2 2 true /d"}, "split allreduce split", AllAlone},
	} {
		t.Run(c.name, func(t *testing.T) {
			var ops []string
			got := broadcasttest.OnEveryRank(broadcasttest.World(c.hosts...), func(comm *broadcasttest.Comm) string {
				if comm.Rank() == 0 {
					comm.Trace = func(op string, _ int) { ops = append(ops, op) }
				}
				var world NodeComm = comm
				if c.onNode != nil {
					world = broadcasttest.Placed(comm, c.onNode(comm))
				}
				n, err := SplitNodes(world, c.ranksPerNode, c.known)
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
			if c.onNode != nil && c.ranksPerNode == 0 && c.known == PlacementUnknown {
				alone := broadcasttest.OnEveryRank(broadcasttest.World(c.hosts...), func(comm *broadcasttest.Comm) int64 {
					return Alone(broadcasttest.Placed(comm, c.onNode(comm)))
				})
				all := slices.Min(alone) == 1
				if all != (c.ops == "allreduce") {
					t.Errorf("Alone by min: %v, but SplitNodes split: %q", alone, c.ops)
				}
			}
			if s := strings.Join(ops, " "); s != c.ops {
				t.Errorf("rank 0's collectives: %q, want %q", s, c.ops)
			}
		})
	}
}
