package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kbundle/kbundle/internal/testutil/tree"
)

// fixedHost keeps test bundles independent of the machine.
var fixedHost = map[string]string{"host.os": "linux", "host.arch": "amd64"}

// makeTree writes a random tree with the awkward cases: empty files and
// directories, multi-segment files, duplicates, deep paths, unicode names.
func makeTree(t testing.TB, seed int64, nfiles int) string {
	t.Helper()
	dir := t.TempDir()
	rng := rand.New(rand.NewSource(seed))
	exts := []string{".ptx", ".cubin", ".json", ".llir", ".so", ""}
	spec := tree.Spec{}
	mk := func(rel string, data []byte, mode fs.FileMode) {
		spec[rel] = tree.File{Data: string(data), Mode: mode, MTime: time.Unix(1700000000+rng.Int63n(1e6), rng.Int63n(1e9))}
	}
	shared := []byte(strings.Repeat("shared kernel body\n", 100))
	for i := 0; i < nfiles; i++ {
		dirp := fmt.Sprintf("%02x/%08x", rng.Intn(8), rng.Uint32())
		name := fmt.Sprintf("%s/kernel_%d%s", dirp, i, exts[rng.Intn(len(exts))])
		var data []byte
		switch rng.Intn(5) {
		case 0:
			data = nil
		case 1:
			data = shared
		case 2:
			data = make([]byte, rng.Intn(300000))
			rng.Read(data)
		default:
			data = []byte(strings.Repeat(fmt.Sprintf(".reg .f32 %%r<%d>;\n", rng.Intn(50)), 1+rng.Intn(2000)))
		}
		mk(name, data, 0o644)
	}
	big := make([]byte, 3*MinSegmentSize+123)
	rng.Read(big)
	mk("big/blob.bin", big, 0o600)
	mk("big/copy-of-blob.bin", big, 0o644)
	mk("deep/a/b/c/d/e/f/g/h/ünïcödé κ.json", []byte(`{"k":1}`), 0o444)
	mk("exec/run.so", []byte("\x7fELF..."), 0o755)
	spec["empty/dir"] = tree.File{Dir: true, Mode: 0o750}
	tree.Write(t, dir, spec)
	return dir
}

func pack(t testing.TB, dir string, opt *PackOptions) (string, *PackResult) {
	t.Helper()
	if opt == nil {
		opt = &PackOptions{}
	}
	if opt.Host == nil {
		opt.Host = fixedHost
	}
	if opt.SegmentSize == 0 {
		opt.SegmentSize = MinSegmentSize
	}
	out := filepath.Join(t.TempDir(), "cache.kbundle")
	res, err := Pack(context.Background(), dir, out, opt)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return out, res
}

// sameTree compares two directory trees: names, kinds, modes, contents and
// nanosecond mtimes (tree.Same, the one definition every package uses).
func sameTree(t testing.TB, a, b string) {
	t.Helper()
	tree.Same(t, a, b, tree.Options{Mtimes: true})
}

func TestRoundTrip(t *testing.T) {
	for _, tc := range []struct {
		name   string
		seed   int64
		nfiles int
	}{
		{"empty-ish", 1, 0},
		{"small", 2, 20},
		{"many", 3, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := makeTree(t, tc.seed, tc.nfiles)
			out, res := pack(t, src, nil)
			if len(res.Skipped) != 0 {
				t.Fatalf("skipped %v", res.Skipped)
			}
			rc, err := Open(out, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			if err := rc.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 0}); err != nil {
				t.Fatal(err)
			}
			if rc.FileDigest() != res.Digest {
				t.Fatal("digest differs from PackResult")
			}
			dest := filepath.Join(t.TempDir(), "dest")
			if _, err := rc.Extract(context.Background(), dest, nil); err != nil {
				t.Fatal(err)
			}
			sameTree(t, src, dest)
			fi, _ := os.Stat(dest)
			if fi.Mode().Perm() != 0o700 {
				t.Fatalf("dest mode %v, want 0700", fi.Mode())
			}
		})
	}
}

func TestFSTest(t *testing.T) {
	src := makeTree(t, 4, 60)
	out, _ := pack(t, src, nil)
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewReaderBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range r.Entries() {
		names = append(names, e.Name)
	}
	if err := fstest.TestFS(r, names...); err != nil {
		t.Fatal(err)
	}
	if err := fstest.TestFS(os.DirFS(src), names...); err != nil {
		t.Fatal(err)
	}
}

