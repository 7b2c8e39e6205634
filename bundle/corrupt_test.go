package bundle

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle/internal/gen/vectors"
)

// vector returns the committed test vector name (without .kbundle).
func vector(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(vectorDir, name+".kbundle"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// region names the part of a valid bundle a byte offset falls in.
type region int

const (
	rMagic region = iota
	rVersion
	rSegments
	rIndex
	rIndexOffset
	rIndexLength
	rIndexDigest
	rEndMagic
	rFileDigest
)

var regionNames = []string{"magic", "version/flags/reserved", "segments", "index",
	"trailer index_offset", "trailer index_length", "trailer index_digest", "trailer end_magic", "trailer file_digest"}

func regionOf(off int, size int, indexOff int) region {
	tr := size - trailerSize
	switch {
	case off < 8:
		return rMagic
	case off < headerSize:
		return rVersion
	case off < indexOff:
		return rSegments
	case off < tr:
		return rIndex
	case off < tr+8:
		return rIndexOffset
	case off < tr+16:
		return rIndexLength
	case off < tr+32:
		return rIndexDigest
	case off < tr+40:
		return rEndMagic
	}
	return rFileDigest
}

// openVerify opens data and, if that works, verifies it.
func openVerify(data []byte) (opened bool, err error) {
	r, err := NewReaderBytes(data)
	if err != nil {
		return false, err
	}
	return true, r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 1})
}

// TestEveryBitFlip flips every bit of small valid bundles, one at a time,
// and checks that open + verify catches each with the sentinel its region
// calls for.
func TestEveryBitFlip(t *testing.T) {
	for _, name := range []string{"valid-basic", "valid-two-segments", "valid-empty"} {
		t.Run(name, func(t *testing.T) {
			orig := vector(t, name)
			r, err := NewReaderBytes(orig)
			if err != nil {
				t.Fatal(err)
			}
			ioff := int(r.indexOff)
			data := slices.Clone(orig)
			counts := map[region]int{}
			for off := range data {
				reg := regionOf(off, len(data), ioff)
				for bit := range 8 {
					data[off] ^= 1 << bit
					opened, err := openVerify(data)
					want, wantOpen := ErrChecksum, false
					switch reg {
					case rMagic, rEndMagic, rIndexOffset:
						want = ErrFormat
					case rVersion:
						want = ErrVersion
					case rIndexLength:
						want = ErrFormat
						if binary.LittleEndian.Uint64(data[len(data)-trailerSize+8:]) > MaxIndexLen {
							want = ErrTooLarge
						}
					case rSegments, rFileDigest:
						wantOpen = true
					}
					if err == nil || !errors.Is(err, want) || opened != wantOpen {
						t.Fatalf("bit %d of byte %d (%s): opened=%v err=%v; want opened=%v and %v",
							bit, off, regionNames[reg], opened, err, wantOpen, want)
					}
					data[off] ^= 1 << bit
					counts[reg]++
				}
			}
			if !bytes.Equal(data, orig) {
				t.Fatal("test bug: data not restored")
			}
			t.Logf("%d bytes, flips per region: %v", len(data), counts)
		})
	}
}

// TestEveryBitFlipBehindTheFileDigest flips every bit and then recomputes
// the whole-file digest, as if the damage happened before it was computed
// (or a reader skipped it). What the content digests and structure checks
// still catch must be a sentinel; what they miss must be harmless: the
// same tree, byte for byte (a zstd header bit that decoders ignore).
func TestEveryBitFlipBehindTheFileDigest(t *testing.T) {
	orig := vector(t, "valid-basic")
	r0, err := NewReaderBytes(orig)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]byte{}
	for _, e := range r0.Entries() {
		if !e.Dir {
			want[e.Name], _ = r0.ReadEntry(e.Name)
		}
	}
	harmless := 0
	data := slices.Clone(orig)
	fd := len(data) - 16
	for off := range fd {
		for bit := range 8 {
			data[off] ^= 1 << bit
			d := sum(data[:fd])
			copy(data[fd:], d[:])
			r, err := NewReaderBytes(data)
			if err == nil {
				err = r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 1})
			}
			switch {
			case err != nil && !isSentinel(err):
				t.Fatalf("bit %d of byte %d: %v is not a sentinel", bit, off, err)
			case err == nil:
				harmless++
				sameIndex(t, r0, r)
				for name, w := range want {
					if got, err := r.ReadEntry(name); err != nil || !bytes.Equal(got, w) {
						t.Fatalf("bit %d of byte %d: undetected change of %s", bit, off, name)
					}
				}
			}
			data[off] ^= 1 << bit
		}
	}
	t.Logf("%d of %d flips change nothing that is read", harmless, 8*fd)
}

