package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle/internal/gen/raw"
	"golang.org/x/sys/unix"
)

func readerOf(t *testing.T, b []byte) *Reader {
	t.Helper()
	r, err := NewReaderBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestExtractMtimes: mtimes outside 1678..2262 are kept exactly (B8: they
// went through UnixNano and wrapped: 2300 became 1901), and one beyond
// what a time.Time holds is refused, not wrapped.
func TestExtractMtimes(t *testing.T) {
	dest := filepath.Join(t.TempDir(), "d")
	files := []raw.File{
		{Name: "dfuture", Dir: true, Mode: 0o755, Sec: 1 << 40, Nsec: 7},
		{Name: "future", Mode: 0o644, Sec: 10413792000, Nsec: 123456789, Data: []byte("x")}, // 2300-01-01
		{Name: "past", Mode: 0o644, Sec: -(1 << 35), Nsec: 5, Data: []byte("y")},
	}
	r := readerOf(t, raw.Build(64<<10, nil, files).Encode())
	if _, err := r.Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(dest, f.Name), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mtim.Sec != f.Sec || st.Mtim.Nsec != int64(f.Nsec) {
			var sf unix.Statfs_t
			unix.Statfs(dest, &sf)
			if sf.Type != unix.TMPFS_MAGIC {
				t.Logf("%s: mtime %d.%09d, want %d.%09d (file system %#x may clamp)", f.Name, st.Mtim.Sec, st.Mtim.Nsec, f.Sec, f.Nsec, sf.Type)
				continue
			}
			t.Errorf("%s: mtime %d.%09d, want %d.%09d", f.Name, st.Mtim.Sec, st.Mtim.Nsec, f.Sec, f.Nsec)
		}
	}
	_, err := NewReaderBytes(raw.Build(64<<10, nil, []raw.File{{Name: "max", Mode: 0o644, Sec: 1<<63 - 1, Data: []byte("z")}}).Encode())
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "out of range") {
		t.Fatalf("mtime 2^63-1: %v, want ErrFormat out of range", err)
	}
}

// TestExtractModesMasked: group and other write bits are never restored
// (W8); the rest is.
func TestExtractModesMasked(t *testing.T) {
	files := []raw.File{
		{Name: "ww", Dir: true, Mode: 0o777},
		{Name: "exe", Mode: 0o777, Data: []byte("#!/bin/sh\n")},
		{Name: "ww/f", Mode: 0o666, Data: []byte("x")},
		{Name: "ro", Mode: 0o444, Data: []byte("r")},
	}
	dest := filepath.Join(t.TempDir(), "d")
	if _, err := readerOf(t, raw.Build(64<<10, nil, files).Encode()).Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]fs.FileMode{"ww": 0o755, "exe": 0o755, "ww/f": 0o644, "ro": 0o444} {
		fi, err := os.Lstat(filepath.Join(dest, name))
		if err != nil || fi.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %v", name, fi.Mode().Perm(), err, want)
		}
	}
}

// TestExtractSharedLargeBlobUnreadableFirst is B7: several files share one
// blob spanning more than two segments and the first has mode 0000: the
// copies must come from the decoded data, not from reopening the first.
func TestExtractSharedLargeBlobUnreadableFirst(t *testing.T) {
	// Root reads any file whatever its mode: run as nobody then.
	if os.Geteuid() == 0 && os.Getenv("KBUNDLE_TEST_B7_CHILD") == "" {
		dir, err := os.MkdirTemp("", "kbundle-b7-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		os.Chown(dir, 65534, 65534)
		bin, err := os.ReadFile(os.Args[0]) // the build directory is private
		if err != nil {
			t.Fatal(err)
		}
		exe := filepath.Join(dir, "bundle.test")
		if err := os.WriteFile(exe, bin, 0o755); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "-test.run", "^TestExtractSharedLargeBlobUnreadableFirst$", "-test.v")
		cmd.Env = append(os.Environ(), "KBUNDLE_TEST_B7_CHILD="+dir, "HOME="+dir)
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("as uid 65534: %v\n%s", err, out)
		}
		if !bytes.Contains(out, []byte("--- PASS")) {
			t.Fatalf("as uid 65534: the child did not run the test:\n%s", out)
		}
		return
	}
	tmp := func() string {
		if d := os.Getenv("KBUNDLE_TEST_B7_CHILD"); d != "" {
			p, err := os.MkdirTemp(d, "x")
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(p, 0o755)
			return p
		}
		return t.TempDir()
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	for _, mode := range []uint16{0o000, 0o200} {
		files := []raw.File{{Name: "a", Mode: mode, Data: big}, {Name: "b", Mode: 0o644, Data: big}, {Name: "c", Mode: 0o600, Data: big}}
		dest := filepath.Join(tmp(), "d")
		if _, err := readerOf(t, raw.Build(64<<10, nil, files).Encode()).Extract(context.Background(), dest, nil); err != nil {
			t.Fatalf("first mode %04o: %v", mode, err)
		}
		for _, n := range []string{"b", "c"} {
			if got, err := os.ReadFile(filepath.Join(dest, n)); err != nil || !bytes.Equal(got, big) {
				t.Fatalf("first mode %04o: %s: %v", mode, n, err)
			}
		}
		if fi, _ := os.Lstat(filepath.Join(dest, "a")); fi.Mode().Perm() != fs.FileMode(mode) {
			t.Fatalf("a: mode %v", fi.Mode())
		}
		os.Chmod(filepath.Join(dest, "a"), 0o600)
	}
}

