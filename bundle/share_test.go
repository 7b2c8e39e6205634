package bundle

import (
	"errors"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Two real users of one team group (as test/mpi's), made with groupadd
// and useradd, for the findings about another user (issue 26).
const (
	testTeam  = "kbundle-test-team"
	testAlice = "kbundle-test-alice"
	testBob   = "kbundle-test-bob"
)

type testUser struct {
	name     string
	uid, gid int // gid: the primary group's
}

var (
	usersOnce sync.Once
	users     [2]testUser
	teamGID   int
	usersErr  error
)

// teamUsers makes (once) the team group and its two members, alice and
// bob; it skips the test unless it runs as root.
func teamUsers(t *testing.T) (alice, bob testUser, team int) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to make two users")
	}
	usersOnce.Do(func() {
		if _, err := user.LookupGroup(testTeam); err != nil {
			if out, err := exec.Command("groupadd", "--system", testTeam).CombinedOutput(); err != nil {
				usersErr = errors.New("groupadd: " + err.Error() + ": " + string(out))
				return
			}
		}
		g, err := user.LookupGroup(testTeam)
		if err != nil {
			usersErr = err
			return
		}
		teamGID, _ = strconv.Atoi(g.Gid)
		for i, name := range []string{testAlice, testBob} {
			if _, err := user.Lookup(name); err != nil {
				if out, err := exec.Command("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", "-G", testTeam, name).CombinedOutput(); err != nil {
					usersErr = errors.New("useradd: " + err.Error() + ": " + string(out))
					return
				}
			} else if out, err := exec.Command("usermod", "-aG", testTeam, name).CombinedOutput(); err != nil {
				usersErr = errors.New("usermod: " + err.Error() + ": " + string(out))
				return
			}
			u, err := user.Lookup(name)
			if err != nil {
				usersErr = err
				return
			}
			users[i].name = name
			users[i].uid, _ = strconv.Atoi(u.Uid)
			users[i].gid, _ = strconv.Atoi(u.Gid)
		}
	})
	if usersErr != nil {
		t.Fatalf("cannot make the test users: %v", usersErr)
	}
	return users[0], users[1], teamGID
}

// chownAll gives the tree at p (not following symlinks) to uid:gid.
func chownAll(t *testing.T, p string, uid, gid int) {
	t.Helper()
	err := filepath.Walk(p, func(q string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(q, uid, gid)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCleanForUserOthersDir is H6 of the 2026-12-01b review: user bob
// moves into his DEST a directory of alice's that he may rename (it was
// in a group-writable directory) but not empty (its subdirectory is
// read-only to him); root's clean --user bob (a Slurm epilog) must not
// delete it with root's power: it leaves it, names it, and removes
// nothing bob could not.
func TestCleanForUserOthersDir(t *testing.T) {
	alice, bob, team := teamUsers(t)
	dir := t.TempDir()
	dest := installedTree(t, dir, "dest")
	chownAll(t, dest, bob.uid, bob.gid)
	data := filepath.Join(dest, "data")
	os.MkdirAll(filepath.Join(data, "run1"), 0o775)
	os.WriteFile(filepath.Join(data, "run1", "result"), []byte("months of results"), 0o644)
	chownAll(t, data, alice.uid, team)
	os.Chmod(filepath.Join(data, "run1"), 0o555)
	os.Chmod(data, 0o2775)
	res, err := Clean(dest, &CleanOptions{ForUser: true, UID: bob.uid})
	if !errors.Is(err, ErrDestination) || res.Removed || !strings.Contains(err.Error(), `"data"`) && !strings.Contains(err.Error(), "data (") {
		t.Fatalf("Clean(for bob) = %+v, %v; want refused, naming data", res, err)
	}
	if !strings.Contains(err.Error(), testAlice) {
		t.Errorf("the error does not name the directory's owner: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(data, "run1", "result")); err != nil || string(b) != "months of results" {
		t.Fatalf("alice's file was removed or changed: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dest, "k")); err == nil {
		t.Errorf("bob's own file k was not removed")
	}
	// The install record stays with what was left: once the foreign
	// directory is gone, the next clean removes the tree.
	os.Rename(data, filepath.Join(dir, "data"))
	if res, err := Clean(dest, &CleanOptions{ForUser: true, UID: bob.uid}); err != nil || !res.Removed {
		t.Fatalf("Clean(for bob) once alice's directory is gone = %+v, %v; want removed", res, err)
	}
}

// TestRemoveBelowMount is X2 of the 2026-12-01b review: clean refused a
// DEST that is a mount point, but descended into a mount below it (a
// container runtime's --bind onto a path inside the cache) and deleted
// what the mounted file system held. It must leave the mount (and the
// directories holding it) and name it; --force's removeTree too.
func TestRemoveBelowMount(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	for _, kind := range []string{"bind", "tmpfs"} {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			dest := installedTree(t, dir, "dest")
			keep := filepath.Join(dir, "keep")
			os.Mkdir(keep, 0o755)
			sub := filepath.Join(dest, "a", "sub")
			os.MkdirAll(sub, 0o755)
			args := []string{"--bind", keep, sub}
			if kind == "tmpfs" {
				args = []string{"-t", "tmpfs", "tmpfs", sub}
			}
			if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
				t.Skipf("cannot mount here: %v: %s", err, out)
			}
			t.Cleanup(func() { exec.Command("umount", "-l", sub).Run() })
			if err := os.WriteFile(filepath.Join(sub, "precious"), []byte("data"), 0o644); err != nil {
				t.Fatal(err)
			}
			res, err := Clean(dest, nil)
			if !errors.Is(err, ErrDestination) || res.Removed || !strings.Contains(err.Error(), "a/sub") || !strings.Contains(err.Error(), "mount point") {
				t.Fatalf("Clean = %+v, %v; want refused, naming the mount a/sub", res, err)
			}
			if b, err := os.ReadFile(filepath.Join(sub, "precious")); err != nil || string(b) != "data" {
				t.Fatalf("the mounted file was removed: %q, %v", b, err)
			}
			if err := removeTree(dest); err == nil || !strings.Contains(err.Error(), "mount point") {
				t.Fatalf("removeTree = %v; want it to name the mount point", err)
			}
			if _, err := os.Stat(filepath.Join(sub, "precious")); err != nil {
				t.Fatalf("removeTree removed the mounted file: %v", err)
			}
			exec.Command("umount", sub).Run()
			if res, err := Clean(dest, nil); err != nil || !res.Removed {
				t.Fatalf("Clean once unmounted = %+v, %v; want removed (the install record stayed)", res, err)
			}
		})
	}
}
