package bundle

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func openPacked(t *testing.T) (*ReadCloser, string) {
	t.Helper()
	src := makeTree(t, 7, 60)
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc, src
}

// TestStageInstallAbort: the two-phase extraction used for all-or-nothing
// loads: nothing at dest before Install, the old tree back after an Abort
// of an installed replacement, nothing at all after an Abort of a fresh one.
func TestStageInstallAbort(t *testing.T) {
	rc, src := openPacked(t)
	ctx := context.Background()
	t.Run("abort before install", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "made", "here")
		dest := filepath.Join(parent, "dest")
		s, err := rc.Stage(ctx, dest, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dest); !os.IsNotExist(err) {
			t.Fatalf("dest exists before Install: %v", err)
		}
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(parent))); !os.IsNotExist(err) {
			t.Fatalf("parents Stage made are still there: %v", err)
		}
	})
	t.Run("install then abort", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		s, err := rc.Stage(ctx, dest, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(); err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dest)
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t, parent)
	})
	// replaceInstalled stages the bundle over a tree kbundle installed
	// earlier (with Force) and installs it.
	replaceInstalled := func(t *testing.T) (parent, dest string, s *Staged) {
		t.Helper()
		parent = t.TempDir()
		dest = filepath.Join(parent, "dest")
		installedBefore(t, dest, 0o755)
		s, err := rc.Stage(ctx, dest, &ExtractOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(); err != nil {
			t.Fatal(err)
		}
		return parent, dest, s
	}
	t.Run("replace then abort restores the old tree", func(t *testing.T) {
		parent, dest, s := replaceInstalled(t)
		sameTree(t, src, dest)
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dest, "old")); err != nil || string(b) != "old" {
			t.Fatalf("old tree not restored: %q %v", b, err)
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("replace then commit", func(t *testing.T) {
		parent, dest, s := replaceInstalled(t)
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dest)
		noLeftovers(t, parent, "dest")
	})
}

// TestRemoveStale: temporaries of a dead process on this host are removed;
// a live process's, another host's and other names are kept.
func TestRemoveStale(t *testing.T) {
	dir := t.TempDir()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	deadPid := strconv.Itoa(dead.Process.Pid)
	live := strconv.Itoa(os.Getppid())
	names := map[string]bool{ // name → must be removed
		".d" + tempTag + host() + "-" + deadPid + "-123":        true,
		".f.kbundle" + tempTag + host() + "-" + deadPid + "-9":  true,
		".d" + tempTag + host() + "-" + live + "-123":           false,
		".d" + tempTag + "otherhost-" + deadPid + "-123":        false,
		"d" + tempTag + host() + "-" + deadPid + "-123":         false, // not hidden: not ours
		".d.kbundle-tmp-" + host() + "-notapid-1":               false,
		".d" + tempTag + host() + "-" + deadPid + "-123-nested": false, // random part has no '-'
	}
	for n := range names {
		p := filepath.Join(dir, n)
		os.MkdirAll(filepath.Join(p, "sub"), 0o700)
		os.WriteFile(filepath.Join(p, "sub", "f"), []byte("x"), 0o400)
		os.Chmod(filepath.Join(p, "sub"), 0o500)
	}
	removed, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(removed) != 2 {
		t.Errorf("removed %v", removed)
	}
	for n, gone := range names {
		_, err := os.Lstat(filepath.Join(dir, n))
		if gone != os.IsNotExist(err) {
			t.Errorf("%s: removed=%v, want %v", n, os.IsNotExist(err), gone)
		}
	}
}

// TestProgressCumulative: Extract's and Verify's progress reach the total
// exactly once and never go back.
func TestProgressCumulative(t *testing.T) {
	rc, _ := openPacked(t)
	check := func(t *testing.T, run func(func(done, total int64))) {
		var last, full int64
		var calls int
		run(func(done, total int64) {
			calls++
			if done < last || done > total {
				t.Fatalf("progress %d of %d after %d", done, total, last)
			}
			if done == total {
				full++
			}
			last = done
		})
		if calls == 0 || full != 1 {
			t.Fatalf("%d calls, %d at 100%%", calls, full)
		}
	}
	t.Run("extract", func(t *testing.T) {
		check(t, func(p func(int64, int64)) {
			if _, err := rc.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), &ExtractOptions{Jobs: 4, Progress: p}); err != nil {
				t.Fatal(err)
			}
		})
	})
	for _, deep := range []bool{false, true} {
		t.Run("verify deep="+strconv.FormatBool(deep), func(t *testing.T) {
			check(t, func(p func(int64, int64)) {
				if err := rc.Verify(context.Background(), &VerifyOptions{Deep: deep, Jobs: 4, Progress: p}); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}

// TestRemoveStaleZombie: a zombie (killed, not yet reaped) owns nothing:
// its temporaries are removed.
func TestRemoveStaleZombie(t *testing.T) {
	z := exec.Command("true")
	if err := z.Start(); err != nil {
		t.Fatal(err)
	}
	defer z.Wait()
	pid := z.Process.Pid
	for range 200 { // until it has exited (a zombie: not waited for yet)
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if strings.Contains(string(b), ") Z ") {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if alive(pid) {
		t.Fatal("a zombie counts as alive")
	}
	if !alive(os.Getpid()) {
		t.Fatal("this process counts as dead")
	}
}
