package main

import (
	"os"
	"time"

	"github.com/kbundle/kbundle/detect"
	"github.com/kbundle/kbundle/mpi"
)

// refuseDelay is how long the tasks other than the launcher's rank 0 wait
// before exiting 2 on a mismatch: Open MPI's mpirun (4.1 and 5.0) and
// Hydra end the job as soon as one task exits non-zero, which could kill
// rank 0 before its message is out.
const refuseDelay = time.Second

// mismatch is detect.Mismatch (before MPI_Init) or, with comm >= 1,
// detect.MismatchComm (after) for this build, unless --per-task was given;
// a refusal is the exit status 2 on every task with the launcher's rank 0
// speaking (docs/launchers.md, "Build and launcher").
func (l *loader) mismatch(det detect.Result, comm int) error {
	if l.c.Bool("per-task") {
		return nil
	}
	abi := detect.ABI(mpi.BuildFamily())
	err := detect.Mismatch(os.LookupEnv, det, abi)
	if comm >= 1 {
		err = detect.MismatchComm(os.LookupEnv, det, abi, comm)
	}
	if err == nil {
		return nil
	}
	l.setSpeaker(det.Rank <= 0) // every singleton is MPI's rank 0
	if !l.speaker {
		time.Sleep(refuseDelay)
	}
	msg := err.Error()
	if l.c.Command.Names()[0] == "load" {
		msg += perTaskHint // only load has --per-task
	}
	return l.fail(msg, exitUsage)
}

// perTaskHint ends load's mismatch message: its way out, which the other
// commands lack.
const perTaskHint = " (or pass --per-task to let each task load on its own)"
