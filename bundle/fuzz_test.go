package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle/internal/gen/raw"
)

// Fuzzing, briefly (the CI command):
//
//	go test -run '^$' -fuzz '^FuzzReader$' -fuzztime 10s ./bundle/
//	go test -run '^$' -fuzz '^FuzzRoundTrip$' -fuzztime 10s ./bundle/
//	go test -run '^$' -fuzz '^FuzzLayerSet$' -fuzztime 10s ./bundle/
//
// Crashers land in testdata/fuzz/<Fuzz name>/ and are then replayed by
// every plain `go test`.

// addVectorSeeds adds every committed test vector to f's seed corpus.
func addVectorSeeds(f *testing.F) {
	files, err := filepath.Glob(filepath.Join(vectorDir, "*.kbundle"))
	if err != nil || len(files) == 0 {
		f.Fatalf("no vectors in %s: %v", vectorDir, err)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
}

// allocBound is what opening a bundle of n bytes may allocate: a small
// multiple of its size (the index is read once, entries and maps are
// built from it), never anything a declared count or length asks for.
func allocBound(n int) uint64 { return 1<<20 + 64*uint64(n) }

func totalAlloc() uint64 {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.TotalAlloc
}

// FuzzReader feeds arbitrary bytes to the reader: it must never panic or
// hang, every error must be one of the sentinels, opening must allocate
// in proportion to the input, and whatever opens must verify, walk and
// read consistently, and survive a rewrite by the Writer unchanged.
func FuzzReader(f *testing.F) {
	addVectorSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		before := totalAlloc()
		r, err := NewReaderBytes(data)
		if used := totalAlloc() - before; used > allocBound(len(data)) {
			t.Fatalf("opening %d bytes allocated %d bytes", len(data), used)
		}
		if err != nil {
			if !isSentinel(err) {
				t.Fatalf("NewReaderBytes: %v is not a bundle sentinel", err)
			}
			return
		}
		verr := r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 2})
		if verr != nil && !isSentinel(verr) {
			t.Fatalf("Verify: %v is not a bundle sentinel", verr)
		}
		// Walk the tree through fs.FS and read every file both ways.
		contents := map[string][]byte{}
		var readErr error
		err = fs.WalkDir(r, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			fb, ferr := fs.ReadFile(r, p)
			eb, eerr := r.ReadEntry(p)
			if (ferr == nil) != (eerr == nil) || (ferr == nil && !bytes.Equal(fb, eb)) {
				t.Fatalf("%s: fs.ReadFile and ReadEntry disagree: %v / %v", p, ferr, eerr)
			}
			if ferr != nil {
				if !errors.Is(ferr, ErrChecksum) {
					t.Fatalf("%s: read error %v, want ErrChecksum", p, ferr)
				}
				readErr = ferr
				return nil
			}
			contents[p] = fb
			return nil
		})
		if err != nil {
			t.Fatalf("WalkDir: %v", err)
		}
		if readErr != nil && verr == nil {
			t.Fatalf("Verify accepted a bundle whose entry does not read: %v", readErr)
		}
		if verr != nil {
			return
		}
		// A verified bundle has one encoding of its content: the Writer,
		// fed the same tree in data order, rebuilds the same index.
		out := rewrite(t, r, r.SegmentSize(), LevelDefault)
		r2, err := NewReaderBytes(out)
		if err != nil {
			t.Fatalf("rewritten bundle does not open: %v", err)
		}
		sameIndex(t, r, r2)
		for p, want := range contents {
			got, err := r2.ReadEntry(p)
			if err != nil || !bytes.Equal(got, want) {
				t.Fatalf("%s: rewritten content differs: %v", p, err)
			}
		}
	})
}

