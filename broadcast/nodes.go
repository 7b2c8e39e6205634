package broadcast

import (
	"fmt"
	"strconv"

	"github.com/kbundle/kbundle/mpi"
)

// Nodes is how the ranks of a world sit on nodes, as SplitNodes found
// it: the same layout for load, harvest and status.
type Nodes struct {
	// Node holds the ranks of this rank's node; its rank 0 leads.
	Node NodeComm
	// Leaders holds the leaders of every node, in world rank order, when
	// this rank leads; otherwise the other ranks.
	Leaders NodeComm
	// First and Last are the lowest and highest world ranks of this node.
	First, Last int
	// Count is how many nodes the world spans.
	Count int
	// Leader reports whether this rank leads its node (rank 0 of Node).
	Leader bool

	ranksPerNode, rank int
}

// SplitNodes splits world by node, collectively: by shared memory, or,
// when ranksPerNode > 0 (a test's fake nodes), into nodes of ranksPerNode
// consecutive ranks. An error names the step that failed ("split by
// node", "node ranks", "split leaders", "count nodes"); the caller marks
// it as a communicator failure in its own words. Free frees what it made.
func SplitNodes(world NodeComm, ranksPerNode int) (*Nodes, error) {
	n := &Nodes{ranksPerNode: ranksPerNode, rank: world.Rank()}
	var err error
	if ranksPerNode > 0 {
		n.Node, err = world.Split(world.Rank()/ranksPerNode, world.Rank())
	} else {
		n.Node, err = world.SplitShared()
	}
	if err != nil {
		return nil, fmt.Errorf("split by node: %w", err)
	}
	n.Leader = n.Node.Rank() == 0
	fail := func(what string, err error) (*Nodes, error) {
		n.Free()
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	// The node's first and last world ranks in one call: min(r) = -max(-r).
	span := []int64{-int64(world.Rank()), int64(world.Rank())}
	if err := AllreduceInts(n.Node, span, mpi.Max); err != nil {
		return fail("node ranks", err)
	}
	n.First, n.Last = int(-span[0]), int(span[1])
	color := 1
	if n.Leader {
		color = 0
	}
	if n.Leaders, err = world.Split(color, world.Rank()); err != nil {
		return fail("split leaders", err)
	}
	count, err := world.AllreduceInt64(int64(1-color), mpi.Sum)
	if err != nil {
		return fail("count nodes", err)
	}
	n.Count = int(count)
	return n, nil
}

// Dest is dest as this rank's node names it: dest itself on real nodes,
// dest + ".node<k>" on the k-th fake node (SplitNodes' ranksPerNode), so
// that the fake nodes of one host do not share a tree. Load, harvest and
// status name each fake node's DEST by this rule.
func (n *Nodes) Dest(dest string) string {
	if n.ranksPerNode <= 0 {
		return dest
	}
	return dest + ".node" + strconv.Itoa(n.rank/n.ranksPerNode)
}

// Free frees the communicators SplitNodes made.
func (n *Nodes) Free() {
	if n.Leaders != nil {
		n.Leaders.Free()
	}
	n.Node.Free()
}
