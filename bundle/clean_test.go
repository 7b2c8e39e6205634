package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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