// rewrite writes r's tree again with a Writer: metadata, directories, then
// files in data order (by offset), so blobs land where they were.
func rewrite(t testing.TB, r *Reader, segSize int64, level Level) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, &WriterOptions{SegmentSize: segSize, Level: level, Jobs: 2})
	for k, v := range r.Meta() {
		if err := w.SetMeta(k, v); err != nil {
			t.Fatalf("SetMeta: %v", err)
		}
	}
	ents := slices.Clone(r.Entries())
	slices.SortStableFunc(ents, func(a, b Entry) int {
		if a.Dir != b.Dir {
			if a.Dir {
				return -1
			}
			return 1
		}
		return int(a.offset - b.offset)
	})
	for _, e := range ents {
		var err error
		if e.Dir {
			err = w.Mkdir(e.Name, e.Mode, e.ModTime)
		} else {
			var data []byte
			data, err = r.ReadEntry(e.Name)
			if err == nil {
				err = w.WriteFile(e.Name, e.Mode, e.ModTime, data)
			}
		}
		if err != nil {
			t.Fatalf("rewriting %s: %v", e.Name, err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	return buf.Bytes()
}

// sameIndex compares everything two readers decoded except the packed
// segment lengths (compression may differ).
func sameIndex(t testing.TB, a, b *Reader) {
	t.Helper()
	if a.ix.segSize != b.ix.segSize || a.ix.dataLen != b.ix.dataLen || len(a.ix.packed) != len(b.ix.packed) {
		t.Fatalf("segments differ: %d/%d/%d vs %d/%d/%d", a.ix.segSize, a.ix.dataLen, len(a.ix.packed), b.ix.segSize, b.ix.dataLen, len(b.ix.packed))
	}
	if !slices.Equal(a.ix.metaKeys, b.ix.metaKeys) {
		t.Fatalf("meta keys differ: %q vs %q", a.ix.metaKeys, b.ix.metaKeys)
	}
	for k, v := range a.ix.meta {
		if b.ix.meta[k] != v {
			t.Fatalf("meta %q differs", k)
		}
	}
	if len(a.ix.entries) != len(b.ix.entries) {
		t.Fatalf("%d vs %d entries", len(a.ix.entries), len(b.ix.entries))
	}
	for i := range a.ix.entries {
		x, y := a.ix.entries[i], b.ix.entries[i]
		if x.Name != y.Name || x.Dir != y.Dir || x.Mode != y.Mode || !x.ModTime.Equal(y.ModTime) ||
			x.Size != y.Size || x.offset != y.offset || x.Digest != y.Digest {
			t.Fatalf("entry %d differs:\n%+v\n%+v", i, x, y)
		}
	}
}

// FuzzRoundTrip builds a small random tree from the fuzzer's bytes, writes
// it with the Writer, reads it back, and rewrites it: the reader must give
// the same tree, and parse-then-rewrite with the same options must give
// the same bytes.
func FuzzRoundTrip(f *testing.F) {
	f.Add(int64(1), []byte("hello"))
	f.Add(int64(2), []byte(""))
	f.Add(int64(3), bytes.Repeat([]byte("ptx "), 100))
	f.Add(int64(4), []byte{0, 1, 2, 3, 255})
	f.Add(int64(-7), []byte("ünïcödé/κ"))
	f.Fuzz(func(t *testing.T, seed int64, blob []byte) {
		rng := rand.New(rand.NewSource(seed))
		files := randomTree(rng, blob)
		level := Level(rng.Intn(4))
		var buf bytes.Buffer
		w := NewWriter(&buf, &WriterOptions{SegmentSize: MinSegmentSize, Level: level, Jobs: 1 + rng.Intn(3)})
		for _, fl := range files {
			var err error
			if fl.Dir {
				err = w.Mkdir(fl.Name, fs.FileMode(fl.Mode), time.Unix(fl.Sec, int64(fl.Nsec)))
			} else {
				err = w.WriteFile(fl.Name, fs.FileMode(fl.Mode), time.Unix(fl.Sec, int64(fl.Nsec)), fl.Data)
			}
			if err != nil {
				t.Fatalf("%s: %v", fl.Name, err)
			}
		}
		if err := w.SetMeta("origin", string(blob[:min(len(blob), 3)])); err != nil && !errors.Is(err, ErrFormat) {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		data := buf.Bytes()
		r, err := NewReaderBytes(data)
		if err != nil {
			t.Fatalf("reading what the Writer wrote: %v", err)
		}
		if err := r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 2}); err != nil {
			t.Fatal(err)
		}
		if r.FileDigest() != w.Digest() {
			t.Fatal("file digest differs from the Writer's")
		}
		for _, fl := range files {
			fi, err := r.Stat(fl.Name)
			if err != nil {
				t.Fatal(err)
			}
			if fi.IsDir() != fl.Dir || fi.Mode().Perm() != fs.FileMode(fl.Mode) || !fi.ModTime().Equal(time.Unix(fl.Sec, int64(fl.Nsec))) {
				t.Fatalf("%s: got %v %v", fl.Name, fi.Mode(), fi.ModTime())
			}
			if !fl.Dir {
				got, err := fs.ReadFile(r, fl.Name)
				if err != nil || !bytes.Equal(got, fl.Data) {
					t.Fatalf("%s: content differs (%v)", fl.Name, err)
				}
			}
		}
		if again := rewrite(t, r, MinSegmentSize, level); !bytes.Equal(again, data) {
			t.Fatalf("parse-then-rewrite gives %d bytes that differ from the %d read", len(again), len(data))
		}
	})
}

// randomTree makes up to 12 entries from rng and blob: names from a small
// alphabet (with unicode), contents cut from blob, repeated to cross
// segment boundaries, duplicated, or empty. It lists the parents first and
// files in an arbitrary order (which fixes the data order).
func randomTree(rng *rand.Rand, blob []byte) []raw.File {
	comps := []string{"a", "b", "κ", "ü.json", "k.ptx", "x.cubin", "dir", "z"}
	seen := map[string]bool{}
	var out []raw.File
	var contents [][]byte
	n := rng.Intn(12)
	for i := 0; i < n; i++ {
		depth := 1 + rng.Intn(3)
		var parts []string
		for range depth {
			parts = append(parts, comps[rng.Intn(len(comps))])
		}
		name := strings.Join(parts, "/")
		// Parents must be directories, not files.
		ok := !seen[name]
		for p := path.Dir(name); p != "." && ok; p = path.Dir(p) {
			if seen[p] {
				ok = isDir(out, p)
			}
		}
		if !ok {
			continue
		}
		for p := path.Dir(name); p != "."; p = path.Dir(p) {
			if !seen[p] {
				seen[p] = true
				out = append(out, raw.File{Name: p, Dir: true, Mode: 0o755, Sec: rng.Int63n(1 << 40), Nsec: uint32(rng.Intn(1e9))})
			}
		}
		seen[name] = true
		f := raw.File{Name: name, Mode: uint16(rng.Intn(0o1000)), Sec: rng.Int63n(1<<40) - 1<<39, Nsec: uint32(rng.Intn(1e9))}
		switch rng.Intn(6) {
		case 0:
			f.Dir = true
		case 1: // empty
			f.Data = []byte{}
		case 2:
			if len(contents) > 0 {
				f.Data = contents[rng.Intn(len(contents))]
				break
			}
			fallthrough
		case 3: // big: crosses segment boundaries
			if len(blob) > 0 {
				n := rng.Intn(3 * MinSegmentSize)
				f.Data = bytes.Repeat(blob, n/len(blob)+1)[:n]
			}
		default:
			lo := rng.Intn(len(blob) + 1)
			f.Data = blob[lo : lo+rng.Intn(len(blob)-lo+1)]
		}
		if !f.Dir && f.Data == nil {
			f.Data = []byte{}
		}
		if len(f.Data) > 0 {
			contents = append(contents, f.Data)
		}
		out = append(out, f)
	}
	return out
}

func isDir(fs []raw.File, name string) bool {
	for _, f := range fs {
		if f.Name == name {
			return f.Dir
		}
	}
	return false
}

// hostileSizes are small inputs that declare enormous counts and sizes.
func hostileSizes() map[string][]byte {
	m := map[string][]byte{}
	b := raw.New(MinSegmentSize)
	b.EntryCount = raw.U32(MaxEntries)
	m["entry count at the limit"] = b.Encode()
	b = raw.New(MinSegmentSize)
	b.MetaCount = raw.U32(MaxMeta)
	m["meta count at the limit"] = b.Encode()
	b = raw.New(MinSegmentSize)
	b.DataLength = MaxDataLen
	b.SegmentCount = raw.U32(uint32(MaxDataLen / MinSegmentSize))
	m["2^28 segments declared"] = b.Encode()
	b = raw.New(MaxSegmentSize)
	b.DataLength = MaxSegmentSize
	b.Segments = [][]byte{{0}}
	b.Entries = []raw.Entry{{Name: "f", Kind: raw.KindFile, Size: MaxSegmentSize}}
	m["one 64 MiB segment of 1 byte"] = b.Encode()
	return m
}

// TestHugeDeclaredSizesFailFast checks that inputs declaring huge counts
// and sizes fail at once, allocating in proportion to their own size.
func TestHugeDeclaredSizesFailFast(t *testing.T) {
	for name, data := range hostileSizes() {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			before := totalAlloc()
			_, err := NewReaderBytes(data)
			used := totalAlloc() - before
			if err == nil && name != "one 64 MiB segment of 1 byte" {
				t.Fatal("accepted")
			}
			if err != nil && !isSentinel(err) {
				t.Fatalf("%v is not a sentinel", err)
			}
			if used > allocBound(len(data)) || time.Since(start) > 2*time.Second {
				t.Fatalf("%d-byte input: %d bytes allocated in %v", len(data), used, time.Since(start))
			}
		})
	}
}

