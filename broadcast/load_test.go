package broadcast_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	. "github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/broadcast/broadcasttest"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
)

// testTree writes a small cache tree and returns its directory.
func testTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	files := map[string]string{
		"a/kernel.bin":   strings.Repeat("\x00\x01kernel", 700),
		"a/kernel.json":  `{"name":"k"}`,
		"b/c/deep.cubin": strings.Repeat("xyz", 5000),
		"top":            "top level",
		"empty":          "",
	}
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "emptydir"), 0o700); err != nil {
		t.Fatal(err)
	}
	return dir
}

// testBundle packs a test tree into a private directory and returns the
// tree and the bundle's path.
func testBundle(t *testing.T) (tree, file string) {
	t.Helper()
	tree = testTree(t)
	out := filepath.Join(t.TempDir(), "b", BundleName)
	if err := os.Mkdir(filepath.Dir(out), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := bundle.Pack(context.Background(), tree, out, nil); err != nil {
		t.Fatal(err)
	}
	return tree, out
}

// sameTree checks that the bundle r holds exactly the files of dir.
func sameTree(t *testing.T, r *bundle.Reader, dir string) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == bundle.InstalledMarker {
			return nil // kbundle's mark on a tree it extracted
		}
		n++
		fi, err := r.Stat(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if fi.IsDir() != d.IsDir() {
			t.Errorf("%s: dir %v in bundle", rel, fi.IsDir())
		}
		if d.IsDir() {
			return nil
		}
		want, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		got, err := r.ReadEntry(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: content differs", rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Entries()) != n {
		t.Errorf("bundle has %d entries, tree %d", len(r.Entries()), n)
	}
}

func TestLoadBundle(t *testing.T) {
	tree, file := testBundle(t)
	fi, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		np    int
		chunk int64
	}{
		{"np1", 1, 0},
		{"np2", 2, 0},
		{"np4", 4, 0},
		{"np3 chunk 1000", 3, 1000},
		{"np2 chunk 1", 2, 1},
		{"np4 chunk size-1", 4, fi.Size() - 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			stats := make([]Stats, c.np)
			results := broadcasttest.OnEveryRank(broadcasttest.World(make([]int, c.np)...), func(comm *broadcasttest.Comm) error {
				opts := []Option{WithPath(file), WithStats(&stats[comm.Rank()])}
				if c.chunk != 0 {
					opts = append(opts, WithChunkSize(c.chunk))
				}
				r, err := LoadBundle(comm, opts...)
				if err != nil {
					return err
				}
				sameTree(t, r, tree)
				return nil
			})
			for rank, err := range results {
				if err != nil {
					t.Errorf("rank %d: %v", rank, err)
				}
			}
			chunk := c.chunk
			if chunk == 0 {
				chunk = DefaultChunkSize
			}
			rc, err := bundle.Open(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			body := rc.BodyEnd() - rc.BodyStart()
			rc.Close()
			want := int((body + chunk - 1) / chunk)
			for rank, s := range stats {
				if s.Chunks != want || s.Size != fi.Size() {
					t.Errorf("rank %d: %d chunks of %d bytes, want %d of %d", rank, s.Chunks, s.Size, want, fi.Size())
				}
			}
			if stats[0].Path != file {
				t.Errorf("rank 0 path %q", stats[0].Path)
			}
		})
	}
}

func TestLoadBundleFromEnvironment(t *testing.T) {
	tree, file := testBundle(t)
	t.Setenv(CacheDirEnv, filepath.Dir(file))
	var s Stats
	r, err := LoadBundle(broadcasttest.World(0)[0], WithStats(&s), WithChunkSize(1))
	if err != nil {
		t.Fatal(err)
	}
	sameTree(t, r, tree)
	if s.Path != file || s.Chunks < 2 {
		t.Errorf("path %q, %d chunks", s.Path, s.Chunks)
	}
}

