// Package tree builds directory trees from a spec and compares trees, for
// the tests of every package: one definition of "the same tree" (names,
// kinds, permission bits, contents and, when asked, nanosecond mtimes)
// and one byte-flipper. It is test-only support code.
package tree

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"
)

// File is one entry of a Spec.
type File struct {
	Dir   bool
	Data  string
	Mode  fs.FileMode // permission bits; 0 means 0644 for a file, 0755 for a directory
	MTime time.Time   // zero: whatever writing it left
}

// Spec maps slash-separated names, relative to the tree's root, to
// entries. Parents missing from the spec are created with mode 0755.
type Spec map[string]File

// WriteSpec creates spec under dir (created if missing). Modes and mtimes
// are set after all content is written, directories deepest first, so a
// read-only directory and a directory's mtime survive its children.
func WriteSpec(dir string, spec Spec) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	names := make([]string, 0, len(spec))
	for name := range spec {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		f := spec[name]
		p := filepath.Join(dir, filepath.FromSlash(name))
		if f.Dir {
			if err := os.MkdirAll(p, 0o755); err != nil {
				return err
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(f.Data), 0o600); err != nil {
			return err
		}
	}
	// Deepest first: a name sorts after its parent.
	for i := len(names) - 1; i >= 0; i-- {
		f := spec[names[i]]
		p := filepath.Join(dir, filepath.FromSlash(names[i]))
		mode := f.Mode
		if mode == 0 {
			mode = 0o644
			if f.Dir {
				mode = 0o755
			}
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
		if !f.MTime.IsZero() {
			if err := os.Chtimes(p, f.MTime, f.MTime); err != nil {
				return err
			}
		}
	}
	return nil
}

// Write is WriteSpec for a test: it fails t on error.
func Write(t testing.TB, dir string, spec Spec) {
	t.Helper()
	if err := WriteSpec(dir, spec); err != nil {
		t.Fatal(err)
	}
}

// Options say what Diff compares beyond names, kinds, permission bits
// (without group and other write, which extraction drops, unless
// AllModeBits) and contents. A
// top-level .kbundle-installed (kbundle's mark on a tree it extracted)
// and .kbundle-harvested (a harvest's record in it) are ignored.
type Options struct {
	Mtimes      bool     // nanosecond modification times, files and directories
	SkipContent []string // slash-separated names whose content and mtime are not compared
	AllModeBits bool     // group and other write too (a source tree without them)
}

// installedMarker is bundle.InstalledMarker (not imported: package bundle's
// own tests use this package).
const installedMarker = ".kbundle-installed"

// harvestedMarker is bundle.HarvestedMarker, likewise.
const harvestedMarker = ".kbundle-harvested"

type entry struct {
	mode  fs.FileMode
	mtime time.Time
	data  string
}

func read(root string) (map[string]entry, error) {
	m := map[string]entry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == installedMarker || rel == harvestedMarker {
			return nil // kbundle's marks on a tree it extracted, and harvested
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{mode: fi.Mode(), mtime: fi.ModTime()}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.data = string(b)
		}
		m[filepath.ToSlash(rel)] = e
		return nil
	})
	return m, err
}

// Diff compares the trees a and b and returns "" when they are the same,
// else one line per difference (at most ten).
func Diff(a, b string, opt Options) string {
	ma, err := read(a)
	if err != nil {
		return err.Error()
	}
	mb, err := read(b)
	if err != nil {
		return err.Error()
	}
	var d []string
	names := make([]string, 0, len(ma)+len(mb))
	for k := range ma {
		names = append(names, k)
	}
	for k := range mb {
		if _, ok := ma[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		ea, inA := ma[k]
		eb, inB := mb[k]
		skip := slices.Contains(opt.SkipContent, k)
		if !opt.AllModeBits {
			// Extraction never restores group or other write (bundle.extractPerm).
			ea.mode &^= 0o022
			eb.mode &^= 0o022
		}
		switch {
		case !inB:
			d = append(d, fmt.Sprintf("%s: missing from %s", k, b))
		case !inA:
			d = append(d, fmt.Sprintf("%s: in %s only", k, b))
		case ea.mode != eb.mode:
			d = append(d, fmt.Sprintf("%s: mode %v vs %v", k, ea.mode, eb.mode))
		case !skip && ea.data != eb.data:
			d = append(d, fmt.Sprintf("%s: content differs (%d vs %d bytes)", k, len(ea.data), len(eb.data)))
		case !skip && opt.Mtimes && !ea.mtime.Equal(eb.mtime):
			d = append(d, fmt.Sprintf("%s: mtime %v vs %v", k, ea.mtime.UTC().Format(time.RFC3339Nano), eb.mtime.UTC().Format(time.RFC3339Nano)))
		}
		if len(d) == 10 {
			d = append(d, "…")
			break
		}
	}
	return strings.Join(d, "\n")
}

// Same fails t when the trees a and b differ.
func Same(t testing.TB, a, b string, opt Options) {
	t.Helper()
	if d := Diff(a, b, opt); d != "" {
		t.Fatalf("trees %s and %s differ:\n%s", a, b, d)
	}
}

// FlipByte flips one bit of the byte at off in file (off < 0 counts from
// the end), keeping the file's mode.
func FlipByte(file string, off int64) error {
	f, err := os.OpenFile(file, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if off < 0 {
		off += fi.Size()
	}
	if off < 0 || off >= fi.Size() {
		return fmt.Errorf("flip %s: offset %d outside its %d bytes", file, off, fi.Size())
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		return err
	}
	b[0] ^= 0x10
	if _, err := f.WriteAt(b, off); err != nil {
		return err
	}
	return f.Close()
}

// Flip is FlipByte for a test: it fails t on error.
func Flip(t testing.TB, file string, off int64) {
	t.Helper()
	if err := FlipByte(file, off); err != nil {
		t.Fatal(err)
	}
}
