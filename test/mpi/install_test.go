package mpi

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// makeInstall runs `make install PREFIX=prefix` with the extra make
// arguments and returns make's output.
func makeInstall(t *testing.T, prefix string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", append([]string{"--no-print-directory", "install", "PREFIX=" + prefix}, args...)...)
	cmd.Dir = testutil.RepoRoot()
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make install %v: %v\n%s", args, err, b)
	}
	t.Logf("make install %v: %v", args, time.Since(start).Round(time.Millisecond))
	return string(b)
}

// TestMakeInstall: `make install` without MPICC installs, as `make build`
// makes them, the front kbundle that runs the build matching the MPI it
// runs under and the builds themselves (kbundle-nompi, and one per MPI
// compiler wrapper found, named for the ABI it reports), all of the
// version scripts/dev/version.sh gives, with the man page and the
// completions; under mpirun.openmpi the installed kbundle is the Open MPI
// build, under mpiexec.hydra the MPICH build, without a launcher the
// no-MPI build. With MPICC=none only the no-MPI build is installed beside
// the front, and under a launcher of two tasks its load refuses (exit 2),
// naming the build to install.
func TestMakeInstall(t *testing.T) {
	testutil.NeedMPI(t, testutil.OpenMPI)
	testutil.NeedMPI(t, testutil.MPICH)
	root := testutil.RepoRoot()
	v, err := exec.Command(filepath.Join(root, "scripts", "dev", "version.sh")).Output()
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(v))
	prefix := t.TempDir()
	makeInstall(t, prefix)
	for _, f := range []string{"bin/kbundle", "bin/kbundle-nompi", "bin/kbundle-openmpi", "bin/kbundle-mpich",
		"share/man/man1/kbundle.1", "share/bash-completion/completions/kbundle",
		"share/bash-completion/completions/kbundle-openmpi", "share/zsh/site-functions/_kbundle"} {
		if _, err := os.Stat(filepath.Join(prefix, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	kb := filepath.Join(prefix, "bin", "kbundle")
	head := "kbundle " + version + " ("
	for _, c := range []struct {
		name string
		run  func(argv ...string) (string, string, int)
		np   int
		abi  string
	}{
		{"no launcher", func(argv ...string) (string, string, int) { return testutil.Run(t, testutil.CleanEnv(), argv...) }, 1, "none"},
		{"mpirun.openmpi", func(argv ...string) (string, string, int) {
			return testutil.RunMPI(t, testutil.OpenMPI, 2, nil, argv...)
		}, 2, "openmpi"},
		{"mpiexec.hydra", func(argv ...string) (string, string, int) { return testutil.RunMPI(t, testutil.MPICH, 2, nil, argv...) }, 2, "mpich"},
	} {
		so, se, code := c.run(kb, "version")
		if code != 0 || strings.Count(so, head) != c.np || strings.Count(so, "\nabi: "+c.abi+" ") != c.np {
			t.Errorf("%s: kbundle version: exit %d, want %d × %q… and abi: %s\nstdout:\n%s\nstderr:\n%s", c.name, code, c.np, head, c.abi, so, se)
		}
	}

	// MPICC=none: the front and the no-MPI build alone.
	prefix = t.TempDir()
	makeInstall(t, prefix, "MPICC=none")
	ents, _ := os.ReadDir(filepath.Join(prefix, "bin"))
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if strings.Join(names, " ") != "kbundle kbundle-nompi" {
		t.Errorf("MPICC=none installed %v, want kbundle kbundle-nompi", names)
	}
	bundle := filepath.Join(t.TempDir(), "b.kbundle")
	so, se, code := testutil.RunMPI(t, testutil.OpenMPI, 2, nil, filepath.Join(prefix, "bin", "kbundle"),
		"load", "--bundle", bundle, "--to", filepath.Join(t.TempDir(), "dest"))
	if code != 2 || !strings.Contains(se, "this kbundle is built without MPI but runs under Open MPI's mpirun (2 tasks)") ||
		!strings.Contains(se, "kbundle-openmpi under Open MPI") {
		t.Errorf("MPICC=none under mpirun -np 2: load exit %d, want 2 naming kbundle-openmpi\nstdout:\n%s\nstderr:\n%s", code, so, se)
	}
}
