package broadcast

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/mpi"
)

// Transport is point-to-point bytes between the processes of a job,
// addressed by their rank 0..Size-1 in it: what FromTransport builds a
// whole communicator on (a torch.distributed gloo group's send and recv,
// driven from Python). A Recv's buffer has the length of the matching
// Send's; messages between two processes with the same tag arrive in the
// order they were sent.
type Transport interface {
	Send(buf []byte, dest, tag int) error
	Recv(buf []byte, src, tag int) error
}

// MaxUserTag is the largest tag a communicator of FromTransport accepts in
// its own Send and Recv (harvest's, load's notes).
const MaxUserTag = 255

// ErrNodes reports ranks whose node facts (host name, local rank)
// contradict each other in SplitShared.
var ErrNodes = errors.New("the tasks' hosts and local ranks disagree")

// FromTransport returns the communicator of the size processes that t
// connects, as process rank (0 <= rank < size): its collectives are
// carried out in Go over t (a binomial tree for Bcast; gathers to rank 0
// and a Bcast for the reductions, Barrier and splits), so load.Run and
// harvest run over it as over MPI. host and localRank are this process's
// node facts for SplitShared: ranks with the same host form a node, led
// by local rank 0 (localRank < 0: unknown, then by the lowest rank); a
// host whose ranks' local ranks repeat, or lack 0, is ErrNodes. Every
// communicator split from it has its own tags, so two of them never
// mistake each other's messages; the tags of its Send and Recv must be at
// most MaxUserTag.
func FromTransport(t Transport, rank, size int, host string, localRank int) NodeComm {
	members := make([]int, size)
	for i := range members {
		members[i] = i
	}
	return &p2pComm{t: t, members: members, rank: rank, ctx: 1, host: host, localRank: localRank}
}

type p2pComm struct {
	t         Transport
	members   []int // transport rank of each member
	rank      int   // this process's rank among members
	ctx       uint32
	splits    uint32 // splits made from this communicator
	host      string
	localRank int
}

// Tags: ctx in the high bits; the low 9 bits hold 0 for collective
// traffic and 256+tag for Send/Recv's own tags. Tags stay below 2^31.
const ctxBits = 22

func (c *p2pComm) tag(user int) int { return int(c.ctx)<<9 | user }

func (c *p2pComm) Rank() int { return c.rank }
func (c *p2pComm) Size() int { return len(c.members) }

func (c *p2pComm) send(b []byte, to int) error {
	if len(b) == 0 {
		return nil
	}
	if err := c.t.Send(b, c.members[to], c.tag(0)); err != nil {
		return fmt.Errorf("send %d bytes to rank %d: %w", len(b), to, err)
	}
	return nil
}

func (c *p2pComm) recv(b []byte, from int) error {
	if len(b) == 0 {
		return nil
	}
	if err := c.t.Recv(b, c.members[from], c.tag(0)); err != nil {
		return fmt.Errorf("receive %d bytes from rank %d: %w", len(b), from, err)
	}
	return nil
}

// Bcast sends root's buf to every member along a binomial tree: each
// member receives once and sends to at most log2(size) others.
func (c *p2pComm) Bcast(buf []byte, root int) error {
	n := len(c.members)
	if root < 0 || root >= n {
		return fmt.Errorf("bcast: root %d outside a communicator of %d", root, n)
	}
	rel := (c.rank - root + n) % n
	mask := 1
	for mask < n {
		if rel&mask != 0 {
			if err := c.recv(buf, (rel-mask+root)%n); err != nil {
				return err
			}
			break
		}
		mask <<= 1
	}
	for mask >>= 1; mask > 0; mask >>= 1 {
		if rel+mask < n {
			if err := c.send(buf, (rel+mask+root)%n); err != nil {
				return err
			}
		}
	}
	return nil
}

