package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// deadPid returns the pid of a process that has exited and been reaped.
func deadPid(t *testing.T) string {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return strconv.Itoa(c.Process.Pid)
}

// fill gives the tree dir a read-only subdirectory holding a read-only file.
func fill(t *testing.T, dir string) {
	t.Helper()
	sub := filepath.Join(dir, "sub")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sub, "f"), []byte("x"), 0o400); err != nil {
		t.Fatal(err)
	}
	os.Chmod(sub, 0o500)
}

// filledTree makes a temporary tree as Stage does, and fills it.
func filledTree(t *testing.T, dir string) string {
	t.Helper()
	p, _, done, err := newTempDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	done()
	fill(t, p)
	return p
}

// liveTree makes a temporary tree as Stage does; it stays locked (its
// process lives) until the test ends.
func liveTree(t *testing.T, dir string) string {
	t.Helper()
	p := filledTree(t, dir)
	t.Cleanup(func() { dropTemp(p) })
	return p
}

// staleTree makes a temporary tree as Stage does, then lets it go as a
// killed process would: its lock is released, the tree stays.
func staleTree(t *testing.T, dir string) string {
	t.Helper()
	p := filledTree(t, dir)
	tempsMu.Lock()
	temps[p].lock.Close()
	delete(temps, p)
	tempsMu.Unlock()
	return p
}

// staleFile makes a temporary file as Pack does, then lets it go.
func staleFile(t *testing.T, dir string) string {
	t.Helper()
	f, err := newTempFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	untrack(f.Name())
	return f.Name()
}

// renameTo renames p to name in its directory and returns the new path.
func renameTo(t *testing.T, p, name string) string {
	t.Helper()
	q := filepath.Join(filepath.Dir(p), name)
	if err := os.Rename(p, q); err != nil {
		t.Fatal(err)
	}
	return q
}

// TestRemoveStale: only a temporary of this host that carries kbundle's
// proof (its marker or itself, of this user, unlocked) is removed.
func TestRemoveStale(t *testing.T) {
	dead := deadPid(t)
	tag := tempTag + host() + "-" + dead + "-"
	for _, tc := range []struct {
		name   string
		make   func(t *testing.T, dir string) string
		remove bool
	}{
		{"stale tree", staleTree, true},
		{"stale file", staleFile, true},
		{"stale tree with another pid", func(t *testing.T, dir string) string {
			return renameTo(t, staleTree(t, dir), tag+"1")
		}, true},
		{"live tree", liveTree, false},
		{"live file", func(t *testing.T, dir string) string {
			f, err := newTempFile(dir)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close(); dropTemp(f.Name()) })
			return f.Name()
		}, false},
		{"another host's", func(t *testing.T, dir string) string {
			return renameTo(t, staleTree(t, dir), tempTag+"otherhost-"+dead+"-1")
		}, false},
		{"renamed tree without marker (S1)", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, tag+"2")
			os.Mkdir(p, 0o700)
			fill(t, p)
			return p
		}, false},
		{"forged marker text", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, tag+"3")
			os.Mkdir(p, 0o700)
			os.WriteFile(filepath.Join(p, tempMarker), []byte(strings.Repeat("x", len(tempMarkerText))), 0o600)
			return p
		}, false},
		{"marker is a symlink", func(t *testing.T, dir string) string {
			real := staleTree(t, t.TempDir())
			p := filepath.Join(dir, tag+"4")
			os.Mkdir(p, 0o700)
			os.Symlink(filepath.Join(real, tempMarker), filepath.Join(p, tempMarker))
			return p
		}, false},
		{"marker with two links", func(t *testing.T, dir string) string {
			p := renameTo(t, staleTree(t, dir), tag+"5")
			os.Link(filepath.Join(p, tempMarker), filepath.Join(p, "second"))
			return p
		}, false},
		{"file with two links (a layer published, its temporary left)", func(t *testing.T, dir string) string {
			p := staleFile(t, dir)
			os.Link(p, filepath.Join(dir, "mine"))
			t.Cleanup(func() {
				if _, err := os.Stat(filepath.Join(dir, "mine")); err != nil {
					t.Errorf("the other name went too: %v", err)
				}
			})
			return p
		}, true},
		{"symlink to a stale tree", func(t *testing.T, dir string) string {
			p := filepath.Join(dir, tag+"6")
			os.Symlink(staleTree(t, t.TempDir()), p)
			return p
		}, false},
		{"old-style name", func(t *testing.T, dir string) string {
			return renameTo(t, staleTree(t, dir), ".d"+tag+"7")
		}, false},
		{"not a temporary's name", func(t *testing.T, dir string) string {
			return renameTo(t, staleTree(t, dir), "d"+tag+"8")
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p := tc.make(t, dir)
			removed, err := RemoveStale(dir)
			if err != nil {
				t.Fatal(err)
			}
			_, lerr := os.Lstat(p)
			if gone := errors.Is(lerr, os.ErrNotExist); gone != tc.remove || (len(removed) == 1) != tc.remove {
				t.Errorf("removed %v (%s gone: %v), want removed: %v", removed, filepath.Base(p), gone, tc.remove)
			}
		})
	}
}