// hugeEntryBundle is an 82 KiB bundle that passes every structural check
// and declares one regular file of 2^40 bytes (16384 segments of 64 MiB,
// each 1 byte long, which does not decompress).
func hugeEntryBundle() []byte {
	b := raw.New(MaxSegmentSize)
	n := 1 << 14
	b.DataLength = uint64(n) * MaxSegmentSize
	for range n {
		b.Segments = append(b.Segments, []byte{0})
	}
	b.Entries = []raw.Entry{{Name: "huge", Kind: raw.KindFile, Mode: 0o644, Size: b.DataLength}}
	return b.Encode()
}

// TestHugeEntryReadIsBounded reads a declared-huge entry every way there is:
// each must fail with ErrChecksum at the first segment, not allocate what
// the index declares. It runs in a child process, because the failure it
// guards against is a fatal out-of-memory error that no recover catches.
func TestHugeEntryReadIsBounded(t *testing.T) {
	if os.Getenv("KBUNDLE_TEST_HUGE_ENTRY_CHILD") == "1" {
		hugeEntryChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHugeEntryReadIsBounded$", "-test.v")
	cmd.Env = append(os.Environ(), "KBUNDLE_TEST_HUGE_ENTRY_CHILD=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		if i := bytes.Index(out, []byte("runtime stack:")); i > 0 {
			out = out[:i] // the message, not the stacks
		}
		t.Fatalf("reading a bundle that declares a 1 TiB entry: %v\n%s", err, out)
	}
}