// TestExtractDeclaredSizeChecked is W4: a tiny bundle whose entries share
// one blob can declare far more than the destination holds; it is refused
// before anything is written, with ErrNoSpace naming the sizes.
func TestExtractDeclaredSizeChecked(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, &WriterOptions{SegmentSize: MinSegmentSize})
	blob := make([]byte, 64<<20)
	d := sum(blob)
	mt := time.Unix(0, 0)
	for i := range 16384 { // 16384 x 64 MiB = 1 TiB
		var rd *bytes.Reader
		if i == 0 {
			rd = bytes.NewReader(blob)
		}
		if err := w.CopyFile(fmt.Sprintf("d/%05d", i), 0o644, mt, int64(len(blob)), d, rd); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	parent := t.TempDir()
	_, err := readerOf(t, buf.Bytes()).Extract(context.Background(), filepath.Join(parent, "dest"), nil)
	if !errors.Is(err, ErrNoSpace) || !errors.Is(err, unix.ENOSPC) || !strings.Contains(err.Error(), "the bundle unpacks to 10995116") || !strings.Contains(err.Error(), "bytes in 16385 entries") {
		t.Fatalf("%v, want ErrNoSpace with the sizes", err)
	}
	noLeftovers(t, parent)
}

// TestExtractDestRefusals: B10 and W1. A destination owned by another user
// is refused before any work, naming the owner; so is one whose parent
// others can write (they could swap the tree after it is installed).
func TestExtractDestRefusals(t *testing.T) {
	r := readerOf(t, vector(t, "valid-basic"))
	t.Run("parent writable by others", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "pub")
		os.Mkdir(parent, 0o700)
		os.Chmod(parent, 0o777)
		_, err := r.Extract(context.Background(), filepath.Join(parent, "dest"), nil)
		if !errors.Is(err, ErrDestination) || errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "directory mode 0777 lets others write it") {
			t.Fatalf("%v, want ErrDestination (not ErrUntrusted: the bundle is fine) naming the mode", err)
		}
		noLeftovers(t, parent)
		os.Chmod(parent, 0o1777) // sticky but ours, not root's: still refused
		if _, err := r.Extract(context.Background(), filepath.Join(parent, "dest"), nil); !errors.Is(err, ErrDestination) && os.Geteuid() != 0 {
			t.Fatalf("sticky, not root's: %v", err)
		}
	})
	t.Run("owned by another user", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a directory away")
		}
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		os.Mkdir(dest, 0o777)
		os.Chown(dest, 65534, 65534)
		for _, force := range []bool{false, true} {
			_, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: force})
			if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "owned by uid 65534") {
				t.Fatalf("force=%v: %v, want ErrDestination naming the owner", force, err)
			}
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("force needs the marker", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		if _, err := r.Extract(context.Background(), dest, nil); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(dest, InstalledMarker)); err != nil {
			t.Fatalf("no marker: %v", err)
		}
		if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true}); err != nil {
			t.Fatal(err)
		}
		// A marker that is a symlink does not count.
		os.Remove(filepath.Join(dest, InstalledMarker))
		os.Symlink("/etc/hostname", filepath.Join(dest, InstalledMarker))
		if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true}); !errors.Is(err, ErrDestination) {
			t.Fatalf("symlinked marker: %v", err)
		}
	})
}

