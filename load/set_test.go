package load_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/broadcast"
	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/load"
)

// layer writes one layer (or the base) of the set at path.
func layer(t *testing.T, path string, files map[string]string) {
	t.Helper()
	_, err := bundle.WriteLayer(context.Background(), path, nil, func(w *bundle.Writer) error {
		for n, c := range files {
			if err := w.WriteFile(n, 0o644, time.Unix(1e9, 0), []byte(c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readTree is dest's files (not the install record), name → content.
func readTree(t *testing.T, dest string) map[string]string {
	t.Helper()
	got := map[string]string{}
	filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Error(err)
			return nil
		}
		if !d.IsDir() && d.Name() != bundle.InstalledMarker {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dest, p)
			got[rel] = string(b)
		}
		return nil
	})
	return got
}

// A layered set (a base and the layers harvest wrote) loads as its merged
// view on every node: later layers win per cache unit; the install
// record names every layer and the set's content digest; loading it again
// is a no-op; a damaged layer fails the load everywhere, leaving nothing.
func TestRunLayeredSet(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "cache.kbundle")
	h := strings.Repeat("K", 52)
	layer(t, set, map[string]string{"numba/f.nbi": "i1", "numba/f.1.nbc": "c1", "numba/g.nbi": "g",
		"triton/" + h + "/k.cubin": "old", "triton/" + h + "/k.json": "oldjson"})
	layer(t, set, map[string]string{"numba/f.nbi": "i2", "numba/f.1.nbc": "c1", "numba/f.2.nbc": "c2"})
	layer(t, set, map[string]string{"triton/" + h + "/k.cubin": "new"})
	want := map[string]string{"numba/f.nbi": "i2", "numba/f.1.nbc": "c1", "numba/f.2.nbc": "c2", "numba/g.nbi": "g",
		"triton/" + h + "/k.cubin": "new"}
	s, err := bundle.OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	content := bundle.FormatDigest(s.ContentDigest(bundle.CacheUnit))
	s.Close()

	nodes := []int{0, 0, 1, 1, 2}
	base := t.TempDir()
	plan := func(rank int) load.Plan {
		return load.Plan{Bundle: set, Dest: filepath.Join(base, fmt.Sprintf("n%d", nodes[rank]), "dest"),
			Host: fmt.Sprintf("kbn%d", nodes[rank]), Window: 1, ChunkSize: 4093}
	}
	sums, errs := run(t, nodes, plan, nil)
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	for n := 0; n < 3; n++ {
		dest := filepath.Join(base, fmt.Sprintf("n%d", n), "dest")
		if got := readTree(t, dest); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("node %d: %v, want %v", n, got, want)
		}
		rec, err := bundle.ReadInstallRecord(dest)
		if err != nil {
			t.Fatal(err)
		}
		if rec.ContentDigest != content || len(rec.Layers) != 3 || !strings.HasPrefix(rec.Layers[2].Path, bundle.LayerDir(set)) {
			t.Errorf("node %d record: %s, layers %+v; want %s and 3 layers", n, rec.ContentDigest, rec.Layers, content)
		}
		nothingUnder(t, filepath.Join(base, fmt.Sprintf("n%d", n)), "dest")
	}
	for r, s := range sums {
		if s.ContentDigest != content || s.Entries != len(want)+3 { // and numba/, triton/, triton/<h>/
			t.Errorf("rank %d: content %s, %d entries", r, s.ContentDigest, s.Entries)
		}
	}
	sums, errs = run(t, nodes, plan, nil)
	for r, err := range errs {
		if err != nil || !sums[r].AlreadyInstalled && sums[r].Leader {
			t.Fatalf("second load, rank %d: %v, %+v", r, err, sums[r])
		}
	}

	// A damaged layer: the same error everywhere, no DEST anywhere.
	ls, _ := bundle.ListLayers(set, 0)
	b, _ := os.ReadFile(ls[1].Path)
	b[len(b)/2] ^= 0xff
	os.Chmod(ls[1].Path, 0o644)
	if err := os.WriteFile(ls[1].Path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	fresh := t.TempDir()
	_, errs = run(t, nodes, func(rank int) load.Plan {
		p := plan(rank)
		p.Dest = filepath.Join(fresh, fmt.Sprintf("n%d", nodes[rank]), "dest")
		return p
	}, nil)
	for r, err := range errs {
		if err == nil || err.Error() != errs[0].Error() || !strings.Contains(err.Error(), ls[1].Path) {
			t.Fatalf("damaged layer, rank %d: %v (rank 0: %v)", r, err, errs[0])
		}
		if !errors.Is(err, broadcast.ErrNoBundle) {
			t.Errorf("rank %d: %v does not match ErrNoBundle", r, err)
		}
	}
	for n := 0; n < 3; n++ {
		nothingUnder(t, filepath.Join(fresh, fmt.Sprintf("n%d", n)))
	}
}