// TestTruncateEveryOffset cuts a valid bundle at every length.
func TestTruncateEveryOffset(t *testing.T) {
	for _, name := range []string{"valid-basic", "valid-two-segments"} {
		orig := vector(t, name)
		for n := range len(orig) {
			if _, err := NewReaderBytes(orig[:n]); !errors.Is(err, ErrFormat) {
				t.Fatalf("%s cut to %d of %d bytes: %v, want ErrFormat", name, n, len(orig), err)
			}
		}
	}
	// Through a file: Open says which file.
	orig := vector(t, "valid-basic")
	dir := t.TempDir()
	for _, n := range []int{0, 1, 15, 16, 71, 72, len(orig) / 2, len(orig) - 56, len(orig) - 1} {
		p := filepath.Join(dir, "cut.kbundle")
		if err := os.WriteFile(p, orig[:n], 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := Open(p, nil)
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p) {
			t.Fatalf("Open of a file cut to %d bytes: %v, want ErrFormat naming the file", n, err)
		}
	}
}

// TestAppendedGarbage appends bytes of every sort to a valid bundle.
func TestAppendedGarbage(t *testing.T) {
	orig := vector(t, "valid-basic")
	other := vector(t, "valid-unicode")
	for name, tail := range map[string][]byte{
		"one zero":        {0},
		"newline":         []byte("\n"),
		"text":            []byte("trailing garbage\n"),
		"a 4 KiB block":   make([]byte, 4096),
		"its own trailer": orig[len(orig)-trailerSize:],
		"itself":          orig,
		"another bundle":  other,
		"its end magic":   endMagic[:],
	} {
		data := append(slices.Clone(orig), tail...)
		if _, err := NewReaderBytes(data); !errors.Is(err, ErrFormat) {
			t.Errorf("%s appended: %v, want ErrFormat", name, err)
		}
		if _, err := NewReaderBytes(append(slices.Clone(tail), orig...)); err == nil {
			t.Errorf("%s prepended: accepted", name)
		}
	}
}

// leftovers lists what Extract may have left beside dest: temporary
// directories and anything not in keep.
func leftovers(t testing.TB, parent string, keep ...string) []string {
	t.Helper()
	ents, err := os.ReadDir(parent)
	if err != nil {
		t.Fatal(err)
	}
	var bad []string
	for _, e := range ents {
		if !slices.Contains(keep, e.Name()) || strings.Contains(e.Name(), ".kbundle-tmp-") {
			bad = append(bad, e.Name())
		}
	}
	return bad
}

// noLeftovers fails the test when parent holds anything but keep, or a
// temporary of kbundle's.
func noLeftovers(t testing.TB, parent string, keep ...string) {
	t.Helper()
	if bad := leftovers(t, parent, keep...); len(bad) != 0 {
		t.Fatalf("left behind: %v", bad)
	}
}

// installedBefore makes dest a tree kbundle installed earlier: a
// directory of mode perm holding the file "old" (content "old", perm
// without exec bits) and the install marker.
func installedBefore(t testing.TB, dest string, perm fs.FileMode) {
	t.Helper()
	if err := os.Mkdir(dest, perm); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "old"), []byte("old"), perm&^0o111); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, InstalledMarker), []byte(markerText+"0\n"), markerPerm); err != nil {
		t.Fatal(err)
	}
}

// TestExtractDamagedLeavesNothing extracts every vector that opens but
// does not verify: extraction must fail with ErrChecksum and leave no
// destination and no temporary directory, except where the only damage is
// to the whole-file digest (Extract checks every content digest instead).
func TestExtractDamagedLeavesNothing(t *testing.T) {
	for _, c := range readVectorTable(t) {
		if c.stage != vectors.StageVerify {
			continue
		}
		t.Run(c.file, func(t *testing.T) {
			r, err := NewReaderBytes(vector(t, strings.TrimSuffix(c.file, ".kbundle")))
			if err != nil {
				t.Fatal(err)
			}
			parent := t.TempDir()
			dest := filepath.Join(parent, "dest")
			_, err = r.Extract(context.Background(), dest, &ExtractOptions{Jobs: 2})
			if c.file == "file-digest-wrong.kbundle" {
				if err != nil {
					t.Fatalf("only the file digest is wrong, contents are fine: %v", err)
				}
				return
			}
			if !errors.Is(err, ErrChecksum) {
				t.Fatalf("Extract: %v, want ErrChecksum", err)
			}
			noLeftovers(t, parent)
		})
	}
}

