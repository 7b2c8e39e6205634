//go:build !mpi

package mpi

import "fmt"

// Send fails: a world of one rank has no peer.
func (c *Comm) Send(buf []byte, dest, tag int) error { return c.noPeer("MPI_Send", dest) }

// Recv fails: a world of one rank has no peer.
func (c *Comm) Recv(buf []byte, src, tag int) error { return c.noPeer("MPI_Recv", src) }

func (c *Comm) noPeer(call string, peer int) error {
	if err := c.check(call); err != nil {
		return err
	}
	return fmt.Errorf("mpi: %s: rank %d: no peer in a world of one rank", call, peer)
}