func hugeEntryChild(t *testing.T) {
	data := hugeEntryBundle()
	r, err := NewReaderBytes(data)
	if err != nil {
		t.Fatalf("the crafted bundle should pass the structural checks: %v", err)
	}
	const limit = 512 << 20 // a few 64 MiB segment buffers
	for _, read := range []struct {
		name string
		fn   func() error
	}{
		{"ReadEntry", func() error { _, err := r.ReadEntry("huge"); return err }},
		{"fs.ReadFile", func() error { _, err := fs.ReadFile(r, "huge"); return err }},
		{"Open+Read", func() error {
			f, err := r.Open("huge")
			if err != nil {
				return err
			}
			defer f.Close()
			_, err = io.Copy(io.Discard, f)
			return err
		}},
		{"Verify", func() error { return r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 2}) }},
		{"Extract", func() error {
			_, err := r.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), nil)
			return err
		}},
	} {
		before := totalAlloc()
		err := read.fn()
		used := totalAlloc() - before
		// Extract refuses at once when the declared size does not fit
		// (ErrNoSpace, W4); where it fits, it fails at the first segment.
		if !errors.Is(err, ErrChecksum) && !(read.name == "Extract" && errors.Is(err, ErrNoSpace)) {
			t.Errorf("%s: %v, want ErrChecksum", read.name, err)
		}
		if used > limit {
			t.Errorf("%s: allocated %d MiB", read.name, used>>20)
		}
		fmt.Printf("%s: %v, %d MiB allocated\n", read.name, err, used>>20)
	}
}