// TestRemoveStaleDirRenamable (S1): in a directory where someone else
// can rename entries (group-writable, not sticky) nothing is removed; in
// a sticky world-writable one (/tmp) stale temporaries are.
func TestRemoveStaleDirRenamable(t *testing.T) {
	for _, tc := range []struct {
		mode   uint32
		remove bool
	}{{0o700, true}, {0o775, false}, {0o757, false}, {0o1777, true}} {
		t.Run(fmt.Sprintf("%04o", tc.mode), func(t *testing.T) {
			dir := t.TempDir()
			p := staleTree(t, dir)
			if err := unix.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			removed, err := RemoveStale(dir)
			if tc.remove != (len(removed) == 1) || tc.remove != (err == nil) {
				t.Fatalf("removed %v, err %v; want removed: %v", removed, err, tc.remove)
			}
			if !tc.remove && !errors.Is(err, ErrUntrusted) {
				t.Errorf("err %v, want ErrUntrusted", err)
			}
			if _, err := os.Lstat(p); tc.remove == (err == nil) {
				t.Errorf("%s still there: %v", p, err == nil)
			}
		})
	}
}

// TestStaleCleanupKeepsRenamedTree (S1, the review's reproducer): a tree
// of the user (with a read-only subtree) renamed into a stale temporary's
// name, by whoever can rename entries in the directory, survives the
// user's next pack into that directory and extraction into it (accepted
// through KBUNDLE_TRUSTED_GROUPS).
func TestStaleCleanupKeepsRenamedTree(t *testing.T) {
	rc, src := openPacked(t)
	for _, tc := range []struct {
		name string
		mode uint32
		run  func(t *testing.T, dir string) error
	}{
		{"pack", 0o755, func(t *testing.T, dir string) error {
			_, err := Pack(context.Background(), src, filepath.Join(dir, "victim.kbundle"), &PackOptions{Host: fixedHost})
			return err
		}},
		{"pack group-writable", 0o2775, func(t *testing.T, dir string) error {
			_, err := Pack(context.Background(), src, filepath.Join(dir, "victim.kbundle"), &PackOptions{Host: fixedHost})
			return err
		}},
		{"extract trusted group", 0o2775, func(t *testing.T, dir string) error {
			pol := &TrustPolicy{Groups: []uint32{uint32(os.Getgid())}}
			_, err := rc.Extract(context.Background(), filepath.Join(dir, "dest"), &ExtractOptions{Trust: pol})
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			res := filepath.Join(dir, "results")
			os.MkdirAll(filepath.Join(res, "run1"), 0o700)
			os.WriteFile(filepath.Join(res, "run1", "data"), []byte("months of results"), 0o644)
			os.Chmod(filepath.Join(res, "run1"), 0o555)
			t.Cleanup(func() { removeTree(filepath.Join(dir, tempTag+host()+"-4194000-1")) })
			renameTo(t, res, tempTag+host()+"-4194000-1")
			if err := unix.Chmod(dir, tc.mode); err != nil {
				t.Fatal(err)
			}
			if err := tc.run(t, dir); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, tempTag+host()+"-4194000-1", "run1", "data"))
			if string(b) != "months of results" {
				t.Fatalf("the renamed tree was removed: %v", err)
			}
		})
	}
}