// TestLoadBundleFailures checks that a bundle rank 0 cannot use gives
// the same error, with rank 0's reason, on every rank.
func TestLoadBundleFailures(t *testing.T) {
	for _, c := range []struct {
		name   string
		setup  func(t *testing.T, file string) []Option
		want   []error
		reason string
	}{
		{"missing", func(t *testing.T, file string) []Option {
			return []Option{WithPath(file + ".nope")}
		}, []error{ErrNoBundle, fs.ErrNotExist}, "no such file"},
		{"bit flipped", func(t *testing.T, file string) []Option {
			flip(t, file, 100)
			return []Option{WithPath(file)}
		}, []error{ErrNoBundle}, ""},
		{"truncated", func(t *testing.T, file string) []Option {
			fi, _ := os.Stat(file)
			if err := os.Truncate(file, fi.Size()-10); err != nil {
				t.Fatal(err)
			}
			return []Option{WithPath(file)}
		}, []error{ErrNoBundle, bundle.ErrFormat}, ""},
		{"world-writable", func(t *testing.T, file string) []Option {
			if err := os.Chmod(file, 0o666); err != nil {
				t.Fatal(err)
			}
			return []Option{WithPath(file)}
		}, []error{ErrNoBundle, bundle.ErrUntrusted}, "chmod go-w"},
		{"directory writable by others", func(t *testing.T, file string) []Option {
			if err := os.Chmod(filepath.Dir(file), 0o777); err != nil {
				t.Fatal(err)
			}
			return []Option{WithDir(filepath.Dir(file))}
		}, []error{ErrNoBundle, bundle.ErrUntrusted}, "directory"},
		{"nothing given", func(t *testing.T, file string) []Option {
			t.Setenv(CacheDirEnv, "")
			return nil
		}, []error{ErrNoBundle}, CacheDirEnv},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, file := testBundle(t)
			opts := c.setup(t, file)
			errs := broadcasttest.OnEveryRank(broadcasttest.World(0, 0, 0), func(comm *broadcasttest.Comm) error {
				r, err := LoadBundle(comm, opts...)
				if r != nil {
					t.Errorf("rank %d: reader with error %v", comm.Rank(), err)
				}
				return err
			})
			for rank, err := range errs {
				if err == nil {
					t.Fatalf("rank %d: no error", rank)
				}
				if err.Error() != errs[0].Error() {
					t.Errorf("rank %d: %q, rank 0: %q", rank, err, errs[0])
				}
				var e *Error
				if !errors.As(err, &e) || e.Rank != 0 {
					t.Errorf("rank %d: %T %v, want *Error from rank 0", rank, err, err)
				}
				for _, w := range c.want {
					if !errors.Is(err, w) {
						t.Errorf("rank %d: %v does not match %v", rank, err, w)
					}
				}
				if c.want == nil && errors.Is(err, ErrNoBundle) {
					t.Errorf("rank %d: %v matches ErrNoBundle", rank, err)
				}
				if !strings.Contains(err.Error(), c.reason) {
					t.Errorf("rank %d: %q does not say %q", rank, err, c.reason)
				}
			}
		})
	}
}

