package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

func TestMain(m *testing.M) { os.Exit(testutil.Main(m)) }

// install puts the front, as kbundle, into a new folder with a fake of
// each named build (a script that prints its path and arguments).
func install(t *testing.T, builds ...string) string {
	t.Helper()
	front := testutil.Build(t, testutil.NoMPI, "./cmd/kbundle-front")
	dir := t.TempDir()
	b, err := os.ReadFile(front)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kbundle"), b, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range builds {
		script := "#!/bin/sh\nprintf '%s|%s\\n' \"$0\" \"$*\"\n"
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// runFront runs prog with the fixture's variables (a launcher's task, or
// none) and extra, and nothing else but PATH.
func runFront(t *testing.T, prog, fixture string, extra ...string) (stdout, stderr string, code int) {
	t.Helper()
	env := []string{"PATH=" + os.Getenv("PATH")}
	if fixture != "" {
		m, err := testutil.ReadEnvFixture(filepath.Join(testutil.RepoRoot(), "detect", "testdata", "launchers", fixture))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range m {
			env = append(env, k+"="+v)
		}
	}
	cmd := exec.Command(prog, "load", "--bundle", "a b.kbundle")
	cmd.Env = append(env, extra...)
	var so, se strings.Builder
	cmd.Stdout, cmd.Stderr = &so, &se
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return so.String(), se.String(), code
}

var all = []string{"kbundle-nompi", "kbundle-openmpi", "kbundle-mpich", "kbundle-mpiabi"}

// TestFront runs the front under real launchers' environments and
// checks which build it replaced itself with, with the arguments
// unchanged (the choice itself is detect.TestChooseBuild's table).
func TestFront(t *testing.T) {
	tests := []struct {
		name    string
		builds  []string
		fixture string
		extra   []string
		want    string // the build run; "" for a refusal
		code    int
		stderr  string
	}{
		{name: "no launcher", builds: all, want: "kbundle-nompi"},
		{name: "one task", builds: all, fixture: "openmpi-np1/rank0.env", want: "kbundle-nompi"},
		{name: "Open MPI mpirun", builds: all, fixture: "openmpi-np4/rank1.env", want: "kbundle-openmpi"},
		{name: "Open MPI 5 mpirun", builds: all, fixture: "openmpi5-np4/rank0.env", want: "kbundle-openmpi"},
		{name: "MPICH Hydra", builds: all, fixture: "mpich-hydra-np4/rank0.env", want: "kbundle-mpich"},
		{name: "Intel MPI", builds: all, fixture: "impi-hydra-np4/rank0.env", want: "kbundle-mpich"},
		{name: "Hydra, standard ABI only", builds: []string{"kbundle-nompi", "kbundle-mpiabi"}, fixture: "mpich5-hydra-np4/rank2.env", want: "kbundle-mpiabi"},
		{name: "srun pmix", builds: all, fixture: "slurm-srun-pmix-n2-openmpi/rank0.env", want: "kbundle-openmpi"},
		{name: "srun pmi2", builds: all, fixture: "slurm-srun-pmi2-n2-mpich/rank0.env", want: "kbundle-mpich"},
		{name: "srun none", builds: all, fixture: "slurm-srun-n2/rank0.env", want: "kbundle-nompi"},
		{name: "Hydra without an MPICH build", builds: []string{"kbundle-nompi", "kbundle-openmpi"}, fixture: "mpich-hydra-np4/rank0.env", want: "kbundle-nompi"},
		{name: "KBUNDLE_BUILD", builds: all, fixture: "openmpi-np4/rank1.env", extra: []string{"KBUNDLE_BUILD=none"}, want: "kbundle-nompi"},
		{name: "KBUNDLE_BUILD without launcher", builds: all, extra: []string{"KBUNDLE_BUILD=mpi-abi"}, want: "kbundle-mpiabi"},
		{name: "KBUNDLE_BUILD empty", builds: all, fixture: "mpich-hydra-np4/rank0.env", extra: []string{"KBUNDLE_BUILD="}, want: "kbundle-mpich"},
		{name: "KBUNDLE_BUILD unknown", builds: all, extra: []string{"KBUNDLE_BUILD=nompi"}, code: 2,
			stderr: "kbundle: KBUNDLE_BUILD=\"nompi\": want none, openmpi, mpich or mpi-abi\n"},
		{name: "KBUNDLE_BUILD not installed", builds: []string{"kbundle-nompi"}, extra: []string{"KBUNDLE_BUILD=openmpi"}, code: 1,
			stderr: "kbundle: KBUNDLE_BUILD=openmpi, but DIR/kbundle-openmpi is not installed\n"},
		{name: "no build", code: 1,
			stderr: "kbundle: kbundle-nompi is not installed beside DIR/kbundle\nkbundle: hint: make build (or make install) puts kbundle-nompi, kbundle-openmpi and kbundle-mpich there\n"},
		{name: "inconsistent launcher", builds: all, extra: []string{"OMPI_COMM_WORLD_SIZE=2", "OMPI_COMM_WORLD_RANK=5"}, want: "kbundle-nompi"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := install(t, tc.builds...)
			out, errOut, code := runFront(t, filepath.Join(dir, "kbundle"), tc.fixture, tc.extra...)
			errOut = strings.ReplaceAll(errOut, dir, "DIR")
			if code != tc.code || errOut != tc.stderr {
				t.Fatalf("exit %d, stderr %q; want %d, %q", code, errOut, tc.code, tc.stderr)
			}
			if tc.want == "" {
				if out != "" {
					t.Errorf("stdout %q on a refusal", out)
				}
				return
			}
			if want := filepath.Join(dir, tc.want) + "|load --bundle a b.kbundle\n"; out != want {
				t.Errorf("ran %q, want %q", out, want)
			}
		})
	}
}

// TestFrontSymlink: a link to the front (~/bin/kbundle -> the
// installation's) still runs the builds beside the front itself.
func TestFrontSymlink(t *testing.T) {
	dir := install(t, all...)
	link := filepath.Join(t.TempDir(), "kbundle")
	if err := os.Symlink(filepath.Join(dir, "kbundle"), link); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runFront(t, link, "mpich-hydra-np4/rank0.env")
	if want := filepath.Join(dir, "kbundle-mpich") + "|load --bundle a b.kbundle\n"; code != 0 || out != want {
		t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
}
