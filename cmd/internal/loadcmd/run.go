package loadcmd

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/load"
)

// Decode reads kbundle_load's JSON request.
func Decode(b []byte) (Request, error) {
	var r Request
	if err := json.Unmarshal(b, &r); err != nil {
		return r, usagef("bad request: %v", err)
	}
	return r, nil
}

type commError struct{ err error }

func (e *commError) Error() string   { return e.err.Error() }
func (e *commError) Unwrap() []error { return []error{e.err, broadcast.ErrComm} }

// AtComm marks err, from setting MPI up or from a communicator, as this
// rank's communication problem (Kind Comm).
func AtComm(err error) error {
	if err == nil || errors.Is(err, broadcast.ErrComm) {
		return err
	}
	return &commError{err}
}

// Load loads over world what o says, as front f does; collective. local
// is this rank's error from Resolve: Python's ranks agree on theirs first
// (only rank 0 may lack a bundle), so that nobody enters the load alone;
// the CLI's are the same on every rank and end it before MPI. usingMPI:
// world is MPI's; tasks: one of several tasks of a launcher, each loading
// alone. Every rank returns the same outcome, except a Comm failure; on
// success it is Loaded's.
func Load(ctx context.Context, world broadcast.NodeComm, f Front, o Options, local error, usingMPI, tasks bool) Outcome {
	var plan load.Plan
	local, err := agreeStart(world, f, o.getenv, local, func(job string, placed broadcast.Placement) (err error) {
		plan, err = o.Plan(job, usingMPI, tasks)
		plan.Placement = placed
		return err
	})
	if err != nil {
		return Failure(f, AtComm(err))
	}
	if f == Python && local != nil && !errors.Is(local, broadcast.ErrNoBundle) {
		local = &usageError{local} // argument problems: ErrUsage is not on the wire
	}
	if local != nil {
		return Failure(f, local)
	}
	sum, err := load.Run(ctx, world, plan)
	if err != nil {
		out := Failure(f, err)
		out.Bundle = plan.Bundle // rank 0's: the one it tried
		return out
	}
	return Loaded(f, sum, plan.Bundle, usingMPI)
}

// Check reads and checks the bundle without installing it: what one of
// several tasks of a node does when a launcher runs them without MPI and
// the node's first task loads. Its error is Failure's.
func (o Options) Check() error {
	_, err := broadcast.LoadBundle(broadcast.Self(), broadcast.WithPath(o.plan.Bundle), broadcast.WithTrust(o.plan.Trust))
	return err
}
