package detect

import (
	"path/filepath"
	"slices"
	"testing"
)

// TestChooseBuild is the front's table, on environments captured from
// the real launchers (testdata/launchers): which build it runs for each,
// with every build installed, and with only some.
func TestChooseBuild(t *testing.T) {
	all := []ABI{ABINone, ABIOpenMPI, ABIMPICH, ABIStandard}
	debian := []ABI{ABINone, ABIOpenMPI, ABIMPICH} // make build, make install on Debian
	tests := []struct {
		fixture string
		have    []ABI
		want    ABI
	}{
		{"none-singleton/rank0.env", all, ABINone},
		{"openmpi-np1/rank0.env", all, ABINone}, // one task: no collective to join
		{"slurm-sbatch-script/rank0.env", all, ABINone},
		{"slurm-srun-n1/rank0.env", all, ABINone},
		{"openmpi-np4/rank1.env", all, ABIOpenMPI},
		{"openmpi5-np4/rank0.env", debian, ABIOpenMPI},
		{"mpich-hydra-np4/rank0.env", all, ABIMPICH},
		{"mpich5-hydra-np4/rank2.env", debian, ABIMPICH},
		{"impi-hydra-np4/rank0.env", debian, ABIMPICH},
		{"impi-mpirun-np2/rank1.env", debian, ABIMPICH},
		{"slurm-srun-pmix-n2-openmpi/rank0.env", all, ABIOpenMPI},
		{"slurm-srun-pmi2-n2-mpich/rank0.env", all, ABIMPICH},
		{"slurm-srun-n2/rank0.env", all, ABINone}, // srun --mpi=none: no MPI build can join
		// Only some builds installed.
		{"mpich-hydra-np4/rank0.env", []ABI{ABINone, ABIStandard, ABIOpenMPI}, ABIStandard},
		{"mpich-hydra-np4/rank0.env", []ABI{ABINone, ABIOpenMPI}, ABINone},
		{"openmpi-np4/rank1.env", []ABI{ABINone, ABIMPICH, ABIStandard}, ABINone},
		{"openmpi-np4/rank1.env", []ABI{ABIOpenMPI}, ABIOpenMPI},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			lookup := mapLookup(readEnv(t, filepath.Join("testdata", "launchers", tc.fixture)))
			r, err := Detect(lookup)
			if err != nil {
				t.Fatal(err)
			}
			got := ChooseBuild(lookup, r, func(a ABI) bool { return slices.Contains(tc.have, a) })
			if got != tc.want {
				t.Errorf("with %v installed: ChooseBuild = %s, want %s", tc.have, got, tc.want)
			}
		})
	}
}

func TestParseABI(t *testing.T) {
	for _, s := range []string{"none", "openmpi", "mpich", "mpi-abi"} {
		if a, ok := ParseABI(s); !ok || string(a) != s {
			t.Errorf("ParseABI(%q) = %q, %v", s, a, ok)
		}
	}
	for _, s := range []string{"", "nompi", "OpenMPI", "mpiabi", "intelmpi"} {
		if _, ok := ParseABI(s); ok {
			t.Errorf("ParseABI(%q) accepted", s)
		}
	}
}
