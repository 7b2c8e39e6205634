package broadcast

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/kbundle/kbundle/bundle"
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
			results := onEveryRank(fakeWorld(make([]int, c.np)...), func(comm *fakeComm) error {
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
			want := int((fi.Size() + chunk - 1) / chunk)
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
	t.Setenv(ChunkEnv, "777")
	var s Stats
	r, err := LoadBundle(fakeWorld(0)[0], WithStats(&s))
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
		{"bad chunk size", func(t *testing.T, file string) []Option {
			t.Setenv(ChunkEnv, "-5")
			return []Option{WithPath(file)}
		}, nil, ChunkEnv},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, file := testBundle(t)
			opts := c.setup(t, file)
			errs := onEveryRank(fakeWorld(0, 0, 0), func(comm *fakeComm) error {
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

// TestTransferDamage: one rank receives a damaged copy; every rank fails
// with that rank's reason.
func TestTransferDamage(t *testing.T) {
	_, file := testBundle(t)
	world := fakeWorld(0, 0, 0, 0)
	world[2].corrupt = func(b []byte) {
		if len(b) != statusLen {
			b[len(b)/2] ^= 1
		}
	}
	errs := onEveryRank(world, func(comm *fakeComm) error {
		_, err := LoadBundle(comm, WithPath(file))
		return err
	})
	for rank, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Rank != 2 || e.Ranks != 1 || !errors.Is(err, ErrTransfer) || !errors.Is(err, ErrNoBundle) {
			t.Errorf("rank %d: %v", rank, err)
		}
		if err != nil && errs[0] != nil && err.Error() != errs[0].Error() {
			t.Errorf("rank %d: %q, rank 0: %q", rank, err, errs[0])
		}
	}
}

func TestLoadToNodes(t *testing.T) {
	_, file := testBundle(t)
	base := t.TempDir()
	world := fakeWorld(0, 0, 1, 1, 1)
	var afterCalls counter
	results := onEveryRank(world, func(comm *fakeComm) *NodeResult {
		dest := filepath.Join(base, "node", string(rune('0'+comm.g.nodes[comm.rank])))
		res, err := LoadToNodes(comm, NodeOptions{Dest: dest, After: func(d string, r *bundle.Reader) error {
			afterCalls.add()
			if d != dest {
				t.Errorf("After got %q, want %q", d, dest)
			}
			return nil
		}}, WithPath(file), WithChunkSize(4096))
		if err != nil {
			t.Errorf("rank %d: %v", comm.rank, err)
		}
		return res
	})
	for rank, res := range results {
		if res == nil {
			continue
		}
		leader := rank == 0 || rank == 2
		if res.Leader != leader || res.Nodes != 2 || (res.Reader != nil) != leader {
			t.Errorf("rank %d: leader %v nodes %d reader %v", rank, res.Leader, res.Nodes, res.Reader != nil)
		}
	}
	if afterCalls.n != 2 {
		t.Errorf("After ran %d times, want 2", afterCalls.n)
	}
	for _, n := range []string{"0", "1"} {
		rc, err := bundle.Open(file, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameTree(t, rc.Reader, filepath.Join(base, "node", n))
		rc.Close()
	}
}

// TestLoadToNodesExtractFailure: the leader of node 1 cannot write its
// destination; every rank gets its reason.
func TestLoadToNodesExtractFailure(t *testing.T) {
	_, file := testBundle(t)
	base := t.TempDir()
	blocker := filepath.Join(base, "file")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	world := fakeWorld(0, 0, 1, 1)
	errs := onEveryRank(world, func(comm *fakeComm) error {
		dest := filepath.Join(base, "ok")
		if comm.g.nodes[comm.rank] == 1 {
			dest = filepath.Join(blocker, "sub") // parent is a file
		}
		_, err := LoadToNodes(comm, NodeOptions{Dest: dest}, WithPath(file))
		return err
	})
	for rank, err := range errs {
		var e *Error
		if !errors.As(err, &e) || e.Rank != 2 || errors.Is(err, ErrNoBundle) {
			t.Errorf("rank %d: %v", rank, err)
		}
		if err != nil && err.Error() != errs[0].Error() {
			t.Errorf("rank %d: %q, rank 0: %q", rank, err, errs[0])
		}
	}
}

// TestLoadToNodesNoBundle: rank 0's reason reaches the non-leaders too.
func TestLoadToNodesNoBundle(t *testing.T) {
	base := t.TempDir()
	errs := onEveryRank(fakeWorld(0, 0, 1, 1), func(comm *fakeComm) error {
		_, err := LoadToNodes(comm, NodeOptions{Dest: filepath.Join(base, "d")}, WithPath(filepath.Join(base, "missing")))
		return err
	})
	for rank, err := range errs {
		if !errors.Is(err, ErrNoBundle) || !errors.Is(err, fs.ErrNotExist) || err.Error() != errs[0].Error() {
			t.Errorf("rank %d: %v", rank, err)
		}
	}
	if _, err := os.Stat(filepath.Join(base, "d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("destination exists after a failed load: %v", err)
	}
}

type counter struct {
	mu sync.Mutex
	n  int
}

func (c *counter) add() {
	c.mu.Lock()
	c.n++
	c.mu.Unlock()
}
