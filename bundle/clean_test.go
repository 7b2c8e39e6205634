package bundle

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// TestRemoveInstalled: only a tree kbundle installed is removed; the
// user's own directory, an empty one, a symlink and a file are refused
// with ErrDestination and left as they were; a missing DEST is nothing to
// do.
func TestRemoveInstalled(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "k"), []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	dir := t.TempDir()
	installed := func(name string) string {
		p := filepath.Join(dir, name)
		if _, err := rc.Extract(context.Background(), p, nil); err != nil {
			t.Fatal(err)
		}
		return p
	}
	mine := filepath.Join(dir, "mine")
	os.Mkdir(mine, 0o755)
	os.WriteFile(filepath.Join(mine, "thesis.tex"), []byte("years"), 0o644)
	empty := filepath.Join(dir, "empty")
	os.Mkdir(empty, 0o755)
	link := filepath.Join(dir, "link")
	os.Symlink(installed("real"), link)
	file := filepath.Join(dir, "file")
	os.WriteFile(file, nil, 0o644)

	for _, c := range []struct {
		name, dest string
		removed    bool
		refused    bool
	}{
		{"installed", installed("dest"), true, false},
		{"missing", filepath.Join(dir, "nothere"), false, false},
		{"user's directory", mine, false, true},
		{"empty directory", empty, false, true},
		{"symlink to an installed tree", link, false, true},
		{"file", file, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			removed, err := RemoveInstalled(c.dest)
			if removed != c.removed || (err != nil) != c.refused || (err != nil && !errors.Is(err, ErrDestination)) {
				t.Fatalf("RemoveInstalled(%s) = %v, %v; want removed %v, refused (ErrDestination) %v", c.dest, removed, err, c.removed, c.refused)
			}
			if _, serr := os.Lstat(c.dest); c.refused && serr != nil {
				t.Errorf("%s was refused but is gone", c.dest)
			} else if c.removed && serr == nil {
				t.Errorf("%s still exists", c.dest)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(mine, "thesis.tex")); err != nil {
		t.Errorf("the user's file is gone: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "real", InstalledMarker)); err != nil {
		t.Errorf("the tree behind the symlink was touched: %v", err)
	}
}

// installedTree extracts a small bundle to dir/name and returns its path.
func installedTree(t *testing.T, dir, name string) string {
	t.Helper()
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "k"), []byte("kernel"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	p := filepath.Join(dir, name)
	if _, err := rc.Extract(context.Background(), p, &ExtractOptions{Record: RecordInfo{Job: "j-" + name}}); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestCleanInUse: a tree a live load is installing (a locked temporary
// beside it naming it, or naming no destination: an older kbundle's) is
// refused and left; a live temporary of another DEST, or a stale one of
// this DEST, does not keep it.
func TestCleanInUse(t *testing.T) {
	for _, c := range []struct {
		name    string
		temp    func(t *testing.T, dir, dest string)
		refused bool
	}{
		{"live temporary of this DEST", func(t *testing.T, dir, dest string) { holdTemp(t, dir, dest) }, true},
		{"live temporary naming no DEST", func(t *testing.T, dir, dest string) { holdTemp(t, dir, "") }, true},
		{"live temporary of another DEST", func(t *testing.T, dir, dest string) { holdTemp(t, dir, filepath.Join(dir, "other")) }, false},
		{"stale temporary of this DEST", func(t *testing.T, dir, dest string) {
			p, _, done, err := newTempDirFor(context.Background(), dir, dest)
			if err != nil {
				t.Fatal(err)
			}
			done()
			tempsMu.Lock()
			unlockTree(p, temps[p]) // the process "died": no lock; write the marker back, unlocked
			delete(temps, p)
			tempsMu.Unlock()
			if err := os.WriteFile(filepath.Join(p, tempMarker), []byte(tempMarkerFor(dest)), 0o600); err != nil {
				t.Fatal(err)
			}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			dest := installedTree(t, dir, "dest")
			c.temp(t, dir, dest)
			res, err := Clean(dest, nil)
			if c.refused {
				if !errors.Is(err, ErrDestination) || res.Removed || !strings.Contains(err.Error(), "in use") {
					t.Fatalf("Clean = %+v, %v; want refused as in use", res, err)
				}
				if _, err := os.Stat(filepath.Join(dest, "k")); err != nil {
					t.Errorf("the tree in use was touched: %v", err)
				}
				return
			}
			if err != nil || !res.Removed {
				t.Fatalf("Clean = %+v, %v; want removed", res, err)
			}
		})
	}
}

// holdTemp makes a temporary tree in dir, as Stage does for dest, locked
// by this (live) process until the test ends.
func holdTemp(t *testing.T, dir, dest string) {
	p, _, done, err := newTempDirFor(context.Background(), dir, dest)
	if err != nil {
		t.Fatal(err)
	}
	done()
	t.Cleanup(func() { dropTemp(p) })
}

// TestCleanMountPoint: a DEST that is a mount point (another file system,
// or a bind mount of the same one) is refused and left, even holding
// kbundle's marker. Needs root and mount(8); skipped otherwise.
func TestCleanMountPoint(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting needs root")
	}
	dir := t.TempDir()
	mount := func(t *testing.T, args ...string) {
		t.Helper()
		if out, err := exec.Command("mount", args...).CombinedOutput(); err != nil {
			t.Skipf("cannot mount here: %v: %s", err, out)
		}
		t.Cleanup(func() { exec.Command("umount", args[len(args)-1]).Run() })
	}
	t.Run("tmpfs", func(t *testing.T) {
		m := filepath.Join(dir, "tmpfs")
		os.Mkdir(m, 0o700)
		mount(t, "-t", "tmpfs", "-o", "mode=0700", "tmpfs", m)
		if err := os.WriteFile(filepath.Join(m, InstalledMarker), []byte(markerText+"0\n"), markerPerm); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(m, "k"), []byte("kernel"), 0o600)
		if res, err := Clean(m, nil); !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "mount point") || res.Removed {
			t.Fatalf("Clean = %+v, %v; want refused as a mount point", res, err)
		}
		if _, err := os.Stat(filepath.Join(m, "k")); err != nil {
			t.Errorf("the mounted tree was touched: %v", err)
		}
	})
	t.Run("bind mount", func(t *testing.T) {
		real := installedTree(t, dir, "real")
		b := filepath.Join(dir, "bind")
		os.Mkdir(b, 0o700)
		mount(t, "--bind", real, b)
		if res, err := Clean(b, nil); !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "mount point") || res.Removed {
			t.Fatalf("Clean = %+v, %v; want refused as a mount point", res, err)
		}
		if _, err := os.Stat(filepath.Join(real, "k")); err != nil {
			t.Errorf("the tree behind the bind mount was touched: %v", err)
		}
	})
}

