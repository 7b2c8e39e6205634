package mpi

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
)

// otherUID returns the uid of a user other than the current one,
// creating kbundle-test-other with useradd when running as root.
func otherUID(t *testing.T) int {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to give a file to another user")
	}
	const name = "kbundle-test-other"
	if _, err := user.Lookup(name); err != nil {
		if out, err := exec.Command("useradd", "--system", "--no-create-home", name).CombinedOutput(); err != nil {
			t.Fatalf("useradd: %v\n%s", err, out)
		}
	}
	u, err := user.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	return uid
}

// keepGoing stops Open MPI's mpirun from killing the other ranks as soon
// as one exits non-zero, so that each rank's own exit status is seen.
// (Open MPI 4.1's ORTE and 5.0's PRRTE name the setting differently.)
var keepGoing = []string{"OMPI_MCA_orte_abort_on_non_zero_status=0", "PRTE_MCA_state_base_error_non_zero_exit=0"}

type failCase struct {
	name   string
	setup  func(t *testing.T, file, dest string) (args []string)
	code   int
	reason string
}

var failCases = []failCase{
	{"missing", func(t *testing.T, file, dest string) []string {
		os.Remove(file)
		return []string{"--bundle", file}
	}, 3, "no such file or directory"},
	{"bit flipped", func(t *testing.T, file, dest string) []string {
		fi, _ := os.Stat(file)
		tree.Flip(t, file, fi.Size()/2)
		return []string{"--bundle", file}
	}, 3, "no usable bundle"},
	{"truncated", func(t *testing.T, file, dest string) []string {
		fi, _ := os.Stat(file)
		os.Truncate(file, fi.Size()-100)
		return []string{"--bundle", file}
	}, 3, "no usable bundle"},
	{"group-writable", func(t *testing.T, file, dest string) []string {
		os.Chmod(file, 0o664)
		return []string{"--bundle", file}
	}, 3, "write it; run: chmod g-w"},
	{"world-writable", func(t *testing.T, file, dest string) []string {
		os.Chmod(file, 0o606)
		return []string{"--bundle", file}
	}, 3, "lets others write it"},
	{"owned by another user", func(t *testing.T, file, dest string) []string {
		if err := os.Chown(file, otherUID(t), -1); err != nil {
			t.Fatal(err)
		}
		return []string{"--bundle", file}
	}, 3, "not by you"},
	{"directory writable by others", func(t *testing.T, file, dest string) []string {
		os.Chmod(filepath.Dir(file), 0o777)
		return []string{"--dir", filepath.Dir(file)}
	}, 3, "directory mode 0777"},
	{"DEST not writable", func(t *testing.T, file, dest string) []string {
		// As root no mode stops a write: make DEST's parent a file.
		parent := filepath.Dir(dest)
		os.RemoveAll(parent)
		os.WriteFile(parent, []byte("in the way"), 0o400)
		return []string{"--bundle", file}
	}, 1, "not a directory"},
}

// TestLoadFailures is the failure matrix: every rank exits with the same
// status, rank 0's reason is printed once, nothing is left at DEST, and
// the launch ends within testutil.LaunchTimeout.
func TestLoadFailures(t *testing.T) {
	tree := makeTree(t)
	for _, v := range testutil.MPIVariants {
		for _, c := range failCases {
			np := 2
			if c.name == "missing" || c.name == "bit flipped" {
				np = 4
			}
			t.Run(fmt.Sprintf("%s/%s/np%d", v, c.name, np), func(t *testing.T) {
				kb := testutil.Kbundle(t, v)
				file := packTree(t, tree)
				dest := filepath.Join(t.TempDir(), "node", "dest")
				os.MkdirAll(filepath.Dir(dest), 0o700)
				args := c.setup(t, file, dest)
				wrap, codes := rankWrapper(t)
				argv := append([]string{wrap, kb, "load", "--to", dest}, args...)
				stdout, stderr, code := testutil.RunMPI(t, v, np, keepGoing, argv...)
				checkFailure(t, c, np, codes, dest, stdout, stderr, code)
			})
		}
	}
}

func checkFailure(t *testing.T, c failCase, np int, codes, dest, stdout, stderr string, code int) {
	t.Helper()
	_ = code // with keepGoing, Open MPI's mpirun exits 0; the ranks' own statuses count
	wantExits(t, codes, np, c.code, stderr)
	if n := strings.Count(stderr, c.reason); n != 1 {
		t.Errorf("reason %q printed %d times\nstderr:\n%s", c.reason, n, stderr)
	}
	if n := strings.Count(stderr, "kbundle: "); n < 1 {
		t.Errorf("no kbundle message\nstderr:\n%s", stderr)
	}
	if stdout != "" {
		t.Errorf("stdout %q on failure", stdout)
	}
	// Nothing half-written: no DEST, no temporary sibling.
	if _, err := os.Lstat(dest); err == nil {
		t.Errorf("DEST %s exists after a failed load", dest)
	}
	if ents, err := os.ReadDir(filepath.Dir(dest)); err == nil && len(ents) > 0 {
		t.Errorf("left beside DEST: %v", ents)
	}
}

// TestLoadWithoutMPIUnderLauncher: a kbundle built without MPI, started
// by mpirun with several tasks and --per-task, says so once; each task
// reads the bundle itself; all exit alike, with a good bundle and with a
// missing one. (Without --per-task it refuses: TestLoadMismatchRefused.)
func TestLoadWithoutMPIUnderLauncher(t *testing.T) {
	tree := makeTree(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	testutil.NeedMPI(t, testutil.OpenMPI)
	const np = 3
	t.Run("ok", func(t *testing.T) {
		file := packTree(t, tree)
		dest := filepath.Join(t.TempDir(), "dest")
		wrap, codes := rankWrapper(t)
		stdout, stderr, code := testutil.RunMPI(t, testutil.OpenMPI, np, nil, wrap, kb, "load", "--per-task", "--bundle", file, "--to", dest)
		if code != 0 {
			t.Fatalf("exit %d\nstderr:\n%s", code, stderr)
		}
		for r, got := range rankCodes(t, codes, np) {
			if got != 0 {
				t.Errorf("rank %d exited %d", r, got)
			}
		}
		if n := strings.Count(stderr, "built without MPI"); n != 1 {
			t.Errorf("warning printed %d times\nstderr:\n%s", n, stderr)
		}
		if stdout != dest+"\n" {
			t.Errorf("stdout %q", stdout)
		}
		sameTrees(t, tree, dest)
	})
	t.Run("missing", func(t *testing.T) {
		file := packTree(t, tree)
		os.Remove(file)
		dest := filepath.Join(t.TempDir(), "node", "dest")
		os.MkdirAll(filepath.Dir(dest), 0o700)
		wrap, codes := rankWrapper(t)
		stdout, stderr, code := testutil.RunMPI(t, testutil.OpenMPI, np, keepGoing, wrap, kb, "load", "--per-task", "--bundle", file, "--to", dest)
		checkFailure(t, failCase{code: 3, reason: "no such file or directory"}, np, codes, dest, stdout, stderr, code)
	})
}