// TestRemoveStaleLiveInOtherNamespace (S5): a live temporary whose name
// holds a pid that is dead here (its process runs in another PID
// namespace) is kept: liveness is its lock, not its pid.
func TestRemoveStaleLiveInOtherNamespace(t *testing.T) {
	dir := t.TempDir()
	p := liveTree(t, dir)
	q := filepath.Join(dir, tempTag+host()+"-"+deadPid(t)+"-1")
	tempsMu.Lock()
	err := os.Rename(p, q)
	temps[q] = temps[p]
	delete(temps, p)
	tempsMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dropTemp(q) })
	if removed, err := RemoveStale(dir); len(removed) != 0 || err != nil {
		t.Fatalf("removed %v, %v", removed, err)
	}
	if _, err := os.Stat(filepath.Join(q, "sub", "f")); err != nil {
		t.Fatal(err)
	}
}

// TestRemoveStaleUnshare (S5, the review's reproducer): RemoveStale run in
// a new PID namespace (where this process's pid does not exist) keeps
// this process's live temporary tree, and removes a stale one.
func TestRemoveStaleUnshare(t *testing.T) {
	if dir := os.Getenv("KBUNDLE_TEST_STALE_DIR"); dir != "" {
		removed, err := RemoveStale(dir)
		fmt.Printf("removed %d %v\n", len(removed), err)
		return
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare")
	}
	dir := t.TempDir()
	os.Chmod(dir, 0o755)
	live := liveTree(t, dir)
	stale := staleTree(t, dir)
	cmd := exec.Command(unshare, "--pid", "--fork", "--mount-proc", os.Args[0], "-test.run=^TestRemoveStaleUnshare$")
	cmd.Env = append(os.Environ(), "KBUNDLE_TEST_STALE_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Skipf("cannot make a PID namespace: %v: %s", err, out)
	}
	if !strings.Contains(string(out), "removed 1 <nil>") {
		t.Errorf("in the new namespace: %s", out)
	}
	if _, err := os.Stat(filepath.Join(live, "sub", "f")); err != nil {
		t.Errorf("live tree removed from another PID namespace: %v", err)
	}
	if _, err := os.Lstat(stale); err == nil {
		t.Errorf("stale tree kept")
	}
}

// TestRemoveStaleCost (V2): other users' temporary-looking entries cost no
// probe beyond one fstatat; a run examines at most maxStaleCandidates
// names and the next one gets the rest.
func TestRemoveStaleCost(t *testing.T) {
	t.Run("others' entries", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown")
		}
		dir := t.TempDir()
		unix.Chmod(dir, 0o1777)
		for i := range 1500 {
			p := filepath.Join(dir, fmt.Sprintf("%s%s-1-%d", tempTag, host(), i))
			if err := os.WriteFile(p, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			os.Lchown(p, 65534, 65534)
		}
		before := staleProbes.Load()
		removed, err := RemoveStale(dir)
		if len(removed) != 0 || err != nil {
			t.Fatalf("removed %d, %v", len(removed), err)
		}
		if n := staleProbes.Load() - before; n != 0 {
			t.Errorf("%d probes for other users' entries", n)
		}
	})
	t.Run("capped", func(t *testing.T) {
		dir := t.TempDir()
		n := maxStaleCandidates + 100
		for i := range n {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%s%s-1-%d", tempTag, host(), i)), nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		first, err := RemoveStale(dir)
		if err != nil || len(first) != maxStaleCandidates {
			t.Fatalf("first run removed %d (%v), want %d", len(first), err, maxStaleCandidates)
		}
		second, err := RemoveStale(dir)
		if err != nil || len(second) != 100 {
			t.Fatalf("second run removed %d (%v), want 100", len(second), err)
		}
	})
}

