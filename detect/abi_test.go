package detect

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// TestMismatch is the build-against-launcher table, on environments
// captured from the real launchers (testdata/launchers): for each, which
// builds are refused before MPI_Init and what the message names.
func TestMismatch(t *testing.T) {
	all := []ABI{ABINone, ABIOpenMPI, ABIMPICH, ABIStandard}
	tests := []struct {
		fixture string
		refused []ABI  // the others pass (or are left to MismatchComm)
		words   string // in every refusal but the no-MPI build's
	}{
		{"none-singleton/rank0.env", nil, ""},
		{"openmpi-np1/rank0.env", nil, ""},
		{"openmpi5-np1/rank0.env", nil, ""},
		{"impi-hydra-np1/rank0.env", nil, ""},
		{"slurm-srun-n1/rank0.env", nil, ""},
		{"slurm-sbatch-script/rank0.env", nil, ""},
		{"openmpi-np4/rank1.env", []ABI{ABINone, ABIMPICH, ABIStandard}, "runs under Open MPI's mpirun (4 tasks): use mpiexec.hydra"},
		{"openmpi5-np4/rank0.env", []ABI{ABINone, ABIMPICH, ABIStandard}, "runs under Open MPI's mpirun (4 tasks)"},
		{"mpich-hydra-np4/rank0.env", []ABI{ABINone, ABIOpenMPI}, "this kbundle is built for Open MPI but runs under Hydra (MPICH) (4 tasks): use mpirun.openmpi, or the MPICH build"},
		{"mpich5-hydra-np4/rank2.env", []ABI{ABINone, ABIOpenMPI}, "Hydra (MPICH)"},
		{"impi-hydra-np4/rank0.env", []ABI{ABINone, ABIOpenMPI}, "runs under Hydra (Intel MPI) (4 tasks): use mpirun.openmpi"},
		{"impi-mpirun-np2/rank1.env", []ABI{ABINone, ABIOpenMPI}, "Hydra (Intel MPI) (2 tasks)"},
		{"slurm-srun-n2/rank0.env", []ABI{ABINone, ABIOpenMPI, ABIMPICH, ABIStandard}, "srun with no MPI plugin (srun --mpi=none) (2 tasks)"},
		{"slurm-sbatch-srun-n2/rank1.env", []ABI{ABINone, ABIOpenMPI, ABIMPICH, ABIStandard}, "srun --mpi=none"},
		{"slurm-srun-pmix-n2-openmpi/rank0.env", []ABI{ABINone, ABIMPICH, ABIStandard}, "srun --mpi=pmix (2 tasks): use srun --mpi=pmi2"},
		{"slurm-srun-pmi2-n2-mpich/rank0.env", []ABI{ABINone, ABIOpenMPI}, "srun --mpi=pmi2 (2 tasks): use srun --mpi=pmix"},
		{"torchrun-np1/rank0.env", nil, ""},
		{"torchrun-np4/rank3.env", all, "runs under PyTorch torchrun (torchelastic) (4 tasks): torch's launchers start no MPI job"},
		{"torchrun-c10d-2x2/rank1.env", all, "load_bundle(torch.distributed.group.WORLD)"},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			env := readEnv(t, filepath.Join("testdata", "launchers", tc.fixture))
			lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
			r, err := Detect(lookup)
			if err != nil {
				t.Fatal(err)
			}
			for _, a := range all {
				err := Mismatch(lookup, r, a)
				want := false
				for _, x := range tc.refused {
					want = want || x == a
				}
				if (err != nil) != want {
					t.Errorf("%s build: Mismatch = %v, want refused %v", a, err, want)
					continue
				}
				if err == nil {
					continue
				}
				if !errors.Is(err, ErrMismatch) || strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "--per-task") {
					t.Errorf("%s build: %q: not one ErrMismatch line, or it names load's --per-task", a, err)
				}
				if a == ABINone && !strings.Contains(err.Error(), "built without MPI") {
					t.Errorf("no-MPI build: %q", err)
				}
				if a != ABINone && a == tc.refused[1] && !strings.Contains(err.Error(), tc.words) {
					t.Errorf("%s build: %q lacks %q", a, err, tc.words)
				}
				t.Logf("%s: %v", a, err)
			}
		})
	}
}

// TestMismatchComm: after MPI_Init, one rank where the launcher said N.
func TestMismatchComm(t *testing.T) {
	env := map[string]string{"OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_SIZE": "3"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	r, err := Detect(lookup)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		r        Result
		commSize int
		refused  bool
	}{
		{r, 1, true},
		{r, 3, false},
		{Result{Launcher: "none", Size: 1}, 1, false},
		{Result{Launcher: "mpich", MPI: true, Size: Unknown}, 1, false}, // PMI_PORT mode: no size to compare
	}
	for _, tc := range tests {
		err := MismatchComm(lookup, tc.r, ABIMPICH, tc.commSize)
		if (err != nil) != tc.refused || (err != nil && (!errors.Is(err, ErrMismatch) || !strings.Contains(err.Error(), "singleton"))) {
			t.Errorf("MismatchComm(%+v, %d) = %v, want refused %v", tc.r, tc.commSize, err, tc.refused)
		}
	}
}
