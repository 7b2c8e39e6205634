package detect

import (
	"errors"
	"fmt"

	"github.com/kbundle/kbundle/launcher"
)

// ABI names the MPI ABI a kbundle build is for: mpi.BuildFamily().
type ABI string

// The build families.
const (
	ABINone     ABI = "none"    // built without MPI
	ABIOpenMPI  ABI = "openmpi" // Open MPI 4.x and 5.x (libmpi.so.40)
	ABIMPICH    ABI = "mpich"   // MPICH, Intel MPI, MVAPICH, Cray MPICH (libmpi.so.12)
	ABIStandard ABI = "mpi-abi" // the MPI-5 standard ABI (libmpi_abi.so.1)
)

// ErrMismatch reports a build that cannot form one MPI job with the
// tasks its launcher started: each task would load on its own.
var ErrMismatch = errors.New("this kbundle cannot join the launcher's MPI job")

// builtFor names a build for messages.
func builtFor(a ABI) string {
	switch a {
	case ABINone:
		return "built without MPI"
	case ABIOpenMPI:
		return "built for Open MPI"
	case ABIMPICH:
		return "built for MPICH (or an MPI of its ABI)"
	case ABIStandard:
		return "built for the MPI standard ABI"
	}
	return "built for " + string(a)
}

// launchedBy names the launcher of r for messages.
func launchedBy(e env, r Result) string {
	switch r.Launcher {
	case launcher.OpenMPI:
		return "Open MPI's mpirun"
	case launcher.MPICH:
		return "Hydra (MPICH)"
	case launcher.IntelMPI:
		return "Hydra (Intel MPI)"
	case launcher.Slurm:
		if v, ok := e.get("SLURM_MPI_TYPE"); ok && v != "" {
			return "srun --mpi=" + quote(v)
		}
		return "srun with no MPI plugin (srun --mpi=none)"
	}
	if l, ok := launcher.Lookup(r.Launcher); ok {
		return l.Name
	}
	return string(r.Launcher)
}

// fix names what to run instead.
func fix(r Result, a ABI) string {
	switch {
	case r.Launcher == launcher.TorchElastic || r.Launcher == launcher.TorchEnv:
		return "torch's launchers start no MPI job; load from Python over the process group " +
			"(kbundle.load_bundle(torch.distributed.group.WORLD)), or before torchrun from one task a node: " +
			"kbundle load over MPI, or kbundle load --per-node (docs/slurm.md, \"srun torchrun jobs\")"
	case a == ABINone:
		return "use the MPI build for this launcher: kbundle-openmpi under Open MPI, kbundle-mpich under MPICH or Intel MPI"
	case a == ABIOpenMPI && r.Launcher == launcher.Slurm:
		return "use srun --mpi=pmix, or the MPICH build"
	case a == ABIOpenMPI && r.Launcher == launcher.OpenMPI:
		return "use the Open MPI launcher the build's library belongs to"
	case a == ABIOpenMPI:
		return "use mpirun.openmpi, or the MPICH build"
	case r.Launcher == launcher.Slurm:
		return "use srun --mpi=pmi2, or the Open MPI build with srun --mpi=pmix"
	case r.Launcher == launcher.OpenMPI:
		return "use mpiexec.hydra (MPICH or Intel MPI), or the Open MPI build"
	}
	return "use the launcher of the MPI this build is for, or the build for this launcher's MPI"
}

func mismatch(e env, r Result, a ABI, what string) error {
	size := "several"
	if r.Size != Unknown {
		size = fmt.Sprint(r.Size)
	}
	return mismatchError(fmt.Sprintf("this kbundle is %s but runs under %s (%s tasks)%s: %s",
		builtFor(a), launchedBy(e, r), size, what, fix(r, a)))
}

// mismatchError is the message alone; it matches ErrMismatch.
type mismatchError string

func (m mismatchError) Error() string        { return string(m) }
func (m mismatchError) Is(target error) bool { return target == ErrMismatch }

// Mismatch decides before MPI_Init whether a build for a can form one MPI
// job with the tasks the launcher started (r, from the same lookup). It
// returns an error matching ErrMismatch when it certainly cannot, and nil
// when it can or cannot tell (MismatchComm decides after MPI_Init). One
// task, or no launcher, is never a mismatch. The rules (docs/launchers.md,
// "Build and launcher"), each seen on real runtimes here:
//   - a build without MPI under a launcher of two or more tasks;
//   - any build under torchrun or torch's env:// variables: no MPI
//     launcher started the tasks, so MPI_Init makes singletons;
//   - an Open MPI build where the launcher gives no PMIx server: Hydra
//     (MPICH, Intel MPI) or srun without --mpi=pmix (singletons, or an
//     abort in MPI_Init);
//   - an MPICH-ABI or standard-ABI build under Open MPI's mpirun, or under
//     srun without a PMI-1/PMI-2 or Cray PMI plugin (MPICH 4.0 starts
//     singletons, MPICH 5.0 aborts: "unsupported PMI version PMIx").
func Mismatch(lookup func(string) (string, bool), r Result, a ABI) error {
	e := env(lookup)
	if !r.MPI || r.Size == 1 {
		return nil
	}
	if r.Launcher == launcher.TorchElastic || r.Launcher == launcher.TorchEnv {
		return mismatch(e, r, a, "")
	}
	switch a {
	case ABINone:
		return mismatch(e, r, a, "")
	case ABIOpenMPI:
		switch r.Launcher {
		case launcher.MPICH, launcher.IntelMPI, launcher.MVAPICH2:
			return mismatch(e, r, a, "")
		case launcher.Slurm:
			if !e.has("PMIX_RANK") {
				return mismatch(e, r, a, "")
			}
		}
	case ABIMPICH, ABIStandard:
		switch r.Launcher {
		case launcher.OpenMPI:
			return mismatch(e, r, a, "")
		case launcher.Slurm:
			if _, _, ok := e.first([]string{"PMI_FD", "PMI_PORT", "PALS_RANKID"}); !ok {
				return mismatch(e, r, a, "")
			}
		}
	}
	return nil
}

// MismatchComm decides after MPI_Init: the launcher said r.Size > 1 tasks
// but MPI_COMM_WORLD has one rank, so the library did not reach the
// launcher and every task is a singleton. The error matches ErrMismatch;
// nil when the sizes agree or the launcher gave no size.
func MismatchComm(lookup func(string) (string, bool), r Result, a ABI, commSize int) error {
	if !r.MPI || r.Size == Unknown || r.Size <= 1 || commSize != 1 {
		return nil
	}
	return mismatch(env(lookup), r, a, ", and MPI started every task as a singleton (rank 0 of 1)")
}