// TestExtractHostileNamesDefenceInDepth bypasses the parser (which rejects
// these names) and hands Extract entries whose names try to escape: the
// os.Root must stop every one, and nothing may appear outside dest.
func TestExtractHostileNamesDefenceInDepth(t *testing.T) {
	for _, bad := range []string{"../escape", "../../escape", "/abs-escape", "a/../../escape", "a/../../../tmp/escape"} {
		for _, dir := range []bool{false, true} {
			r, err := NewReaderBytes(vector(t, "valid-basic"))
			if err != nil {
				t.Fatal(err)
			}
			// Rename the entry c (a file) or a/sub (a directory, whose
			// child then lands wherever it points).
			victim := "c"
			if dir {
				victim = "a/sub"
			}
			for i := range r.ix.entries {
				if r.ix.entries[i].Name == victim {
					r.ix.entries[i].Name = bad
				}
			}
			top := t.TempDir()
			parent := filepath.Join(top, "p", "q")
			if err := os.MkdirAll(parent, 0o755); err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(parent, "dest")
			_, err = r.Extract(context.Background(), dest, nil)
			if err == nil {
				t.Fatalf("%s: Extract succeeded", bad)
			}
			filepath.WalkDir(top, func(p string, d fs.DirEntry, err error) error {
				if err != nil {
					t.Fatal(err)
				}
				if p != top && p != filepath.Join(top, "p") && p != parent {
					t.Errorf("%s: Extract left %s", bad, p)
				}
				return nil
			})
			if _, err := os.Lstat("/abs-escape"); err == nil {
				t.Fatalf("%s: /abs-escape written", bad)
			}
		}
	}
}

// TestExtractDestinations covers destinations that must be refused or
// that cannot be written: each fails cleanly, touches nothing and leaves
// no temporary directory.
func TestExtractDestinations(t *testing.T) {
	data := vector(t, "valid-basic")
	r, err := NewReaderBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("dest is a file", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		os.WriteFile(dest, []byte("precious"), 0o600)
		for _, force := range []bool{false, true} {
			if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: force}); !errors.Is(err, ErrDestination) ||
				!strings.Contains(err.Error(), dest) || !strings.Contains(err.Error(), "not a directory") {
				t.Fatalf("force=%v: %v, want ErrDestination naming %s", force, err, dest)
			}
		}
		if b, _ := os.ReadFile(dest); string(b) != "precious" {
			t.Fatal("file changed")
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("dest is a symlink to an empty directory", func(t *testing.T) {
		parent, target := t.TempDir(), t.TempDir()
		dest := filepath.Join(parent, "dest")
		os.Symlink(target, dest)
		for _, force := range []bool{false, true} {
			if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: force}); !errors.Is(err, ErrDestination) ||
				!strings.Contains(err.Error(), "symlink") {
				t.Fatalf("force=%v: %v, want ErrDestination saying it is a symlink", force, err)
			}
		}
		if fi, err := os.Lstat(dest); err != nil || fi.Mode()&fs.ModeSymlink == 0 {
			t.Fatalf("symlink replaced: %v %v", fi, err)
		}
		if ents, _ := os.ReadDir(target); len(ents) != 0 {
			t.Fatalf("wrote through the symlink: %v", ents)
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("dest is a dangling symlink", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		target := filepath.Join(t.TempDir(), "nowhere")
		os.Symlink(target, dest)
		if _, err := r.Extract(context.Background(), dest, &ExtractOptions{Force: true}); !errors.Is(err, ErrDestination) {
			t.Fatalf("%v, want ErrDestination", err)
		}
		if _, err := os.Lstat(target); err == nil {
			t.Fatal("created the symlink's target")
		}
	})
	t.Run("parent is a file", func(t *testing.T) {
		parent := t.TempDir()
		os.WriteFile(filepath.Join(parent, "f"), nil, 0o600)
		dest := filepath.Join(parent, "f", "dest")
		if _, err := r.Extract(context.Background(), dest, nil); err == nil {
			t.Fatal("succeeded")
		}
		noLeftovers(t, parent, "f")
	})
	t.Run("parent not writable", func(t *testing.T) {
		if os.Geteuid() == 0 {
			t.Skip("root writes anywhere; covered by the CLI test that runs as another user")
		}
		parent := t.TempDir()
		ro := filepath.Join(parent, "ro")
		os.Mkdir(ro, 0o500)
		defer os.Chmod(ro, 0o700)
		if _, err := r.Extract(context.Background(), filepath.Join(ro, "dest"), nil); err == nil {
			t.Fatal("succeeded")
		}
		if ents, _ := os.ReadDir(ro); len(ents) != 0 {
			t.Fatalf("left behind: %v", ents)
		}
	})
	t.Run("cancelled", func(t *testing.T) {
		parent := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := r.Extract(ctx, filepath.Join(parent, "dest"), nil)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
		noLeftovers(t, parent)
	})
	t.Run("force keeps the old tree on failure", func(t *testing.T) {
		bad, err := NewReaderBytes(vector(t, "content-digest-wrong"))
		if err != nil {
			t.Fatal(err)
		}
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		installedBefore(t, dest, 0o700)
		if _, err := bad.Extract(context.Background(), dest, &ExtractOptions{Force: true}); !errors.Is(err, ErrChecksum) {
			t.Fatalf("%v, want ErrChecksum", err)
		}
		if b, _ := os.ReadFile(filepath.Join(dest, "old")); string(b) != "old" {
			t.Fatal("old tree damaged")
		}
		if ents, _ := os.ReadDir(dest); len(ents) != 2 {
			t.Fatalf("dest now holds %v", ents)
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("empty dest directory is used", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		os.Mkdir(dest, 0o755)
		if _, err := r.Extract(context.Background(), dest, nil); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t, parent, "dest")
	})
}

// TestTrust checks CheckTrust and ReadFile on bundles and directories that
// others could write or that others own.
func TestTrust(t *testing.T) {
	data := vector(t, "valid-basic")
	setup := func(t *testing.T, dirMode, fileMode fs.FileMode) (dir, file string) {
		dir = filepath.Join(t.TempDir(), "d")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		file = filepath.Join(dir, "b.kbundle")
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(file, fileMode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, dirMode); err != nil {
			t.Fatal(err)
		}
		return dir, file
	}
	for _, c := range []struct {
		name              string
		dirMode, fileMode fs.FileMode
		bad               string // what the message must name; "" means trusted
	}{
		{"private", 0o700, 0o600, ""},
		{"readable by all", 0o755, 0o644, ""},
		{"group-writable file", 0o755, 0o664, "b.kbundle"},
		{"world-writable file", 0o755, 0o606, "b.kbundle"},
		{"group-writable directory", 0o775, 0o644, "d"},
		{"world-writable directory", 0o777, 0o644, "d"},
		{"world-writable sticky directory owned by us", 0o1777, 0o644, "d"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir, file := setup(t, c.dirMode, c.fileMode)
			for _, check := range []func(string) error{func(p string) error { return CheckTrust(p, nil) }, openTrusted} {
				err := check(file)
				if c.bad == "" {
					if err != nil {
						t.Fatal(err)
					}
					continue
				}
				named := file
				if c.bad == "d" {
					named = dir
				}
				if !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), named) || !strings.Contains(err.Error(), "mode") {
					t.Fatalf("%v, want ErrUntrusted naming %s and its mode", err, named)
				}
			}
		})
	}
	t.Run("owned by someone else", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to give a file away")
		}
		_, file := setup(t, 0o755, 0o644)
		if err := os.Chown(file, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if err := CheckTrust(file, nil); !errors.Is(err, ErrUntrusted) || !strings.Contains(err.Error(), "uid 65534") {
			t.Fatalf("%v, want ErrUntrusted naming the owner", err)
		}
	})
	t.Run("damaged and trusted", func(t *testing.T) {
		_, file := setup(t, 0o700, 0o600)
		b := slices.Clone(data)
		b[100] ^= 1
		os.WriteFile(file, b, 0o600)
		if err := openTrusted(file); !errors.Is(err, ErrChecksum) || !strings.Contains(err.Error(), file) {
			t.Fatalf("%v, want ErrChecksum naming the file", err)
		}
	})
	t.Run("a directory, not a file", func(t *testing.T) {
		dir, _ := setup(t, 0o700, 0o600)
		if err := CheckTrust(dir, nil); !errors.Is(err, ErrFormat) {
			t.Fatalf("%v, want ErrFormat", err)
		}
	})
}

