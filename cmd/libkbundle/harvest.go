package main

import (
	"context"
	"os"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/cmd/internal/loadcmd"
	"github.com/kbundle/kbundle/mpi"
)

// harvestFortran is kbundle_harvest: as loadFortran, for a harvest. The
// request is a loadcmd.HarvestRequest, the answer a loadcmd.HarvestOutcome.
func harvestFortran(ctx context.Context, comm int64, req []byte) []byte {
	r, err := loadcmd.DecodeHarvest(req)
	if err != nil {
		return encode(loadcmd.HarvestFailure(loadcmd.Python, err))
	}
	if err := mpi.Adopt(); err != nil {
		return encode(loadcmd.HarvestFailure(loadcmd.Python, loadcmd.AtComm(err)))
	}
	rank := mpi.World().Rank()
	opts, local := loadcmd.ResolveHarvest(r, loadcmd.Python, rank)
	probeInProcess(&opts)
	if local == nil {
		local = loadcmd.CheckSingleton(r.Environ, mpi.World().Size())
	}
	// The guard bounds the whole call, from the communicator's duplication
	// on, as load's.
	host, _ := os.Hostname()
	defer loadcmd.HarvestGuard(loadcmd.Python, opts.Timeout, rank, host, abortJob)()
	c, err := mpi.FromFortran(comm)
	if err != nil {
		return encode(loadcmd.HarvestFailure(loadcmd.Python, loadcmd.AtComm(err)))
	}
	defer c.Free()
	return encode(runHarvest(ctx, loadcmd.Own(c, r.Environ), opts, local))
}

// runHarvest harvests over world as `kbundle harvest` does; collective.
// Every rank returns the same outcome, except the local failures of kind
// Comm.
func runHarvest(ctx context.Context, world broadcast.NodeComm, opts loadcmd.HarvestOptions, local error) loadcmd.HarvestOutcome {
	return loadcmd.Harvest(ctx, world, loadcmd.Python, opts, local, true)
}