// resetClosing undoes RemoveTemps's "this process is exiting", for the
// tests that call it.
func resetClosing(t *testing.T) {
	t.Cleanup(func() {
		tempsMu.Lock()
		closing = false
		tempsMu.Unlock()
	})
}

// tempsIn lists the temporaries in dir.
func tempsIn(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, tempTag+"*"))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// TestSecRemoveTempsRacesInstall (S7b, the review's white-box test):
// RemoveTemps (a signal, a timeout) started just before Install: Install
// either fails with ErrExiting, DEST absent, or installs the whole tree;
// no temporary is left.
func TestSecRemoveTempsRacesInstall(t *testing.T) {
	resetClosing(t)
	src := t.TempDir()
	for i := 0; i < 1000; i++ {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), []byte("x"), 0o644)
	}
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	bad := 0
	for it := 0; it < 10; it++ {
		tempsMu.Lock()
		closing = false
		tempsMu.Unlock()
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		s, err := rc.Stage(context.Background(), dest, nil)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); RemoveTemps() }() // the signal or the timeout
		time.Sleep(time.Millisecond)                   // ... came just before the install
		ierr := s.Install()
		wg.Wait()
		names, derr := os.ReadDir(dest)
		switch {
		case ierr == nil && (derr != nil || len(names) != 1001):
			bad++
			t.Logf("Install returned nil; DEST holds %d of 1001 entries (%v)", len(names), derr)
		case ierr != nil && (!errors.Is(ierr, ErrExiting) || !errors.Is(derr, os.ErrNotExist)):
			bad++
			t.Logf("Install: %v; DEST: %d entries, %v", ierr, len(names), derr)
		}
		if left := tempsIn(t, parent); len(left) != 0 {
			bad++
			t.Logf("left: %v", left)
		}
	}
	if bad > 0 {
		t.Errorf("%d bad outcomes in 10 runs", bad)
	}
}

// TestRemoveTempsDuringExtraction (S7a): RemoveTemps while the workers
// still write stops them and leaves no temporary; Stage fails.
func TestRemoveTempsDuringExtraction(t *testing.T) {
	resetClosing(t)
	src := t.TempDir()
	for i := 0; i < 200; i++ {
		os.WriteFile(filepath.Join(src, fmt.Sprintf("f%04d", i)), []byte(strings.Repeat(strconv.Itoa(i), 20000)), 0o644)
	}
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	parent := t.TempDir()
	started := make(chan struct{})
	var once sync.Once
	var s *Staged
	var serr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		s, serr = rc.Stage(context.Background(), filepath.Join(parent, "dest"), &ExtractOptions{Jobs: 4,
			Progress: func(done, total int64) {
				if done > 0 {
					once.Do(func() { close(started) })
				}
			}})
	}()
	<-started
	RemoveTemps()
	wg.Wait()
	if serr == nil { // it had finished: the install must fail
		t.Log("Stage had finished")
		if err := s.Install(); !errors.Is(err, ErrExiting) {
			t.Errorf("Install after RemoveTemps: %v, want ErrExiting", err)
		}
	}
	if left := tempsIn(t, parent); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
	if _, err := os.Lstat(filepath.Join(parent, "dest")); err == nil {
		t.Errorf("dest exists")
	}
	if _, err := rc.Stage(context.Background(), filepath.Join(parent, "dest2"), nil); !errors.Is(err, ErrExiting) {
		t.Errorf("Stage after RemoveTemps: %v, want ErrExiting", err)
	}
}