// TestOpenFIFO: a FIFO where a bundle should be is refused at once, not
// waited on (opening a FIFO for reading blocks until someone writes).
func TestOpenFIFO(t *testing.T) {
	p := filepath.Join(t.TempDir(), "fifo.kbundle")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	for name, open := range map[string]func() error{
		"Open": func() error {
			rc, err := Open(p, nil)
			if err == nil {
				rc.Close()
			}
			return err
		},
		"trusted":    func() error { return openTrusted(p) },
		"CheckTrust": func() error { return CheckTrust(p, nil) },
	} {
		done := make(chan error, 1)
		go func() { done <- open() }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), p) {
				t.Errorf("%s: %v, want ErrFormat naming the file", name, err)
			}
		case <-time.After(5 * time.Second):
			// Unblock the stuck open so the test binary can finish.
			if f, err := os.OpenFile(p, os.O_WRONLY, 0); err == nil {
				f.Close()
			}
			t.Fatalf("%s: still waiting on a FIFO after 5s (a hang)", name)
		}
	}
}

// openTrusted opens path as the loader does (one open, trust checked on
// the descriptor) and checks its whole-file digest.
func openTrusted(path string) error {
	rc, err := Open(path, &OpenOptions{Trusted: true})
	if err != nil {
		return err
	}
	defer rc.Close()
	return rc.Verify(context.Background(), nil)
}
