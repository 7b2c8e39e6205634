// Package broadcasttest provides an in-process communicator for tests of
// code that loads bundles collectively (broadcast.LoadBundle, load.Run):
// one goroutine per rank, no MPI. Each collective waits for every member
// of its communicator, as MPI's do.
package broadcasttest

import (
	"fmt"
	"slices"
	"sync"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/mpi"
)

// group is an in-process communicator shared by goroutines, one per
// rank: each collective waits for every member, then the last to arrive
// computes every member's result.
type group struct {
	mu      sync.Mutex
	cond    *sync.Cond
	n       int
	gen     int
	arrived int
	in      []any
	out     []any
	nodes   []int // node of each member
}

func newGroup(nodes []int) *group {
	g := &group{n: len(nodes), in: make([]any, len(nodes)), nodes: nodes}
	g.cond = sync.NewCond(&g.mu)
	return g
}

// collective contributes v for rank and returns rank's result of f.
func (g *group) collective(rank int, v any, f func(in []any) []any) any {
	g.mu.Lock()
	defer g.mu.Unlock()
	gen := g.gen
	g.in[rank] = v
	g.arrived++
	if g.arrived == g.n {
		g.out = f(g.in)
		g.in = make([]any, g.n)
		g.arrived = 0
		g.gen++
		g.cond.Broadcast()
	} else {
		for g.gen == gen {
			g.cond.Wait()
		}
	}
	return g.out[rank]
}

// Comm is one rank's view of an in-process communicator; it implements
// broadcast.NodeComm.
type Comm struct {
	g    *group
	rank int
	// Corrupt, when set, is applied to every buffer this rank receives
	// from a broadcast (to simulate a damaged transfer); communicators
	// split from this one inherit it.
	Corrupt func([]byte)
	// Trace, when set, is called with the name of every collective this
	// rank enters ("bcast", "allreduce", "barrier", "split") and the
	// bytes it carries; communicators split from this one inherit it.
	Trace func(op string, bytes int)
}

func (c *Comm) trace(op string, n int) {
	if c.Trace != nil {
		c.Trace(op, n)
	}
}

// World returns one communicator per rank; nodes[i] is rank i's node
// (SplitShared splits by it).
func World(nodes ...int) []*Comm {
	g := newGroup(nodes)
	cs := make([]*Comm, len(nodes))
	for i := range cs {
		cs[i] = &Comm{g: g, rank: i}
	}
	return cs
}

// Rank is this rank.
func (c *Comm) Rank() int { return c.rank }

// Size is the number of ranks.
func (c *Comm) Size() int { return c.g.n }

type bcastIn struct {
	buf  []byte
	root int
}

// Bcast is MPI_Bcast.
func (c *Comm) Bcast(buf []byte, root int) error {
	c.trace("bcast", len(buf))
	out := c.g.collective(c.rank, bcastIn{buf, root}, func(in []any) []any {
		res := make([]any, len(in))
		r := in[0].(bcastIn).root
		for _, x := range in {
			b := x.(bcastIn)
			if b.root != r || r < 0 || r >= len(in) {
				for i := range res {
					res[i] = fmt.Errorf("fake bcast: roots disagree or out of range")
				}
				return res
			}
		}
		src := in[r].(bcastIn).buf
		for i, x := range in {
			b := x.(bcastIn)
			if len(b.buf) != len(src) {
				res[i] = fmt.Errorf("fake bcast: rank %d has %d bytes, root %d", i, len(b.buf), len(src))
				continue
			}
			if i != r {
				copy(b.buf, src)
			}
		}
		return res
	})
	if c.Corrupt != nil && c.rank != root {
		c.Corrupt(buf)
	}
	if out != nil {
		return out.(error)
	}
	return nil
}

// AllreduceInt64 is MPI_Allreduce of one int64.
func (c *Comm) AllreduceInt64(v int64, op mpi.Op) (int64, error) {
	c.trace("allreduce", 8)
	out := c.g.collective(c.rank, v, func(in []any) []any {
		acc := in[0].(int64)
		for _, x := range in[1:] {
			acc = op.Apply(acc, x.(int64))
		}
		res := make([]any, len(in))
		for i := range res {
			res[i] = acc
		}
		return res
	})
	return out.(int64), nil
}

// AllreduceInt64s is MPI_Allreduce of len(v) int64s, in place: one
// collective.
func (c *Comm) AllreduceInt64s(v []int64, op mpi.Op) error {
	c.trace("allreduce", 8*len(v))
	out := c.g.collective(c.rank, slices.Clone(v), func(in []any) []any {
		acc := slices.Clone(in[0].([]int64))
		for _, x := range in[1:] {
			for i, y := range x.([]int64) {
				acc[i] = op.Apply(acc[i], y)
			}
		}
		res := make([]any, len(in))
		for i := range res {
			res[i] = acc
		}
		return res
	})
	copy(v, out.([]int64))
	return nil
}

// Barrier is MPI_Barrier.
func (c *Comm) Barrier() error {
	c.trace("barrier", 0)
	c.g.collective(c.rank, nil, func(in []any) []any { return make([]any, len(in)) })
	return nil
}

type splitIn struct{ color, key int }

func (c *Comm) split(color, key int) (broadcast.NodeComm, error) {
	c.trace("split", 0)
	out := c.g.collective(c.rank, splitIn{color, key}, func(in []any) []any {
		res := make([]any, len(in))
		groups := map[int][]int{} // color -> members in (key, rank) order
		for i, x := range in {
			s := x.(splitIn)
			groups[s.color] = append(groups[s.color], i)
		}
		for _, members := range groups {
			// insertion sort by key, then old rank
			for a := 1; a < len(members); a++ {
				for b := a; b > 0 && in[members[b]].(splitIn).key < in[members[b-1]].(splitIn).key; b-- {
					members[b], members[b-1] = members[b-1], members[b]
				}
			}
			nodes := make([]int, len(members))
			for i, m := range members {
				nodes[i] = c.g.nodes[m]
			}
			g := newGroup(nodes)
			for i, m := range members {
				res[m] = &Comm{g: g, rank: i}
			}
		}
		return res
	})
	n := out.(*Comm)
	n.Corrupt, n.Trace = c.Corrupt, c.Trace
	return n, nil
}

// Split is MPI_Comm_split.
func (c *Comm) Split(color, key int) (broadcast.NodeComm, error) { return c.split(color, key) }

// SplitShared splits by the nodes given to World.
func (c *Comm) SplitShared() (broadcast.NodeComm, error) { return c.split(c.g.nodes[c.rank], c.rank) }

// Free does nothing.
func (c *Comm) Free() error { return nil }

// OnEveryRank runs f once per rank, concurrently, and returns the results.
func OnEveryRank[T any](cs []*Comm, f func(c *Comm) T) []T {
	out := make([]T, len(cs))
	var wg sync.WaitGroup
	for i, c := range cs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i] = f(c)
		}()
	}
	wg.Wait()
	return out
}

// Placed returns c as a broadcast.Placed communicator whose launcher
// says it put onNode ranks on c's node (which need not be what World was
// told: a test of a launcher that lies).
func Placed(c *Comm, onNode int) broadcast.NodeComm { return placed{c, onNode} }

// OnNode is how many ranks of c's world share c's node, as World was
// told: what an honest launcher says.
func (c *Comm) OnNode() int {
	n := 0
	for _, h := range c.g.nodes {
		if h == c.g.nodes[c.rank] {
			n++
		}
	}
	return n
}

type placed struct {
	*Comm
	onNode int
}

func (p placed) RanksOnNode() int { return p.onNode }