// TestSecCheckSpaceOverflow is S6 (the 2026-12-01 review's white-box
// test): 2^20 entries of 2^44 bytes (the format's limits, all sharing one
// blob) declare exactly 2^64 bytes, which a plain uint64 sum wraps to 0;
// one entry less declares 2^64 - 2^44. Both must be refused before
// anything is written, and RawSize (what info and verify print) must not
// wrap to a negative or zero size.
func TestSecCheckSpaceOverflow(t *testing.T) {
	for _, n := range []int{1 << 20, 1<<20 - 1} {
		es := make([]Entry, n)
		for i := range es {
			es[i] = Entry{Size: 1 << 44}
		}
		r := &Reader{ix: &index{entries: es, dataLen: 1 << 44}}
		if err := r.checkSpace(t.TempDir()); !errors.Is(err, ErrNoSpace) {
			t.Errorf("%d entries of 2^44 bytes: checkSpace: %v, want ErrNoSpace", n, err)
		}
		if got := r.RawSize(); got != 1<<63-1 {
			t.Errorf("%d entries of 2^44 bytes: RawSize %d, want math.MaxInt64", n, got)
		}
	}
}

// TestReservedMarkerName is S13: a bundle may not carry a top-level
// InstalledMarker (as root, extraction truncated the bundle's file into
// kbundle's marker; as a user it failed blaming the destination). Open
// refuses it with ErrFormat naming the bundle and the entry, the Writer
// refuses to write it, and writeRecord never reuses a file already there.
func TestReservedMarkerName(t *testing.T) {
	for _, dir := range []bool{false, true} {
		data := raw.Build(64<<10, nil, []raw.File{
			{Name: InstalledMarker, Dir: dir, Mode: 0o444, Sec: 1, Data: []byte("from the bundle\n")},
			{Name: "k", Mode: 0o644, Sec: 1, Data: []byte("kernel")}}).Encode()
		file := filepath.Join(t.TempDir(), "marker.kbundle")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(file, &OpenOptions{Trusted: true})
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), file+": entry \""+InstalledMarker+"\"") ||
			!strings.Contains(err.Error(), "reserved") {
			t.Errorf("dir=%v: Open: %v, want ErrFormat naming %s and the entry", dir, err, file)
		}
	}
	w := NewWriter(io.Discard, nil)
	if err := w.WriteFile(InstalledMarker, 0o600, time.Unix(0, 0), nil); !errors.Is(err, ErrFormat) {
		t.Errorf("Writer: %v, want ErrFormat", err)
	}

	r := readerOf(t, vector(t, "valid-basic"))
	dir := t.TempDir()
	planted := filepath.Join(dir, InstalledMarker)
	if err := os.WriteFile(planted, []byte("planted"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := (&Staged{tmp: dir, layers: []stagedLayer{{r: r}}}).writeRecord(); err == nil {
		t.Errorf("writeRecord over an existing %s succeeded", InstalledMarker)
	}
	if b, _ := os.ReadFile(planted); string(b) != "planted" {
		t.Errorf("writeRecord changed the file already there: %q", b)
	}
}

// TestForceMarkerRules is V1: --force replaces a directory only when its
// marker is the one kbundle writes. The review's reproducer: the victim's
// DEST is writable by others, and another user hard-links a file of the
// victim's (one they can read and write) into it as the marker; --force
// then deleted the victim's results. Here the test makes the hard link
// itself (the link count is what counts, not who made it).
func TestForceMarkerRules(t *testing.T) {
	r := readerOf(t, vector(t, "valid-basic"))
	text := []byte(markerText + "0\n")
	for _, c := range []struct {
		name   string
		set    func(t *testing.T, dest string) // dest holds "results/data" and a good marker
		reason string                          // "" : replaced
	}{
		{"good marker", func(*testing.T, string) {}, ""},
		{"hard link", func(t *testing.T, dest string) {
			m := filepath.Join(dest, InstalledMarker)
			other := filepath.Join(t.TempDir(), "vfile") // a file of the victim's, elsewhere
			os.WriteFile(other, text, markerPerm)
			os.Remove(m)
			if err := os.Link(other, m); err != nil {
				t.Fatal(err)
			}
		}, "2 hard links"},
		{"dest writable by others", func(_ *testing.T, dest string) { os.Chmod(dest, 0o777) }, "mode 0777 lets others write it"},
		{"dest writable by group", func(_ *testing.T, dest string) { os.Chmod(dest, 0o770) }, "mode 0770 lets others write it"},
		{"marker mode", func(_ *testing.T, dest string) { os.Chmod(filepath.Join(dest, InstalledMarker), 0o644) }, "mode 0644, not 0600"},
		{"marker text", func(_ *testing.T, dest string) {
			os.WriteFile(filepath.Join(dest, InstalledMarker), []byte("log\n"), markerPerm)
		}, "does not hold kbundle's text"},
		{"marker directory", func(_ *testing.T, dest string) {
			os.Remove(filepath.Join(dest, InstalledMarker))
			os.Mkdir(filepath.Join(dest, InstalledMarker), 0o700)
		}, "not a regular file"},
		{"no marker", func(_ *testing.T, dest string) { os.Remove(filepath.Join(dest, InstalledMarker)) }, "it holds no " + InstalledMarker},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "vd")
			os.Mkdir(dest, 0o700)
			os.Mkdir(filepath.Join(dest, "results"), 0o755)
			os.WriteFile(filepath.Join(dest, "results", "data"), []byte("precious"), 0o644)
			os.WriteFile(filepath.Join(dest, InstalledMarker), text, markerPerm)
			c.set(t, dest)
			_, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true})
			_, lerr := os.Lstat(filepath.Join(dest, "results", "data"))
			switch {
			case c.reason == "" && (err != nil || lerr == nil):
				t.Fatalf("%v (results still there: %v), want the tree replaced", err, lerr == nil)
			case c.reason != "" && (!errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), c.reason)):
				t.Fatalf("%v, want ErrDestination saying %q", err, c.reason)
			case c.reason != "" && lerr != nil:
				t.Fatalf("refused, but results/data is gone: %v", lerr)
			}
			noLeftovers(t, parent, "vd")
		})
	}
}