// TestCleanOwner: another user's tree is refused; root acting for that
// user (ForUser) removes it, and then refuses the caller's own tree.
// Keep leaves a tree with its reason.
func TestCleanOwner(t *testing.T) {
	dir := t.TempDir()
	kept := installedTree(t, dir, "kept")
	res, err := Clean(kept, &CleanOptions{Keep: func(rec *InstallRecord) string {
		if rec == nil || rec.Job != "j-kept" {
			t.Errorf("Keep got record %+v", rec)
		}
		return "not this one"
	}})
	if err != nil || res.Removed || res.Kept != "not this one" {
		t.Fatalf("Clean with Keep = %+v, %v", res, err)
	}
	if _, err := os.Stat(filepath.Join(kept, "k")); err != nil {
		t.Errorf("the kept tree was touched: %v", err)
	}
	if os.Geteuid() != 0 {
		t.Skip("giving a tree to another user needs root")
	}
	const other = 65534
	theirs := installedTree(t, dir, "theirs")
	for _, p := range []string{theirs, filepath.Join(theirs, InstalledMarker)} {
		if err := os.Lchown(p, other, other); err != nil {
			t.Fatal(err)
		}
	}
	if res, err := Clean(theirs, nil); !errors.Is(err, ErrDestination) || res.Removed {
		t.Fatalf("Clean(another user's tree) = %+v, %v; want refused", res, err)
	}
	if _, err := os.Stat(filepath.Join(theirs, "k")); err != nil {
		t.Errorf("another user's tree was touched: %v", err)
	}
	mine := installedTree(t, dir, "mine")
	as := &CleanOptions{ForUser: true, UID: other}
	if res, err := Clean(mine, as); !errors.Is(err, ErrDestination) || res.Removed {
		t.Fatalf("Clean(root's tree, for uid %d) = %+v, %v; want refused", other, res, err)
	}
	if res, err := Clean(theirs, as); err != nil || !res.Removed {
		t.Fatalf("Clean(their tree, for uid %d) = %+v, %v; want removed", other, res, err)
	}
}

