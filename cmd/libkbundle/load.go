package main

import (
	"context"
	"encoding/json"
	"os"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/mpi"
)

// loadFortran is kbundle_load: it adopts the program's MPI, duplicates
// the communicator whose Fortran handle is comm, and loads over it. The
// request is a loadcmd.Request, the answer a loadcmd.Outcome.
func loadFortran(ctx context.Context, comm int64, req []byte) []byte {
	r, err := loadcmd.Decode(req)
	if err != nil {
		return encode(loadcmd.Failure(loadcmd.Python, err))
	}
	if err := mpi.Adopt(); err != nil {
		return encode(loadcmd.Failure(loadcmd.Python, loadcmd.AtComm(err)))
	}
	rank := mpi.World().Rank()
	opts, local := loadcmd.Resolve(r, loadcmd.Python, rank)
	probeInProcess(&opts)
	if local == nil {
		local = loadcmd.CheckSingleton(r.Environ, mpi.World().Size())
	}
	// The guard bounds the whole call, from the communicator's duplication
	// on: a rank that never calls load_bundle blocks the others there
	// already.
	host, _ := os.Hostname()
	defer loadcmd.Guard(loadcmd.Python, opts.Timeout, rank, host, abortJob)()
	c, err := mpi.FromFortran(comm)
	if err != nil {
		return encode(loadcmd.Failure(loadcmd.Python, loadcmd.AtComm(err)))
	}
	defer c.Free()
	return encode(run(ctx, loadcmd.Own(c, r.Environ), opts, local))
}

// run loads over world as `kbundle load` does; collective. Every rank
// returns the same outcome, except the local failures of kind Comm.
func run(ctx context.Context, world broadcast.NodeComm, opts loadcmd.Options, local error) loadcmd.Outcome {
	return loadcmd.Load(ctx, world, loadcmd.Python, opts, local, true, false)
}

// encode is an answer's JSON: a loadcmd.Outcome or HarvestOutcome.
func encode[T loadcmd.Outcome | loadcmd.HarvestOutcome](o T) []byte {
	b, err := json.Marshal(o)
	if err != nil { // only plain fields: cannot happen
		return []byte(`{"ok":false,"kind":"mpi","reason":"cannot encode the result"}`)
	}
	return b
}
