package tree

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWriteDiffFlip(t *testing.T) {
	mt := time.Unix(1700000000, 123456789)
	spec := Spec{
		"a/b/f":   {Data: "hello", Mode: 0o600, MTime: mt},
		"a/b":     {Dir: true, Mode: 0o555, MTime: mt},
		"empty":   {Dir: true, MTime: mt},
		"x.so":    {Data: "\x7fELF", Mode: 0o755, MTime: mt},
		"a/e.txt": {MTime: mt},
		"a":       {Dir: true, MTime: mt},
		".":       {Dir: true, MTime: mt},
	}
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	Write(t, one, spec)
	Write(t, two, spec)
	t.Cleanup(func() { os.Chmod(filepath.Join(one, "a/b"), 0o755); os.Chmod(filepath.Join(two, "a/b"), 0o755) })
	if fi, err := os.Stat(filepath.Join(one, "a/b")); err != nil || fi.Mode().Perm() != 0o555 || !fi.ModTime().Equal(mt) {
		t.Fatalf("a/b: %v %v", fi.Mode(), err)
	}
	Same(t, one, two, Options{Mtimes: true})

	os.Chtimes(filepath.Join(two, "x.so"), mt, mt.Add(1))
	if d := Diff(one, two, Options{Mtimes: true}); !strings.Contains(d, "x.so: mtime") {
		t.Errorf("mtime difference not found: %q", d)
	}
	Same(t, one, two, Options{}) // mtimes not asked for

	Flip(t, filepath.Join(two, "x.so"), -1)
	if d := Diff(one, two, Options{}); !strings.Contains(d, "x.so: content differs") {
		t.Errorf("flipped byte not found: %q", d)
	}
	Same(t, one, two, Options{SkipContent: []string{"x.so"}})
	if err := FlipByte(filepath.Join(two, "x.so"), 4); err == nil {
		t.Error("flip past the end succeeded")
	}

	os.Chmod(filepath.Join(two, "x.so"), 0o700)
	os.WriteFile(filepath.Join(two, "extra"), nil, 0o644)
	d := Diff(one, two, Options{SkipContent: []string{"x.so"}})
	for _, want := range []string{"extra: in", "x.so: mode"} {
		if !strings.Contains(d, want) {
			t.Errorf("diff %q lacks %q", d, want)
		}
	}
}

// TestAllModeBits: group and other write count only when asked.
func TestAllModeBits(t *testing.T) {
	spec := Spec{"f": {Data: "x", Mode: 0o644}}
	one, two := filepath.Join(t.TempDir(), "one"), filepath.Join(t.TempDir(), "two")
	Write(t, one, spec)
	Write(t, two, spec)
	if err := os.Chmod(filepath.Join(two, "f"), 0o664); err != nil {
		t.Fatal(err)
	}
	Same(t, one, two, Options{})
	if d := Diff(one, two, Options{AllModeBits: true}); !strings.Contains(d, "f: mode") {
		t.Errorf("group write not found: %q", d)
	}
}
