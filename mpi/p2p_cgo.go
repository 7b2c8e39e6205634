//go:build mpi

package mpi

// #include "kbmpi.h"
import "C"

import (
	"fmt"
	"unsafe"
)

// Send sends buf to rank dest of c with tag (MPI_Send of MPI_BYTE); the
// receiver must Recv a buffer of the same length. Any length works:
// longer than MaxCount goes in several messages.
func (c *Comm) Send(buf []byte, dest, tag int) error {
	if err := c.p2pCheck("MPI_Send", dest); err != nil {
		return err
	}
	return chunks(buf, MaxCount, func(b []byte) error {
		p := unsafe.Pointer(unsafe.SliceData(b))
		return call("MPI_Send", func() C.int { return C.kb_send(C.int(c.h), p, C.int(len(b)), C.int(dest), C.int(tag)) })
	})
}

// Recv receives exactly len(buf) bytes from rank src of c with tag, as
// the matching Send sent them.
func (c *Comm) Recv(buf []byte, src, tag int) error {
	if err := c.p2pCheck("MPI_Recv", src); err != nil {
		return err
	}
	return chunks(buf, MaxCount, func(b []byte) error {
		p := unsafe.Pointer(unsafe.SliceData(b))
		return call("MPI_Recv", func() C.int { return C.kb_recv(C.int(c.h), p, C.int(len(b)), C.int(src), C.int(tag)) })
	})
}

func (c *Comm) p2pCheck(call string, peer int) error {
	if err := c.check(call); err != nil {
		return err
	}
	if !Initialized() {
		return fmt.Errorf("mpi: %s: %w", call, ErrNotInitialized)
	}
	if peer == c.rank {
		return fmt.Errorf("mpi: %s: rank %d to itself", call, peer)
	}
	return checkRoot(call, peer, c.size)
}
