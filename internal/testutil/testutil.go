// Package testutil builds kbundle variants and starts real MPI launchers for
// the project's tests. It is test-only support code: nothing outside _test.go
// files and test programs may import it.
package testutil

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Variant names one build of kbundle.
type Variant string

const (
	NoMPI   Variant = "nompi"   // plain go build, no cgo MPI
	OpenMPI Variant = "openmpi" // -tags mpi, CC=mpicc.openmpi
	MPICH   Variant = "mpich"   // -tags mpi, CC=mpicc.mpich
)

// MPIVariants are the MPI builds every collective test runs against.
var MPIVariants = []Variant{OpenMPI, MPICH}

// RepoRoot returns the module root (the folder holding go.mod).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

func cc(v Variant) string {
	switch v {
	case OpenMPI:
		return "mpicc.openmpi"
	case MPICH:
		return "mpicc.mpich"
	case MPIABI:
		return filepath.Join(RuntimesDir(), "mpich5", "bin", "mpicc_abi")
	}
	return ""
}

// CC returns the compiler wrapper of an MPI variant.
func CC(v Variant) string { return cc(v) }

// Launcher returns the launcher program for an MPI variant.
func Launcher(v Variant) string {
	switch v {
	case MPICH:
		return "mpiexec.hydra"
	case MPIABI:
		return RuntimeByName("mpich5").Launcher()
	}
	return "mpirun.openmpi"
}

// Required reports whether the environment demands the given facility
// (KBUNDLE_TEST_<NAME>=1, set by `make test`): then a missing tool fails
// the test instead of skipping it.
func Required(name string) bool { return os.Getenv("KBUNDLE_TEST_"+name) == "1" }

// NeedMPI skips (or fails, when KBUNDLE_TEST_MPI=1) unless the compiler
// wrapper and launcher of v are installed.
func NeedMPI(t testing.TB, v Variant) {
	t.Helper()
	for _, p := range []string{cc(v), Launcher(v)} {
		if _, err := exec.LookPath(p); err != nil {
			if v == MPIABI {
				if Required("MPIRT") {
					t.Fatalf("%s not found (run scripts/dev/mpi-runtimes.sh): %v", p, err)
				}
				t.Skipf("%s not found; run scripts/dev/mpi-runtimes.sh", p)
			}
			if Required("MPI") {
				t.Fatalf("%s not found (run `make deps`): %v", p, err)
			}
			t.Skipf("%s not found; install openmpi-bin libopenmpi-dev mpich libmpich-dev", p)
		}
	}
}

var (
	buildMu   sync.Mutex
	buildDir  string
	builtBins = map[string]string{}
)

// Build compiles pkg (a path relative to the module root, e.g.
// "./cmd/kbundle") for variant v once per test process and returns the
// binary's path.
func Build(t testing.TB, v Variant, pkg string) string {
	t.Helper()
	if v != NoMPI {
		NeedMPI(t, v)
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	key := string(v) + " " + pkg
	if p, ok := builtBins[key]; ok {
		return p
	}
	if buildDir == "" {
		d, err := os.MkdirTemp("", "kbundle-testbin-")
		if err != nil {
			t.Fatal(err)
		}
		buildDir = d
	}
	out := filepath.Join(buildDir, string(v), filepath.Base(pkg))
	args := []string{"build", "-o", out}
	env := os.Environ()
	if v != NoMPI {
		args = append(args, "-tags", "mpi")
		env = append(env, "CC="+cc(v), "CGO_ENABLED=1")
	}
	args = append(args, pkg)
	cmd := exec.Command("go", args...)
	cmd.Dir = RepoRoot()
	cmd.Env = env
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %v: %v\n%s", args, err, b)
	}
	builtBins[key] = out
	return out
}

// Kbundle builds cmd/kbundle for v.
func Kbundle(t testing.TB, v Variant) string { return Build(t, v, "./cmd/kbundle") }

// MPIEnv is the environment additions every launch gets: root may run
// Open MPI, oversubscription is allowed on 2 cores, and shared-memory
// single copy (CMA) is off because containers often forbid ptrace.
var MPIEnv = []string{
	"OMPI_ALLOW_RUN_AS_ROOT=1",
	"OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
	"OMPI_MCA_rmaps_base_oversubscribe=1",
	"OMPI_MCA_btl_vader_single_copy_mechanism=none",
	"OMPI_MCA_btl=self,vader",
	"HYDRA_LAUNCHER=fork",
}

// LaunchTimeout bounds every launched job: a hang is a failure.
var LaunchTimeout = 3 * time.Minute

// MPICommand returns a command that runs argv as np ranks under v's
// launcher, killed (with its process group) after LaunchTimeout. The
// caller may add to cmd.Env (it starts as os.Environ()+MPIEnv).
func MPICommand(ctx context.Context, v Variant, np int, argv ...string) *exec.Cmd {
	args := []string{"-np", strconv.Itoa(np)}
	if v == OpenMPI {
		args = append(args, "--oversubscribe", "--allow-run-as-root")
	}
	args = append(args, argv...)
	cmd := exec.CommandContext(ctx, Launcher(v), args...)
	cmd.Env = append(os.Environ(), MPIEnv...)
	setProcessGroup(cmd)
	return cmd
}

// RunMPI runs argv under v with np ranks and returns combined stdout and
// stderr and the exit code. It fails the test on a timeout.
func RunMPI(t testing.TB, v Variant, np int, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LaunchTimeout)
	defer cancel()
	cmd := MPICommand(ctx, v, np, argv...)
	cmd.Env = append(cmd.Env, env...)
	return run(t, ctx, cmd)
}

// Run runs a command with a timeout and returns its outputs and exit code.
func Run(t testing.TB, env []string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), LaunchTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	setProcessGroup(cmd)
	return run(t, ctx, cmd)
}

func run(t testing.TB, ctx context.Context, cmd *exec.Cmd) (string, string, int) {
	t.Helper()
	var so, se lockedBuffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("%v: timed out after %v (a hang is a failure)\nstdout:\n%s\nstderr:\n%s", cmd.Args, LaunchTimeout, so.String(), se.String())
	}
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%v: %v", cmd.Args, err)
		}
		code = ee.ExitCode()
	}
	return so.String(), se.String(), code
}

// Describe formats a launch for failure messages.
func Describe(v Variant, np int) string { return fmt.Sprintf("%s np=%d", v, np) }

// Main runs a test package's tests (call it from TestMain) and then
// removes the binaries Build made for them: nothing is left in $TMPDIR.
func Main(m *testing.M) int {
	code := m.Run()
	buildMu.Lock()
	if buildDir != "" {
		os.RemoveAll(buildDir)
		buildDir = ""
		builtBins = map[string]string{}
	}
	buildMu.Unlock()
	return code
}
