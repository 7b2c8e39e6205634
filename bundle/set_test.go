package bundle

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeLayer(t *testing.T, path string, files map[string]string) *Published {
	t.Helper()
	p, err := WriteLayer(context.Background(), path, nil, func(w *Writer) error {
		for n, c := range files {
			if err := w.WriteFile(n, 0o644, time.Unix(1, 0), []byte(c)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func setContent(t *testing.T, s *OpenedSet, unit func(string) string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range s.Merged(unit) {
		if e.Dir {
			continue
		}
		f, err := s.Read[e.Layer].Open(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(f.(io.Reader))
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name] = string(b)
	}
	return out
}

func TestSetLayersAndMerge(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.kbundle")
	if _, err := OpenSet(path, nil); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing set: %v, want fs.ErrNotExist", err)
	}
	if err := os.Mkdir(LayerDir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenSet(path, nil); !errors.Is(err, ErrNoSet) {
		t.Fatalf("empty layer directory, no base: %v, want ErrNoSet", err)
	}
	if p := writeLayer(t, path, map[string]string{"a/f.nbi": "i1", "a/f.1.nbc": "c1", "b": "b1"}); !p.Base || p.Path != path {
		t.Fatalf("first layer: %+v, want the base", p)
	}
	p := writeLayer(t, path, map[string]string{"a/f.nbi": "i2", "a/f.2.nbc": "c2"})
	if p.Base || p.Seq != 1 || !strings.HasPrefix(filepath.Base(p.Path), "000001-"+p.Content.String()[:16]) {
		t.Fatalf("second layer: %+v", p)
	}
	unit := func(n string) string {
		if strings.HasPrefix(n, "a/") {
			return "a/f"
		}
		return ""
	}
	s, err := OpenSet(path, &OpenOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	got := setContent(t, s, nil)
	want := map[string]string{"a/f.nbi": "i2", "a/f.1.nbc": "c1", "a/f.2.nbc": "c2", "b": "b1"}
	if !equalMaps(got, want) {
		t.Errorf("per entry: %v, want %v", got, want)
	}
	gotU := setContent(t, s, unit)
	wantU := map[string]string{"a/f.nbi": "i2", "a/f.2.nbc": "c2", "b": "b1"}
	if !equalMaps(gotU, wantU) {
		t.Errorf("per unit: %v, want %v (the unit whole from the later layer)", gotU, wantU)
	}
	cd := s.ContentDigest(unit)
	s.Close()

	res, err := MergeSet(context.Background(), path, &MergeOptions{Unit: unit})
	if err != nil {
		t.Fatal(err)
	}
	if res.Folded != 1 || res.Content != cd {
		t.Fatalf("merge: %+v, want 1 folded and content %v", res, cd)
	}
	if _, err := os.Stat(p.Path); err != nil {
		t.Errorf("the folded layer is gone at once (readers of the old set may open it): %v", err)
	}
	s, err = OpenSet(path, &OpenOptions{Trusted: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.HasDeltas() || !equalMaps(setContent(t, s, nil), wantU) {
		t.Errorf("after merge: %d bundles, %v", len(s.Read), setContent(t, s, nil))
	}
	s.Close()
	// A layer after the merge is numbered past the folded ones.
	if p := writeLayer(t, path, map[string]string{"c": "c"}); p.Seq != 2 {
		t.Errorf("layer after merge: seq %d, want 2", p.Seq)
	}
	// Past the grace, the next merge removes the folded layer.
	old := time.Now().Add(-time.Hour)
	os.Chtimes(path, old, old)
	res, err = MergeSet(context.Background(), path, &MergeOptions{Unit: unit})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Removed) != 1 || res.Removed[0] != p.Path || res.Folded != 1 {
		t.Errorf("second merge: %+v", res)
	}
	ents, _ := os.ReadDir(filepath.Dir(path))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempTag) {
			t.Errorf("temporary left: %s", e.Name())
		}
	}
}

func TestSetLayerCap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cache.kbundle")
	for i := 0; i <= MaxLayers; i++ {
		writeLayer(t, path, map[string]string{"f": strings.Repeat("x", i)})
	}
	_, err := WriteLayer(context.Background(), path, nil, func(w *Writer) error { return w.WriteFile("g", 0o644, time.Unix(1, 0), nil) })
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "kbundle merge") {
		t.Fatalf("layer past the cap: %v", err)
	}
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
