package broadcast

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/kbundle/kbundle/mpi"
)

// memTransport is Transport between goroutines: one queue a (src, dest,
// tag), as gloo keeps them.
type memTransport struct {
	mu sync.Mutex
	q  map[[3]int]chan []byte
}

func (m *memTransport) ch(src, dest, tag int) chan []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := [3]int{src, dest, tag}
	if m.q[k] == nil {
		m.q[k] = make(chan []byte, 1024)
	}
	return m.q[k]
}

type memEnd struct {
	m    *memTransport
	self int
}

func (e memEnd) Send(b []byte, dest, tag int) error {
	e.m.ch(e.self, dest, tag) <- bytes.Clone(b)
	return nil
}

func (e memEnd) Recv(b []byte, src, tag int) error {
	got := <-e.m.ch(src, e.self, tag)
	if len(got) != len(b) {
		return fmt.Errorf("recv %d bytes into %d", len(got), len(b))
	}
	copy(b, got)
	return nil
}

// onRanks runs f on n ranks of FromTransport communicators.
func onRanks(t *testing.T, hosts []string, local []int, f func(c NodeComm) error) []error {
	t.Helper()
	m := &memTransport{q: map[[3]int]chan []byte{}}
	errs := make([]error, len(hosts))
	var wg sync.WaitGroup
	for r := range hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = f(FromTransport(memEnd{m, r}, r, len(hosts), hosts[r], local[r]))
		}()
	}
	wg.Wait()
	return errs
}

// TestFromTransport: the collectives load.Run and harvest use, built on
// point-to-point bytes alone, as over torch.distributed.
func TestFromTransport(t *testing.T) {
	hosts := []string{"a", "b", "a", "b", "b", "c", "a"}
	local := []int{0, 0, 1, 1, 2, 0, 2}
	errs := onRanks(t, hosts, local, func(c NodeComm) error {
		for _, root := range []int{0, 3, 6} {
			buf := make([]byte, 1000)
			if c.Rank() == root {
				for i := range buf {
					buf[i] = byte(i * (root + 1))
				}
			}
			if err := c.Bcast(buf, root); err != nil {
				return err
			}
			for i := range buf {
				if buf[i] != byte(i*(root+1)) {
					return fmt.Errorf("rank %d: bcast from %d: byte %d", c.Rank(), root, i)
				}
			}
		}
		for _, x := range []struct {
			op   mpi.Op
			want int64
		}{{mpi.Sum, 21}, {mpi.Max, 6}, {mpi.Min, 0}, {mpi.Bor, 7}} {
			op, want := x.op, x.want
			if got, err := c.AllreduceInt64(int64(c.Rank()), op); err != nil || got != want {
				return fmt.Errorf("rank %d: allreduce %v = %d, %v; want %d", c.Rank(), op, got, err, want)
			}
		}
		// A vector in one gather and broadcast (AllreduceInts): ranks
		// 0..6, each element combined on its own.
		vec := []int64{int64(c.Rank()), -int64(c.Rank()), 1}
		if err := AllreduceInts(c, vec, mpi.Max); err != nil || !slices.Equal(vec, []int64{6, 0, 1}) {
			return fmt.Errorf("rank %d: vector allreduce max = %v, %v", c.Rank(), vec, err)
		}
		if err := c.Barrier(); err != nil {
			return err
		}
		node, err := c.SplitShared()
		if err != nil {
			return err
		}
		wantNode := map[string][2]int{"a": {3, 0}, "b": {3, 0}, "c": {1, 0}}[hosts[c.Rank()]]
		if node.Size() != wantNode[0] || node.Rank() != local[c.Rank()] {
			return fmt.Errorf("rank %d: node of %d, rank %d; want %d, local rank %d", c.Rank(), node.Size(), node.Rank(), wantNode[0], local[c.Rank()])
		}
		color := 1
		if node.Rank() == 0 {
			color = 0
		}
		leaders, err := c.Split(color, c.Rank())
		if err != nil {
			return err
		}
		if color == 0 && leaders.Size() != 3 || color == 1 && leaders.Size() != 4 {
			return fmt.Errorf("rank %d: leaders of %d", c.Rank(), leaders.Size())
		}
		// Collectives on the node and on the leaders, interleaved, and
		// point-to-point with a tag: no message goes astray.
		v, err := node.AllreduceInt64(int64(c.Rank()), mpi.Sum)
		if err != nil {
			return err
		}
		if w := map[string]int64{"a": 8, "b": 8, "c": 5}[hosts[c.Rank()]]; v != w {
			return fmt.Errorf("rank %d: node sum %d, want %d", c.Rank(), v, w)
		}
		p := leaders.(P2P)
		if leaders.Rank() != 0 {
			return SendMsg(p, []byte(fmt.Sprint("from ", c.Rank())), 0, 23)
		}
		for r := 1; r < leaders.Size(); r++ {
			if _, err := RecvMsg(p, r, 23, 100); err != nil {
				return err
			}
		}
		return nil
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// TestFromTransportNodes: a host whose local ranks repeat (two torchrun
// agents on one host) or lack 0 is refused on its ranks.
func TestFromTransportNodes(t *testing.T) {
	for _, tc := range []struct {
		local []int
		want  string
	}{
		{[]int{0, 1, 0, 1}, "both have local rank 0"},
		{[]int{1, 2, 3, 4}, "no rank on host a has local rank 0"},
	} {
		errs := onRanks(t, []string{"a", "a", "a", "a"}, tc.local, func(c NodeComm) error {
			_, err := c.SplitShared()
			return err
		})
		for r, err := range errs {
			if !errors.Is(err, ErrNodes) || !bytes.Contains([]byte(err.Error()), []byte(tc.want)) {
				t.Errorf("%v: rank %d: %v, want ErrNodes %q", tc.local, r, err, tc.want)
			}
		}
	}
	// Unknown local ranks: the lowest rank leads.
	errs := onRanks(t, []string{"a", "a"}, []int{-1, -1}, func(c NodeComm) error {
		n, err := c.SplitShared()
		if err == nil && n.Rank() != c.Rank() {
			err = fmt.Errorf("node rank %d", n.Rank())
		}
		return err
	})
	for r, err := range errs {
		if err != nil {
			t.Errorf("unknown local ranks: rank %d: %v", r, err)
		}
	}
}