// gather returns, on rank 0, every member's b (each of its own length),
// and nil elsewhere.
func (c *p2pComm) gather(b []byte, limit uint64) ([][]byte, error) {
	if c.rank != 0 {
		n := binary.LittleEndian.AppendUint64(nil, uint64(len(b)))
		if err := c.send(n, 0); err != nil {
			return nil, err
		}
		return nil, c.send(b, 0)
	}
	all := make([][]byte, len(c.members))
	all[0] = b
	for r := 1; r < len(c.members); r++ {
		n := make([]byte, 8)
		if err := c.recv(n, r); err != nil {
			return nil, err
		}
		size := binary.LittleEndian.Uint64(n)
		if size > limit {
			return nil, fmt.Errorf("rank %d sent %d bytes (limit %d)", r, size, limit)
		}
		all[r] = make([]byte, size)
		if err := c.recv(all[r], r); err != nil {
			return nil, err
		}
	}
	return all, nil
}

// allgather is gather, then rank 0's list broadcast.
func (c *p2pComm) allgather(b []byte, limit uint64) ([][]byte, error) {
	all, err := c.gather(b, limit)
	if err != nil {
		return nil, err
	}
	var flat []byte
	if c.rank == 0 {
		for _, x := range all {
			flat = binary.LittleEndian.AppendUint64(flat, uint64(len(x)))
			flat = append(flat, x...)
		}
	}
	flat, err = BcastBytes(c, flat, limit*uint64(len(c.members))+8*uint64(len(c.members)))
	if err != nil {
		return nil, err
	}
	out := make([][]byte, 0, len(c.members))
	for len(flat) >= 8 {
		n := binary.LittleEndian.Uint64(flat)
		if n > uint64(len(flat)-8) {
			break
		}
		out = append(out, flat[8:8+n])
		flat = flat[8+n:]
	}
	if len(out) != len(c.members) {
		return nil, fmt.Errorf("allgather: %d items for %d ranks", len(out), len(c.members))
	}
	return out, nil
}

func (c *p2pComm) AllreduceInt64(v int64, op mpi.Op) (int64, error) {
	w := []int64{v}
	if err := c.AllreduceInt64s(w, op); err != nil {
		return 0, err
	}
	return w[0], nil
}

// AllreduceInt64s combines each element of v over every rank with op, in
// place: one gather and one broadcast for the whole vector, as
// mpi.Comm.AllreduceInt64s is one MPI_Allreduce (AllreduceInts).
func (c *p2pComm) AllreduceInt64s(v []int64, op mpi.Op) error {
	if op < mpi.Min || op > mpi.Bor {
		return fmt.Errorf("allreduce: unknown op %d", op)
	}
	n := 8 * len(v)
	mine := make([]byte, 0, n)
	for _, x := range v {
		mine = binary.LittleEndian.AppendUint64(mine, uint64(x))
	}
	all, err := c.gather(mine, uint64(n))
	if err != nil {
		return err
	}
	out := make([]byte, n)
	if c.rank == 0 {
		acc := slices.Clone(v)
		for _, b := range all[1:] {
			if len(b) != n {
				return fmt.Errorf("allreduce: %d bytes, want %d", len(b), n)
			}
			for k := range acc {
				acc[k] = op.Apply(acc[k], int64(binary.LittleEndian.Uint64(b[8*k:])))
			}
		}
		for k, x := range acc {
			binary.LittleEndian.PutUint64(out[8*k:], uint64(x))
		}
	}
	if err := c.Bcast(out, 0); err != nil {
		return err
	}
	for k := range v {
		v[k] = int64(binary.LittleEndian.Uint64(out[8*k:]))
	}
	return nil
}

func (c *p2pComm) Barrier() error {
	_, err := c.AllreduceInt64(0, mpi.Sum)
	return err
}

// Split is MPI_Comm_split: members of one color, ordered by key, then by
// rank.
func (c *p2pComm) Split(color, key int) (NodeComm, error) {
	if color < 0 {
		return nil, fmt.Errorf("split: color %d < 0", color)
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(color))
	b = binary.LittleEndian.AppendUint64(b, uint64(int64(key)))
	all, err := c.allgather(b, 16)
	if err != nil {
		return nil, err
	}
	type m struct{ key, rank int }
	var same []m
	for r, x := range all {
		if len(x) != 16 {
			return nil, fmt.Errorf("split: rank %d sent %d bytes", r, len(x))
		}
		if int(binary.LittleEndian.Uint64(x)) == color {
			same = append(same, m{int(int64(binary.LittleEndian.Uint64(x[8:]))), r})
		}
	}
	slices.SortFunc(same, func(a, b m) int {
		if a.key != b.key {
			return a.key - b.key
		}
		return a.rank - b.rank
	})
	return c.child(color, func(yield func(int) bool) {
		for _, x := range same {
			if !yield(x.rank) {
				return
			}
		}
	}), nil
}