// TestForceKeepsBundle is S9: --force must not replace a tree that holds
// the bundle being extracted (after `warm --dir DEST --pack`, the bundle
// is DEST/cache.kbundle): the only copy was deleted with the old tree.
func TestForceKeepsBundle(t *testing.T) {
	data := vector(t, "valid-basic")
	for _, c := range []struct {
		name   string
		place  func(dest, other string) (path string) // writes the bundle, returns the path to open
		inside bool
	}{
		{"in DEST", func(dest, _ string) string { return filepath.Join(dest, "cache.kbundle") }, true},
		{"deep in DEST", func(dest, _ string) string {
			os.MkdirAll(filepath.Join(dest, "a", "b"), 0o700)
			return filepath.Join(dest, "a", "b", "x.kbundle")
		}, true},
		{"through a symlink to a directory in DEST", func(dest, other string) string {
			os.MkdirAll(filepath.Join(dest, "a", "b"), 0o700)
			os.Symlink(filepath.Join(dest, "a", "b"), filepath.Join(other, "l"))
			return filepath.Join(other, "l", "x.kbundle")
		}, true},
		{"through a symlink to the file in DEST", func(dest, other string) string {
			os.WriteFile(filepath.Join(dest, "x.kbundle"), data, 0o600)
			os.Symlink(filepath.Join(dest, "x.kbundle"), filepath.Join(other, "l.kbundle"))
			return filepath.Join(other, "l.kbundle")
		}, true},
		{"beside DEST", func(_, other string) string { return filepath.Join(other, "cache.kbundle") }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent, other := t.TempDir(), t.TempDir()
			dest := filepath.Join(parent, "cd")
			if _, err := readerOf(t, data).Extract(context.Background(), dest, nil); err != nil {
				t.Fatal(err)
			}
			p := c.place(dest, other)
			if _, err := os.Lstat(p); err != nil {
				if err := os.WriteFile(p, data, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			rc, err := Open(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			_, err = rc.Extract(context.Background(), dest, &ExtractOptions{Force: true})
			if !c.inside {
				if err != nil {
					t.Fatalf("bundle outside DEST: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrDestination) || !strings.Contains(err.Error(), "holds the bundle being extracted") {
				t.Fatalf("%v, want ErrDestination: it holds the bundle", err)
			}
			if _, err := os.Stat(p); err != nil {
				t.Fatalf("the bundle is gone: %v", err)
			}
			noLeftovers(t, parent, "cd")

			// The same through a Reader that does not read the file itself
			// (load's rank 0 stages a Stream fed from it): Keep.
			r := readerOf(t, data)
			if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true, Keep: rc}); !errors.Is(err, ErrDestination) {
				t.Fatalf("with Keep: %v, want ErrDestination", err)
			}
			if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true}); err != nil {
				t.Fatalf("in memory, without Keep: %v", err) // nothing to lose
			}
		})
	}
}
