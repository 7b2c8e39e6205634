package broadcast

import (
	"encoding/binary"
	"fmt"
)

// P2P is point-to-point bytes between the ranks of a communicator, which
// mpi.Comm (and so FromMPI's communicators) and broadcasttest.Comm have:
// what gathering to rank 0 needs (harvest's lists, load's node notes).
type P2P interface {
	Send(buf []byte, dest, tag int) error
	Recv(buf []byte, src, tag int) error
}

// SendMsg sends b to rank to as one message: its length, then its bytes.
func SendMsg(p P2P, b []byte, to, tag int) error {
	n := binary.LittleEndian.AppendUint64(nil, uint64(len(b)))
	if err := p.Send(n, to, tag); err != nil {
		return err
	}
	if len(b) == 0 {
		return nil
	}
	return p.Send(b, to, tag)
}

// RecvMsg receives a message SendMsg sent from rank from, refusing one
// longer than limit bytes.
func RecvMsg(p P2P, from, tag int, limit uint64) ([]byte, error) {
	n := make([]byte, 8)
	if err := p.Recv(n, from, tag); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(n)
	if size > limit {
		return nil, fmt.Errorf("message of %d bytes from rank %d (limit %d)", size, from, limit)
	}
	b := make([]byte, size)
	if size == 0 {
		return b, nil
	}
	return b, p.Recv(b, from, tag)
}

// BcastBytes broadcasts root 0's b, of any length up to limit, over c:
// one broadcast of its length and, when they fit, its bytes (inlineBytes
// at most, fewer when limit is smaller: every rank sizes it alike), else
// a second one of its bytes. Every rank returns root 0's bytes (nil when
// there are none).
func BcastBytes(c Comm, b []byte, limit uint64) ([]byte, error) {
	head := make([]byte, 8+min(limit, inlineBytes))
	if c.Rank() == 0 {
		binary.LittleEndian.PutUint64(head, uint64(len(b)))
		copy(head[8:], b) // all of b, if it fits
	}
	if err := c.Bcast(head, 0); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint64(head)
	switch {
	case size > limit:
		return nil, fmt.Errorf("rank 0 sent %d bytes (limit %d)", size, limit)
	case size == 0:
		return nil, nil
	case size <= uint64(len(head)-8):
		return head[8 : 8+size], nil
	}
	if c.Rank() != 0 {
		b = make([]byte, size)
	}
	if err := c.Bcast(b, 0); err != nil {
		return nil, err
	}
	return b, nil
}

// inlineBytes is what BcastBytes's first broadcast carries at most: 1
// KiB with the length, which a broadcast sends in about the time of 8
// bytes (issue 31), and a path, a preset list or a digest fits.
const inlineBytes = 1024 - 8
