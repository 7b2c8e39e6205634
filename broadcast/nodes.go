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
	// this rank leads; otherwise the other ranks. It is world itself
	// where every rank of a Placed world leads.
	Leaders NodeComm
	// First and Last are the lowest and highest world ranks of this node.
	First, Last int
	// Count is how many nodes the world spans.
	Count int
	// Leader reports whether this rank leads its node (rank 0 of Node).
	Leader bool

	ranksPerNode, rank int
	borrowed           bool // Leaders is the world itself: not freed
}

// A Placement is what the ranks of a Placed world agreed, before
// SplitNodes, of where they are: whether every one of them is alone on
// its node (AllAlone) or not (NotAllAlone), each rank's Alone combined by
// min in a collective of the caller's, which has figures of its own to
// agree on then (issue 31: each collective is a round trip at scale).
// PlacementUnknown: SplitNodes asks.
type Placement int8

const (
	// PlacementUnknown: not agreed; SplitNodes asks.
	PlacementUnknown Placement = iota
	// AllAlone: every rank is alone on its node.
	AllAlone
	// NotAllAlone: some rank shares its node (or its launcher did not say).
	NotAllAlone
)

// Alone is this rank's part of the placement check of world: 1 where
// world is Placed and its launcher put this rank alone on its node,
// else 0.
func Alone(world NodeComm) int64 {
	if p, ok := world.(Placed); ok && p.RanksOnNode() == 1 {
		return 1
	}
	return 0
}

// SplitNodes splits world by node, collectively: by shared memory, or,
// when ranksPerNode > 0 (a test's fake nodes), into nodes of ranksPerNode
// consecutive ranks. A Placed world where every rank is alone on its node
// needs no split: one all-reduce says so (none where known says what the
// ranks agreed), each rank leads a node of its own (Node is Self), and
// Leaders is world itself. An error names the step that failed ("ranks
// on nodes", "split by node", "node ranks", "split leaders"); the caller
// marks it as a communicator failure in its own words. Free frees what
// it made.
func SplitNodes(world NodeComm, ranksPerNode int, known Placement) (*Nodes, error) {
	n := &Nodes{ranksPerNode: ranksPerNode, rank: world.Rank()}
	if _, ok := world.(Placed); ok && ranksPerNode <= 0 {
		all := known == AllAlone
		if known == PlacementUnknown {
			min, err := world.AllreduceInt64(Alone(world), mpi.Min)
			if err != nil {
				return nil, fmt.Errorf("ranks on nodes: %w", err)
			}
			all = min == 1
		}
		if all {
			n.Node, n.Leaders, n.borrowed = Self(), world, true
			n.First, n.Last, n.Count, n.Leader = n.rank, n.rank, world.Size(), true
			return n, nil
		}
	}
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
	n.First, n.Last = world.Rank(), world.Rank()
	if n.Node.Size() > 1 {
		// The node's first and last world ranks in one call: min(r) = -max(-r).
		span := []int64{-int64(world.Rank()), int64(world.Rank())}
		if err := AllreduceInts(n.Node, span, mpi.Max); err != nil {
			return fail("node ranks", err)
		}
		n.First, n.Last = int(-span[0]), int(span[1])
	}
	color := 1
	if n.Leader {
		color = 0
	}
	if n.Leaders, err = world.Split(color, world.Rank()); err != nil {
		return fail("split leaders", err)
	}
	// The split's two parts are the leaders and the others: no count.
	n.Count = n.Leaders.Size()
	if !n.Leader {
		n.Count = world.Size() - n.Leaders.Size()
	}
	return n, nil
}

// A Placed communicator is one kbundle alone uses while it does, point-
// to-point messages included (the CLI's MPI_COMM_WORLD, the library's
// duplicate of the application's communicator), and knows from its
// launcher's environment how many ranks the launcher put on this rank's
// node (RanksOnNode; 0 where it does not say). Where every rank is alone
// on its node, SplitNodes makes no communicator: the Placed one is the
// leaders'. FromOwn makes one.
type Placed interface {
	NodeComm
	RanksOnNode() int
}

// FromOwn adapts c, which kbundle alone uses while it does, as FromMPI
// does, as a Placed communicator whose launcher put ranksOnNode ranks on
// this rank's node (detect's LocalSize where its rank and size are c's;
// else 0).
func FromOwn(c *mpi.Comm, ranksOnNode int) NodeComm {
	return placed{mpiComm{c}, ranksOnNode}
}

type placed struct {
	mpiComm
	onNode int
}

func (c placed) RanksOnNode() int { return c.onNode }

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
	if n.Leaders != nil && !n.borrowed {
		n.Leaders.Free()
	}
	n.Node.Free()
}
