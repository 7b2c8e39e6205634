package broadcasttest

import (
	"fmt"
	"sync"
)

// Point-to-point messages, as MPI_Send and MPI_Recv of bytes: each
// (communicator, source, destination, tag) is a FIFO channel; a Send
// waits while 64 messages are unreceived on it.

type mailKey struct {
	g             *group
	from, to, tag int
}

var (
	mailMu sync.Mutex
	mail   = map[mailKey]chan []byte{}
)

func box(k mailKey) chan []byte {
	mailMu.Lock()
	defer mailMu.Unlock()
	ch := mail[k]
	if ch == nil {
		ch = make(chan []byte, 64)
		mail[k] = ch
	}
	return ch
}

// Send is MPI_Send: buf goes to rank dest with tag.
func (c *Comm) Send(buf []byte, dest, tag int) error {
	if dest < 0 || dest >= c.g.n || dest == c.rank {
		return fmt.Errorf("fake send: rank %d to %d of %d", c.rank, dest, c.g.n)
	}
	box(mailKey{c.g, c.rank, dest, tag}) <- append([]byte(nil), buf...)
	return nil
}

// Recv is MPI_Recv: it receives exactly len(buf) bytes from rank src.
func (c *Comm) Recv(buf []byte, src, tag int) error {
	if src < 0 || src >= c.g.n || src == c.rank {
		return fmt.Errorf("fake recv: rank %d from %d of %d", c.rank, src, c.g.n)
	}
	b := <-box(mailKey{c.g, src, c.rank, tag})
	if len(b) != len(buf) {
		return fmt.Errorf("fake recv: rank %d got %d bytes from %d, want %d", c.rank, len(b), src, len(buf))
	}
	copy(buf, b)
	c.corrupt(buf)
	return nil
}

func (c *Comm) corrupt(buf []byte) {
	if c.Corrupt != nil {
		c.Corrupt(buf)
	}
}