func TestDeterministic(t *testing.T) {
	src := makeTree(t, 5, 200)
	var prev []byte
	for _, jobs := range []int{1, 4, 3} {
		out, _ := pack(t, src, &PackOptions{Jobs: jobs})
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if prev != nil && !bytes.Equal(prev, b) {
			t.Fatalf("jobs=%d gives different bytes", jobs)
		}
		prev = b
	}
}

func TestDedupStoresOnce(t *testing.T) {
	src := t.TempDir()
	data := bytes.Repeat([]byte("x"), 100000)
	for i := range 10 {
		os.WriteFile(filepath.Join(src, fmt.Sprint(i)), data, 0o644)
	}
	_, res := pack(t, src, nil)
	if res.Unique != 1 || res.DataBytes != int64(len(data)) || res.RawBytes != 10*int64(len(data)) {
		t.Fatalf("unique=%d data=%d raw=%d", res.Unique, res.DataBytes, res.RawBytes)
	}
}

func TestPackSkipsSpecialFilesAndOutput(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a.ptx"), []byte("a"), 0o644)
	os.Symlink("a.ptx", filepath.Join(src, "link"))         // inside: stored as a copy
	os.Symlink("/etc/passwd", filepath.Join(src, "passwd")) // outside: skipped
	os.Symlink("../x", filepath.Join(src, "up"))            // outside: skipped
	syscall.Mkfifo(filepath.Join(src, "fifo"), 0o600)       // special: skipped
	os.WriteFile(filepath.Join(src, ".kbundle-tmp-otherhost-123-x"), []byte("junk"), 0o600)
	os.WriteFile(filepath.Join(src, "skip.lock"), []byte("x"), 0o600)
	out := filepath.Join(src, "cache.kbundle")
	for range 2 { // the second run must not pack the first run's output
		res, err := Pack(context.Background(), src, out, &PackOptions{Host: fixedHost, Exclude: []string{"*.lock"}})
		if err != nil {
			t.Fatal(err)
		}
		want := []string{"fifo fifo", "symlink passwd (absolute target /etc/passwd)", "symlink up (points outside the directory)"}
		if res.Files != 2 || !slices.Equal(res.Skipped, want) || !slices.Equal(res.Copied, []string{"link -> a.ptx"}) {
			t.Fatalf("files=%d skipped=%q copied=%q", res.Files, res.Skipped, res.Copied)
		}
	}
	if err := os.Remove(filepath.Join(src, ".kbundle-tmp-otherhost-123-x")); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(src, ".cache.kbundle.tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestPackFailureLeavesNothing(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "bad\\name"), []byte("a"), 0o644)
	outDir := t.TempDir()
	_, err := Pack(context.Background(), src, filepath.Join(outDir, "x.kbundle"), &PackOptions{Host: fixedHost})
	if !errors.Is(err, ErrInsecurePath) {
		t.Fatalf("err = %v, want ErrInsecurePath", err)
	}
	if ents, _ := os.ReadDir(outDir); len(ents) != 0 {
		t.Fatalf("left behind: %v", ents)
	}
}

func TestMetadata(t *testing.T) {
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "a"), []byte("a"), 0o644)
	mt := time.Unix(1234567890, 123456789)
	os.Chtimes(filepath.Join(src, "a"), mt, mt)
	out, _ := pack(t, src, &PackOptions{Preset: "numba"})
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	m := rc.Meta()
	if m[MetaOrigin] != src || m[MetaPreset] != "numba" || m[MetaContentTime] != "2009-02-13T23:31:30.123456789Z" || !strings.HasPrefix(m[MetaCreator], "kbundle ") {
		t.Fatalf("meta = %v", m)
	}
	out, _ = pack(t, src, &PackOptions{ContentTime: time.Unix(42, 0)})
	rc2, _ := Open(out, nil)
	defer rc2.Close()
	if got := rc2.Meta()[MetaContentTime]; got != "1970-01-01T00:00:42Z" {
		t.Fatalf("content_time = %q", got)
	}
}

