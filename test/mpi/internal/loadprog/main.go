// Command loadprog calls broadcast.LoadBundle on every rank, for the
// tests in test/mpi. With -tree it checks that every rank holds the same
// content as the source tree (names, kinds, modes, nanosecond mtimes and
// bytes), collectively: each rank hashes what it received, rank 0's hash
// is broadcast and every rank compares. It prints "ok rank R size N
// entries E" on success, or "error rank R: ..." and exits 3 when the
// bundle is unusable (ErrNoBundle), 1 otherwise. Test support only.
package main

import (
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/mpi"
)

func main() {
	path := flag.String("bundle", "", "bundle file (default: $KBUNDLE_CACHE_DIR/cache.kbundle)")
	tree := flag.String("tree", "", "source tree the bundle must equal")
	flag.Parse()
	if err := mpi.Init(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	w := mpi.World()
	code := run(w, *path, *tree)
	if err := mpi.Finalize(); err != nil && code == 0 {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

func run(w *mpi.Comm, path, tree string) int {
	var opts []broadcast.Option
	if path != "" {
		opts = append(opts, broadcast.WithPath(path))
	}
	if v := os.Getenv("KBUNDLE_BCAST_CHUNK"); v != "" { // the test's knob for many small chunks
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			fmt.Printf("error rank %d: KBUNDLE_BCAST_CHUNK: %v\n", w.Rank(), err)
			return 2
		}
		opts = append(opts, broadcast.WithChunkSize(n))
	}
	var st broadcast.Stats
	r, err := broadcast.LoadBundle(w, append(opts, broadcast.WithStats(&st))...)
	if err != nil {
		fmt.Printf("error rank %d: %v\n", w.Rank(), err)
		if errors.Is(err, broadcast.ErrNoBundle) {
			return 3
		}
		return 1
	}
	sum := hashBundle(r)
	bad := int64(0)
	if tree != "" {
		if want, err := hashTree(tree); err != nil {
			fmt.Printf("error rank %d: %v\n", w.Rank(), err)
			bad = 1
		} else if want != sum {
			fmt.Printf("error rank %d: content differs from %s\n", w.Rank(), tree)
			bad = 1
		}
	}
	root := sum
	if err := w.Bcast(root[:], 0); err != nil {
		fmt.Printf("error rank %d: %v\n", w.Rank(), err)
		return 1
	}
	if root != sum {
		fmt.Printf("error rank %d: content differs from rank 0's\n", w.Rank())
		bad = 1
	}
	n, err := w.AllreduceInt64(bad, mpi.Sum)
	if err != nil || n != 0 {
		fmt.Printf("error rank %d: %d ranks differ (%v)\n", w.Rank(), n, err)
		return 1
	}
	fmt.Printf("ok rank %d size %d entries %d chunks %d\n", w.Rank(), w.Size(), len(r.Entries()), st.Chunks)
	return 0
}

type item struct {
	name    string
	dir     bool
	mode    fs.FileMode
	mtimeNs int64
	content []byte
}

func hashItems(items []item) [32]byte {
	sort.Slice(items, func(i, j int) bool { return items[i].name < items[j].name })
	h := sha256.New()
	for _, it := range items {
		fmt.Fprintf(h, "%q %v %o %d %d\n", it.name, it.dir, it.mode.Perm(), it.mtimeNs, len(it.content))
		h.Write(it.content)
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

func hashBundle(r *bundle.Reader) [32]byte {
	var items []item
	for _, e := range r.Entries() {
		it := item{name: e.Name, dir: e.Dir, mode: e.Mode, mtimeNs: e.ModTime.UnixNano()}
		if !e.Dir {
			b, err := r.ReadEntry(e.Name)
			if err != nil {
				b = []byte("unreadable: " + err.Error())
			}
			it.content = b
		}
		items = append(items, it)
	}
	return hashItems(items)
}

func hashTree(dir string) ([32]byte, error) {
	var items []item
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		it := item{name: filepath.ToSlash(rel), dir: d.IsDir(), mode: fi.Mode(), mtimeNs: fi.ModTime().UnixNano()}
		if !d.IsDir() {
			if it.content, err = os.ReadFile(p); err != nil {
				return err
			}
		}
		items = append(items, it)
		return nil
	})
	return hashItems(items), err
}