// TestCleanConcurrent: cleans of one tree at once (a clean on every task
// of a node) remove it once; the others find nothing to do, none fails
// (a review of 2026-12-01b's loop under Hydra: 15 rounds in 20 failed).
func TestCleanConcurrent(t *testing.T) {
	for round := 0; round < 10; round++ {
		src := t.TempDir()
		for d := 0; d < 30; d++ {
			for f := 0; f < 10; f++ {
				p := filepath.Join(src, fmt.Sprintf("d%d", d), fmt.Sprintf("f%d", f))
				os.MkdirAll(filepath.Dir(p), 0o755)
				os.WriteFile(p, []byte("kernel"), 0o644)
			}
		}
		out, _ := pack(t, src, nil)
		rc, err := Open(out, nil)
		if err != nil {
			t.Fatal(err)
		}
		dest := filepath.Join(t.TempDir(), "dest")
		if _, err := rc.Extract(context.Background(), dest, nil); err != nil {
			t.Fatal(err)
		}
		rc.Close()
		const n = 4
		res := make([]CleanResult, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() { res[i], errs[i] = Clean(dest, nil) })
		}
		wg.Wait()
		removed := 0
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d: clean %d: %v", round, i, errs[i])
			}
			if res[i].Removed {
				removed++
			} else if !res[i].Missing {
				t.Errorf("round %d: clean %d: %+v, want removed or missing", round, i, res[i])
			}
		}
		if _, err := os.Lstat(dest); removed != 1 || !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("round %d: %d removed it; %v", round, removed, err)
		}
	}
}

// TestHarvestRecord: WriteHarvestRecord writes only into a tree kbundle
// installed, privately; ReadHarvestRecord refuses a symlink, a FIFO and
// what is not a record, and reads none as fs.ErrNotExist.
func TestHarvestRecord(t *testing.T) {
	dir := t.TempDir()
	dest := installedTree(t, dir, "dest")
	if _, err := ReadHarvestRecord(dest); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("no record: %v", err)
	}
	if err := WriteHarvestRecord(dest, "/s/set.kbundle", "/s/set.kbundle.d/000001-ab.kbundle"); err != nil {
		t.Fatal(err)
	}
	r, err := ReadHarvestRecord(dest)
	if err != nil || r.Set != "/s/set.kbundle" || r.Layer != "/s/set.kbundle.d/000001-ab.kbundle" {
		t.Fatalf("%+v, %v", r, err)
	}
	if fi, _ := os.Stat(filepath.Join(dest, HarvestedMarker)); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v", fi.Mode())
	}
	if err := WriteHarvestRecord(t.TempDir(), "s", ""); err == nil {
		t.Error("a directory kbundle did not install got a harvest record")
	}
	p := filepath.Join(dest, HarvestedMarker)
	for name, make := range map[string]func() error{
		"symlink": func() error { os.Remove(p); return os.Symlink(filepath.Join(dir, "elsewhere"), p) },
		"fifo":    func() error { os.Remove(p); return syscall.Mkfifo(p, 0o600) },
		"garbage": func() error { os.Remove(p); return os.WriteFile(p, []byte("{not json"), 0o600) },
		"version": func() error {
			os.Remove(p)
			return os.WriteFile(p, []byte(`{"kbundle_harvest_record":2,"harvested":"2026-12-01T00:00:00Z","set":"s"}`), 0o600)
		},
	} {
		if err := make(); err != nil {
			t.Fatal(err)
		}
		if _, err := ReadHarvestRecord(dest); err == nil {
			t.Errorf("%s: read as a record", name)
		}
	}
}
