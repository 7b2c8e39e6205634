package bundle

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Staging a set extracts its merged view: later layers win by name and
// per cache unit, displaced files are gone, and the install record names
// every layer, with the set's content digest and each entry's layer.
func TestStageSet(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.kbundle")
	h := strings.Repeat("Q", 52)
	writeLayer(t, path, map[string]string{"n/f.nbi": "i1", "n/f.1.nbc": "c1", "n/h.nbi": "h", "triton/" + h + "/a": "a1", "triton/" + h + "/b": "b1", "plain": "p1"})
	writeLayer(t, path, map[string]string{"n/f.nbi": "i2", "n/f.2.nbc": "c2", "triton/" + h + "/a": "a2"})
	writeLayer(t, path, map[string]string{"plain": "p3"})
	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dest := filepath.Join(dir, "dest")
	st, err := s.Read[0].Stage(context.Background(), dest, s.StageOptions(ExtractOptions{Jobs: 2}))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Install(); err != nil {
		t.Fatal(err)
	}
	st.Commit()
	want := setContent(t, s, CacheUnit)
	got := map[string]string{}
	filepath.WalkDir(dest, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && d.Name() != InstalledMarker {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(dest, p)
			got[rel] = string(b)
		}
		return nil
	})
	if !equalMaps(got, want) {
		t.Errorf("tree %v, want the merged view %v", got, want)
	}
	if _, ok := got["n/f.1.nbc"]; ok {
		t.Errorf("n/f.1.nbc of the base survived its unit's replacement")
	}
	if _, ok := got["triton/"+h+"/b"]; ok {
		t.Errorf("the base's file of a Triton unit a layer replaced survived")
	}
	rec, err := ReadInstallRecord(dest)
	if err != nil {
		t.Fatal(err)
	}
	if cd := FormatDigest(s.ContentDigest(CacheUnit)); rec.ContentDigest != cd || len(rec.Layers) != 3 {
		t.Errorf("record: content %s with %d layers, want %s with 3", rec.ContentDigest, len(rec.Layers), cd)
	}
	for _, e := range rec.Entries {
		if e.Name == "plain" && e.Layer != 2 || e.Name == "n/h.nbi" && e.Layer != 0 || e.Name == "n/f.2.nbc" && e.Layer != 1 {
			t.Errorf("%s recorded from layer %d", e.Name, e.Layer)
		}
	}
	if ch, err := CompareTree(dest, rec); err != nil || !ch.Same() {
		t.Errorf("tree against its record: %v, %v", ch, err)
	}
}