// TestLongNames (S12): a DEST or bundle name of 250 bytes (the file name
// limit is 255) works: temporaries do not carry it.
func TestLongNames(t *testing.T) {
	rc, src := openPacked(t)
	long := strings.Repeat("x", 250)
	dir := t.TempDir()
	if _, err := rc.Extract(context.Background(), filepath.Join(dir, long), nil); err != nil {
		t.Fatal(err)
	}
	if _, err := Pack(context.Background(), src, filepath.Join(dir, long[:240]+".kbundle"), &PackOptions{Host: fixedHost}); err != nil {
		t.Fatal(err)
	}
	if left := tempsIn(t, dir); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

// TestClaimDir: a claimed destination is removed by ReleaseClaim and by
// RemoveTemps (a signal, a timeout) while still empty, and kept once a
// tree is in it; after RemoveTemps nothing more can be claimed.
func TestClaimDir(t *testing.T) {
	resetClosing(t)
	dir := t.TempDir()
	released, empty, full := filepath.Join(dir, "released"), filepath.Join(dir, "empty"), filepath.Join(dir, "full")
	for _, d := range []string{released, empty, full} {
		if err := ClaimDir(d); err != nil {
			t.Fatal(err)
		}
	}
	if fi, err := os.Stat(empty); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("claimed %s: %v %v, want a 0700 directory", empty, fi, err)
	}
	if err := ClaimDir(empty); !errors.Is(err, fs.ErrExist) {
		t.Errorf("claiming %s twice: %v, want ErrExist", empty, err)
	}
	ReleaseClaim(released)
	os.WriteFile(filepath.Join(full, InstalledMarker), nil, 0o600)
	RemoveTemps()
	for d, want := range map[string]bool{released: false, empty: false, full: true} {
		if _, err := os.Stat(d); (err == nil) != want {
			t.Errorf("%s: exists %v, want %v", d, err == nil, want)
		}
	}
	if err := ClaimDir(filepath.Join(dir, "late")); !errors.Is(err, ErrExiting) {
		t.Errorf("ClaimDir after RemoveTemps: %v, want ErrExiting", err)
	}
}

// TestTempTreeBornWithProof: a temporary tree takes its temporary name
// only with its marker complete and locked, so a process killed at any
// point leaves either such a tree (removed by the next run) or an
// unfinished one (newTag): empty, or holding only its marker, which
// RemoveStale removes once it is older than unfinishedAge; a younger one
// (perhaps a live process's) and one holding anything else are kept.
func TestTempTreeBornWithProof(t *testing.T) {
	dir := t.TempDir()
	p := liveTree(t, dir)
	if !strings.HasPrefix(filepath.Base(p), tempTag) {
		t.Fatalf("temporary %s", p)
	}
	if fi, err := os.Stat(filepath.Join(p, tempMarker)); err != nil || fi.Size() != int64(len(tempMarkerText)) {
		t.Fatalf("marker of %s: %v %v", p, fi, err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, newTag+"*")); len(left) != 0 {
		t.Fatalf("unfinished trees left: %v", left)
	}
	unfinished := func(name string, files ...string) string {
		d := filepath.Join(dir, newTag+host()+"-1-"+name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			os.WriteFile(filepath.Join(d, f), nil, 0o600)
		}
		return d
	}
	empty, marker, data := unfinished("1"), unfinished("2", tempMarker), unfinished("3", tempMarker, "data")
	defer func(old time.Duration) { unfinishedAge = old }(unfinishedAge)
	unfinishedAge = time.Hour
	if removed, _ := RemoveStale(dir); len(removed) != 0 {
		t.Errorf("removed %v: unfinished trees younger than unfinishedAge may be a live process's", removed)
	}
	unfinishedAge = 0
	removed, err := RemoveStale(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{empty, marker}; !slices.Equal(removed, want) {
		t.Errorf("removed %v, want %v (not %s, which holds data, nor the live %s)", removed, want, data, p)
	}
	if _, err := os.Stat(filepath.Join(data, "data")); err != nil {
		t.Errorf("an unfinished-looking tree holding data was touched: %v", err)
	}
}