func flip(t *testing.T, file string, off int64) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x10
	if err := os.WriteFile(file, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestTransferDamage: one rank receives a damaged copy of the body;
// every rank fails with that rank's reason, whether the bundle goes in
// one broadcast after the status (it fits a chunk) or in chunks.
func TestTransferDamage(t *testing.T) {
	_, file := testBundle(t)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	r, err := bundle.NewReaderBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	prelude, err := r.Prelude()
	if err != nil {
		t.Fatal(err)
	}
	body := len(b) - len(prelude)
	for _, c := range []struct {
		name  string
		chunk int64
		nth   int // the broadcast that carries the body
		at    int // the body's middle in it
	}{
		{"one broadcast", 0, 2, len(prelude) + body/2}, // the status, then the prelude and body
		{"in chunks", int64(len(b)) - 1, 3, body / 2},  // the status, the prelude, then the body
	} {
		world := broadcasttest.World(0, 0, 0, 0)
		n := 0
		world[2].Corrupt = func(b []byte) {
			if n++; n == c.nth {
				b[c.at] ^= 1
			}
		}
		errs := broadcasttest.OnEveryRank(world, func(comm *broadcasttest.Comm) error {
			opts := []Option{WithPath(file)}
			if c.chunk != 0 {
				opts = append(opts, WithChunkSize(c.chunk))
			}
			_, err := LoadBundle(comm, opts...)
			return err
		})
		for rank, err := range errs {
			var e *Error
			if !errors.As(err, &e) || e.Rank != 2 || e.Ranks != 1 || !errors.Is(err, ErrTransfer) || !errors.Is(err, ErrNoBundle) {
				t.Errorf("%s: rank %d: %v", c.name, rank, err)
			}
			if err != nil && errs[0] != nil && err.Error() != errs[0].Error() {
				t.Errorf("%s: rank %d: %q, rank 0: %q", c.name, rank, err, errs[0])
			}
		}
	}
}

// TestShortPrelude: a status (from a non-conforming rank 0, here written
// by hand) announcing a prelude shorter than a bundle's header and trailer
// is refused with ErrStatus by every receiver; it made LoadBundle's sink
// slice out of range.
func TestShortPrelude(t *testing.T) {
	cs := broadcasttest.World(0, 0)
	msg := make([]byte, 1088)
	copy(msg, "KBs2")
	le := binary.LittleEndian
	le.PutUint64(msg[20:], 8)   // chunk
	le.PutUint64(msg[28:], 100) // size
	le.PutUint64(msg[56:], 5)   // prelude
	done := make(chan any, 1)
	var err error
	go func() {
		defer func() { done <- recover() }()
		_, err = LoadBundle(cs[1])
	}()
	// Rank 0 sends the status, then the prelude and body as announced; it
	// blocks on the prelude (rank 1 has stopped), and is abandoned.
	go func() {
		c := cs[0]
		c.Bcast(msg, 0)
		c.Bcast(make([]byte, 5), 0)
		for off := 5; off < 100; off += 8 {
			c.Bcast(make([]byte, min(8, 100-off)), 0)
		}
		c.AllreduceInt64(0, 0)
	}()
	if p := <-done; p != nil {
		t.Fatalf("rank 1 panicked: %v", p)
	}
	if !errors.Is(err, ErrStatus) {
		t.Errorf("rank 1: %v, want ErrStatus", err)
	}
}

// TestBcastBytes: every rank gets rank 0's bytes, nil for none, and a
// length past the limit is refused on every rank; bytes that fit beside
// the length take one broadcast, others two.
func TestBcastBytes(t *testing.T) {
	long := bytes.Repeat([]byte("a path "), 200)
	const inlineBytes = 1024 - 8 // BcastBytes's, beside the length
	for _, c := range []struct {
		b     []byte
		limit uint64
		ok    bool
		calls int
	}{
		{[]byte("the set's path"), 64, true, 1},
		{nil, 64, true, 1},
		{make([]byte, 65), 64, false, 1},
		{long[:inlineBytes], 1 << 16, true, 1},
		{long[:inlineBytes+1], 1 << 16, true, 2},
		{long, 1 << 16, true, 2},
		{long, 100, false, 1},
	} {
		world := broadcasttest.World(0, 0, 1)
		var calls atomic.Int64
		for _, w := range world {
			w.Trace = func(string, int) { calls.Add(1) }
		}
		got := broadcasttest.OnEveryRank(world, func(comm *broadcasttest.Comm) string {
			var b []byte
			if comm.Rank() == 0 {
				b = c.b
			}
			out, err := BcastBytes(comm, b, c.limit)
			if err != nil {
				return "error"
			}
			return string(out)
		})
		for r, g := range got {
			if want := map[bool]string{true: string(c.b), false: "error"}[c.ok]; g != want {
				t.Errorf("%d bytes, limit %d: rank %d got %q", len(c.b), c.limit, r, g)
			}
		}
		if n := int(calls.Load()) / len(world); n != c.calls {
			t.Errorf("%d bytes, limit %d: %d broadcasts, want %d", len(c.b), c.limit, n, c.calls)
		}
	}
}

// TestAgreeWith checks that the figures riding on an agreement are
// combined on every rank in its one collective, and that a failure still
// names the lowest failing rank with the count of failing ranks, whatever
// the op.
func TestAgreeWith(t *testing.T) {
	for _, c := range []struct {
		op      mpi.Op
		failing []int
		want    []int64 // on success
		calls   int     // collectives on rank 0
	}{
		{mpi.Sum, nil, []int64{6, 30}, 1},
		{mpi.Max, nil, []int64{3, 20}, 1},
		// The first collective; with Max, the count of failing ranks; a
		// minimum and a broadcast per failing rank; the minimum that ends.
		{mpi.Sum, []int{2}, nil, 4},
		{mpi.Max, []int{1, 2}, nil, 7},
	} {
		world := broadcasttest.World(0, 1, 2)
		var calls atomic.Int64
		world[0].Trace = func(string, int) { calls.Add(1) }
		type result struct {
			vals []int64
			err  *Error
		}
		got := broadcasttest.OnEveryRank(world, func(comm *broadcasttest.Comm) result {
			r := comm.Rank()
			var local error
			if slices.Contains(c.failing, r) {
				local = fmt.Errorf("node %d is full", r)
			}
			vals := []int64{int64(r + 1), int64(10 * r)}
			e, err := AgreeWith(comm, local, 8, vals, c.op)
			if err != nil {
				t.Errorf("%v, failing %v: rank %d: %v", c.op, c.failing, r, err)
			}
			return result{vals, e}
		})
		for r, g := range got {
			switch {
			case c.failing == nil && (g.err != nil || !slices.Equal(g.vals, c.want)):
				t.Errorf("%v: rank %d got %v, %v; want %v", c.op, r, g.vals, g.err, c.want)
			case c.failing != nil && (g.err == nil || g.err.Rank != c.failing[0] || g.err.Ranks != len(c.failing) ||
				len(g.err.Reasons) != len(c.failing)):
				t.Errorf("%v, failing %v: rank %d got %+v", c.op, c.failing, r, g.err)
			}
		}
		if n := int(calls.Load()); n != c.calls {
			t.Errorf("%v, failing %v: %d collectives on rank 0, want %d", c.op, c.failing, n, c.calls)
		}
	}
	if _, err := AgreeWith(broadcasttest.World(0)[0], nil, 1, []int64{1}, mpi.Min); err == nil {
		t.Error("AgreeWith took mpi.Min")
	}
}

// failingBody is a bundle's bytes whose body cannot be read past its
// first half once armed (a disk error mid-file).
type failingBody struct {
	b          []byte
	start, end int64 // the body
	armed      bool
}

func (f *failingBody) ReadAt(p []byte, off int64) (int, error) {
	if !f.armed || off+int64(len(p)) <= f.start || off >= f.end {
		return copy(p, f.b[off:]), nil
	}
	n := copy(p[:len(p)/2], f.b[off:])
	return n, errors.New("input/output error")
}

// TestStreamReadError: rank 0 failing to read the body mid-way is rank
// 0's local error (ErrNoBundle, naming the byte), in one broadcast or in
// chunks; the broadcasts still complete on every rank.
func TestStreamReadError(t *testing.T) {
	_, file := testBundle(t)
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		chunk  int64
		chunks func(int) bool // the body's broadcasts: one with the prelude, or several
	}{
		{0, func(n int) bool { return n == 1 }},
		{32, func(n int) bool { return n > 1 }},
	} {
		chunk := c.chunk
		fb := &failingBody{b: b}
		src, err := bundle.NewReader(fb, int64(len(b)))
		if err != nil {
			t.Fatal(err)
		}
		fb.start, fb.end, fb.armed = src.BodyStart(), src.BodyEnd(), true
		type result struct{ local, err error }
		var st0 Stats
		got := broadcasttest.OnEveryRank(broadcasttest.World(0, 1, 2), func(comm *broadcasttest.Comm) result {
			var s *bundle.Reader
			st := new(Stats)
			if comm.Rank() == 0 {
				s, st = src, &st0
			}
			local, err := Stream(comm, s, nil, chunk, nil, st)
			return result{local, err}
		})
		if !c.chunks(st0.Chunks) {
			t.Errorf("chunk %d: the body went in %d broadcasts", chunk, st0.Chunks)
		}
		for r, g := range got {
			if g.err != nil {
				t.Errorf("chunk %d: rank %d: %v", chunk, r, g.err)
			}
			if r == 0 && (!errors.Is(g.local, ErrNoBundle) || !strings.Contains(fmt.Sprint(g.local), "reading at byte")) {
				t.Errorf("chunk %d: rank 0: local %v", chunk, g.local)
			}
			if r != 0 && g.local != nil {
				t.Errorf("chunk %d: rank %d: local %v", chunk, r, g.local)
			}
		}
	}
}
