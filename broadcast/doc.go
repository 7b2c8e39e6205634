// Package broadcast moves a kbundle bundle from rank 0 to every rank of a
// communicator: rank 0 reads the bundle file once from the shared file
// system, so a job of N ranks opens the shared location once instead of N
// times (or N times the number of cache entries).
//
// Stream is the streaming wire protocol (docs/WIRE.md): a status, then
// the bundle's prelude (header, index, trailer), then its body in chunks,
// rank 0 reading the next chunk while the previous one is broadcast; each
// rank hands what it receives to a Sink, which can decode while the bytes
// arrive. Agree makes every rank return the same outcome, naming the
// failing ranks' reasons.
//
// LoadBundle is the library call for Go programs: every rank gets the
// same verified bytes as a *bundle.Reader, or the same error, matching
// ErrNoBundle and carrying the failing rank's reason, and can go on
// without the cache. The node-local load that `kbundle load` does is
// package load, built on Stream.
//
// The package knows collectives only: it works on any communicator that
// implements Comm (package mpi's does, through FromMPI for NodeComm), it
// never calls MPI itself, never opens the bundle on a rank other than the
// root, never lets ranks disagree on the size or chunking of a broadcast
// (rank 0 decides and broadcasts both), and never aborts or exits: a bad
// bundle is an error on every rank, not a hang. Package broadcasttest has
// an in-process communicator for tests.
package broadcast