// child is the communicator of the members (ranks of c, in order) of one
// color of c's next split; its context is a hash of c's, the split's
// number and the color, the same on each of its members.
func (c *p2pComm) child(color int, members func(func(int) bool)) *p2pComm {
	c.splits++
	h := fnv.New32a()
	fmt.Fprintf(h, "%d/%d/%d", c.ctx, c.splits, color)
	ctx := h.Sum32() & (1<<ctxBits - 1)
	if ctx <= 1 {
		ctx += 2
	}
	n := &p2pComm{t: c.t, ctx: ctx, host: c.host, localRank: c.localRank}
	for r := range members {
		if r == c.rank {
			n.rank = len(n.members)
		}
		n.members = append(n.members, c.members[r])
	}
	return n
}

// SplitShared splits by host name, each node's members ordered by their
// local rank: the launcher's (torchrun's LOCAL_RANK) and the host's names
// must tell the same nodes.
func (c *p2pComm) SplitShared() (NodeComm, error) {
	b := binary.LittleEndian.AppendUint64(nil, uint64(int64(c.localRank)))
	all, err := c.allgather(append(b, c.host...), 8+1024)
	if err != nil {
		return nil, err
	}
	hosts := make([]string, len(all))
	local := make([]int, len(all))
	for r, x := range all {
		if len(x) < 8 {
			return nil, fmt.Errorf("split by node: rank %d sent %d bytes", r, len(x))
		}
		local[r], hosts[r] = int(int64(binary.LittleEndian.Uint64(x))), string(x[8:])
	}
	color := slices.Index(hosts, c.host)
	var mine []int
	for r, h := range hosts {
		if h == c.host {
			mine = append(mine, r)
		}
	}
	if err := checkNode(c.host, mine, local); err != nil {
		return nil, err
	}
	slices.SortFunc(mine, func(a, b int) int {
		if local[a] != local[b] {
			return local[a] - local[b]
		}
		return a - b
	})
	return c.child(color, slices.Values(mine)), nil
}

// checkNode checks the local ranks of host's ranks: none repeated, and
// one of them 0, unless none is known.
func checkNode(host string, ranks []int, local []int) error {
	seen := map[int]int{}
	known := false
	for _, r := range ranks {
		if local[r] < 0 {
			continue
		}
		known = true
		if o, ok := seen[local[r]]; ok {
			return fmt.Errorf("%w: ranks %d and %d on host %s both have local rank %d (two launchers' tasks on one host, "+
				"such as two torchrun agents): kbundle installs one DEST a host; run one agent a host", ErrNodes, o, r, host, local[r])
		}
		seen[local[r]] = r
	}
	if _, ok := seen[0]; known && !ok {
		var ls []string
		for _, r := range ranks {
			ls = append(ls, fmt.Sprint(local[r]))
		}
		return fmt.Errorf("%w: no rank on host %s has local rank 0 (its local ranks: %s): the host names and the launcher's LOCAL_RANK tell different nodes",
			ErrNodes, host, strings.Join(ls, ", "))
	}
	return nil
}

func (c *p2pComm) Free() error { return nil }

// Send and Recv are P2P, on tags of this communicator's own.
func (c *p2pComm) Send(buf []byte, dest, tag int) error {
	if tag < 0 || tag > MaxUserTag || dest < 0 || dest >= len(c.members) {
		return fmt.Errorf("send: tag %d or rank %d out of range", tag, dest)
	}
	return c.t.Send(buf, c.members[dest], c.tag(256+tag))
}

func (c *p2pComm) Recv(buf []byte, src, tag int) error {
	if tag < 0 || tag > MaxUserTag || src < 0 || src >= len(c.members) {
		return fmt.Errorf("recv: tag %d or rank %d out of range", tag, src)
	}
	return c.t.Recv(buf, c.members[src], c.tag(256+tag))
}