// FuzzLayerSet stacks random layers into a set (names from a small
// alphabet, so that layers disagree about kinds and share cache units;
// an entry the Writer refuses, a name below a file of its own layer, is
// left out), then checks the tree rule and the kind-change rule end to
// end: the merged view is a tree, a load (Stage: overlayLayer) installs
// exactly that view, and a merge writes a base that the reader accepts
// and that holds the same view.
func FuzzLayerSet(f *testing.F) {
	f.Add([]byte{1, 3, 0, 0, 9, 0x81, 0, 1, 2})
	f.Add([]byte{2, 2, 0x02, 0, 1, 1, 0x80, 0, 2, 1, 0x00, 0, 3})
	f.Add([]byte{3, 4, 0x82, 2, 3, 0, 0, 0x01, 2, 3, 1, 1, 0x42, 0, 2, 0, 3, 2, 0x81, 4, 1, 1, 0x00, 4, 2})
	f.Add([]byte("the job replaced a directory by a file"))
	f.Fuzz(func(t *testing.T, ops []byte) {
		next := func() int {
			if len(ops) == 0 {
				return 0
			}
			b := ops[0]
			ops = ops[1:]
			return int(b)
		}
		comps := []string{"a", "b", "f.nbi", "f.1.nbc", "f.2.nbc"}
		dir := t.TempDir()
		set := filepath.Join(dir, "s.kbundle")
		small := LayerOptions{Writer: WriterOptions{SegmentSize: MinSegmentSize, Jobs: 1}}
		layers := 1 + next()%4
		for range layers {
			n := next() % 7
			if _, err := WriteLayer(context.Background(), set, &small, func(w *Writer) error {
				for range n {
					op := next()
					parts := make([]string, 1+op%3)
					for i := range parts {
						parts[i] = comps[next()%len(comps)]
					}
					name := strings.Join(parts, "/")
					var err error
					if op&0x80 != 0 {
						err = w.Mkdir(name, 0o755, time.Unix(int64(op), 0))
					} else {
						err = w.WriteFile(name, 0o644, time.Unix(int64(op), 0), []byte{byte('A' + op>>3&3)})
					}
					if err != nil && !errors.Is(err, ErrFormat) && !errors.Is(err, ErrInsecurePath) {
						return err // not the tree rule or a duplicate name
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
		}
		s, err := OpenSet(set, &OpenOptions{Trusted: true})
		if err != nil {
			t.Fatalf("the set does not open: %v", err)
		}
		merged := s.Merged(CacheUnit)
		es := make([]Entry, len(merged))
		for i := range merged {
			es[i] = merged[i].Entry
		}
		if err := checkTree(es); err != nil {
			s.Close()
			t.Fatalf("the merged view is not a tree: %v", err)
		}
		want, cd := viewSpec(t, s), s.ContentDigest(CacheUnit)
		dest := filepath.Join(dir, "dest")
		st, err := s.Read[0].Stage(context.Background(), dest, s.StageOptions(ExtractOptions{Jobs: 1}))
		if err != nil {
			s.Close()
			t.Fatalf("load: %v", err)
		}
		err = st.Install()
		st.Commit()
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := treeSpec(t, dest); !equalMaps(got, want) {
			t.Fatalf("loaded tree %v, want the merged view %v", got, want)
		}
		res, err := MergeSet(context.Background(), set, &MergeOptions{LayerOptions: small, Unit: CacheUnit})
		if err != nil {
			t.Fatalf("merge: %v", err)
		}
		if res.Folded > 0 && res.Content != cd {
			t.Fatalf("merged base's content %v, the view's %v", res.Content, cd)
		}
		s, err = OpenSet(set, &OpenOptions{Trusted: true})
		if err != nil {
			t.Fatalf("the merged set does not open: %v", err)
		}
		defer s.Close()
		if got := viewSpec(t, s); s.HasDeltas() || !equalMaps(got, want) {
			t.Fatalf("after merge: %d bundles, view %v, want %v", len(s.Read), got, want)
		}
	})
}
