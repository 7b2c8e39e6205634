// Package broadcast loads a kbundle bundle collectively: rank 0 reads the
// bundle file once from the shared file system and checks it, then
// broadcasts it, so a job of N ranks opens the shared location once
// instead of N times (or N times the number of cache entries).
//
// LoadBundle is the library call for Go programs: every rank gets the
// same verified bytes as a *bundle.Reader, or the same error, matching
// ErrNoBundle and carrying rank 0's reason, and can go on without the
// cache. LoadToNodes is what `kbundle load` runs: one leader per node
// receives the bytes and extracts them into node-local storage while the
// other ranks of the node wait, and every rank agrees on the outcome.
//
// The package knows collectives only: it works on any communicator that
// implements Comm (package mpi's does, through FromMPI for NodeComm), it
// never calls MPI itself, never opens the bundle on a rank other than the
// root, never lets ranks disagree on the size or chunking of a broadcast
// (rank 0 decides and broadcasts both), and never aborts or exits: a bad
// bundle is an error on every rank, not a hang.
package broadcast