func TestExtractRefusesNonEmptyDest(t *testing.T) {
	src := makeTree(t, 6, 10)
	out, _ := pack(t, src, nil)
	rc, _ := Open(out, nil)
	defer rc.Close()
	dest := filepath.Join(t.TempDir(), "dest")
	os.Mkdir(dest, 0o755)
	os.WriteFile(filepath.Join(dest, "old"), []byte("old"), 0o644)
	if _, err := rc.Extract(context.Background(), dest, nil); !errors.Is(err, ErrExist) {
		t.Fatalf("err = %v, want ErrExist", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "old")); err != nil {
		t.Fatal("old content touched")
	}
	// --force replaces only a tree kbundle installed (W5).
	if _, err := rc.Extract(context.Background(), dest, &ExtractOptions{Force: true}); !errors.Is(err, ErrDestination) ||
		!strings.Contains(err.Error(), InstalledMarker) {
		t.Fatalf("force over a tree kbundle did not install: %v, want ErrDestination naming %s", err, InstalledMarker)
	}
	if _, err := os.Stat(filepath.Join(dest, "old")); err != nil {
		t.Fatal("old content touched by --force")
	}
	os.Remove(filepath.Join(dest, "old"))
	if _, err := rc.Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err) // empty: used
	}
	if _, err := rc.Extract(context.Background(), dest, &ExtractOptions{Force: true}); err != nil {
		t.Fatal(err) // installed by kbundle: replaced
	}
	sameTree(t, src, dest)
	if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 1 {
		t.Fatalf("leftovers beside dest: %v", ents)
	}
}

// The Writer refuses the entry that would break the tree rule (every
// parent a directory), whichever comes first, and names it; it never
// writes an index the reader refuses (H1 of the 2026-12-01b review).
func TestWriterRefusesNonTree(t *testing.T) {
	type add struct {
		name string
		dir  bool
	}
	cases := []struct {
		name string
		adds []add
		bad  string // the entry refused ("": all accepted)
	}{
		{"file, then a file below it", []add{{"x", false}, {"x/y", false}}, "x/y"},
		{"a file, then a file above it", []add{{"x/y", false}, {"x", false}}, "x"},
		{"file, then a directory below it", []add{{"a", false}, {"a/b", true}}, "a/b"},
		{"deep file, then a file at its top", []add{{"a/b/c/d", false}, {"a", false}}, "a"},
		{"deep file, then a file in the middle", []add{{"a/b/c/d", false}, {"a/b", false}}, "a/b"},
		{"file, then a deep file below it", []add{{"a/b", false}, {"a/b/c/d", false}}, "a/b/c/d"},
		{"directory, then a file below it", []add{{"x", true}, {"x/y", false}}, ""},
		{"file below, then its directory", []add{{"x/y", false}, {"x", true}}, ""},
		{"names sharing a prefix", []add{{"x", false}, {"x-y/z", false}, {"x.y", false}, {"xy/z", false}}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			w := NewWriter(&buf, nil)
			var refused error
			for _, a := range tc.adds {
				var err error
				if a.dir {
					err = w.Mkdir(a.name, 0o755, time.Unix(1, 0))
				} else {
					err = w.WriteFile(a.name, 0o644, time.Unix(1, 0), []byte("content of "+a.name))
				}
				if err != nil {
					if refused != nil || a.name != tc.bad {
						t.Fatalf("add %q: %v (want %q refused)", a.name, err, tc.bad)
					}
					var e *Error
					if !errors.Is(err, ErrFormat) || !errors.As(err, &e) || e.Entry != a.name {
						t.Fatalf("add %q: %v, want ErrFormat naming the entry", a.name, err)
					}
					refused = err
				}
			}
			if tc.bad != "" && refused == nil {
				t.Fatalf("%q accepted", tc.bad)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("close: %v", err)
			}
			if _, err := NewReaderBytes(buf.Bytes()); err != nil {
				t.Fatalf("the reader refuses what the Writer wrote: %v", err)
			}
		})
	}
}

// TestImpliedDirsDated: a directory the Writer adds because an entry
// below it needs it is dated as its newest entry below (U42: harvested
// layers' directories said 1970-01-01); one that is named keeps its own.
func TestImpliedDirsDated(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil)
	old, newer := time.Unix(1_700_000_000, 5), time.Unix(1_800_000_000, 7)
	w.WriteFile("a/b/old", 0o644, old, []byte("o"))
	w.WriteFile("a/new", 0o644, newer, []byte("n"))
	w.Mkdir("named", 0o755, old)
	w.WriteFile("named/f", 0o644, newer, []byte("f"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReaderBytes(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{"a": newer, "a/b": old, "named": old}
	for _, e := range r.Entries() {
		if w, ok := want[e.Name]; ok && !e.ModTime.Equal(w) {
			t.Errorf("%s dated %v, want %v", e.Name, e.ModTime, w)
		}
	}
}
