package detect

import "slices"

// chooseOrder is the order in which ChooseBuild tries the MPI builds:
// the MPICH-ABI build first (MPICH, Intel MPI, MVAPICH and Cray MPICH
// all run it, and PALS, ALPS and Flux start MPICH-family jobs), then the
// standard-ABI build, then Open MPI's. Mismatch rules out the builds that
// cannot join the launcher's job, so under Open MPI's mpirun, or srun
// --mpi=pmix, only the Open MPI build is left.
var chooseOrder = []ABI{ABIMPICH, ABIStandard, ABIOpenMPI}

// ChooseBuild decides which build of kbundle the front (the program
// installed as kbundle, cmd/kbundle-front) runs, from the launcher facts
// r (Detect on lookup) and the builds installed beside it (have). Without
// a launcher, or for one task, it is the build without MPI. Under a
// launcher of several tasks it is the first installed MPI build that
// Mismatch does not refuse, in the order MPICH ABI, standard ABI, Open
// MPI; when none can join (srun --mpi=none, or only builds of another
// MPI installed) it is ABINone, which refuses the collectives with
// Mismatch's message naming the build to install and still runs the
// per-task commands. Like Detect, it reads nothing but lookup and never
// initialises MPI.
func ChooseBuild(lookup func(string) (string, bool), r Result, have func(ABI) bool) ABI {
	if !r.MPI || r.Size == 1 {
		return ABINone
	}
	for _, a := range chooseOrder {
		if have(a) && Mismatch(lookup, r, a) == nil {
			return a
		}
	}
	return ABINone
}

// ParseABI reads an ABI name as `kbundle version` prints it (none,
// openmpi, mpich, mpi-abi); ok is false for any other.
func ParseABI(s string) (a ABI, ok bool) {
	a = ABI(s)
	return a, slices.Contains([]ABI{ABINone, ABIOpenMPI, ABIMPICH, ABIStandard}, a)
}
