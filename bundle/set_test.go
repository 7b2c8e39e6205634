package bundle

import (
	"bytes"
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

// WriteLayer refuses a layer holding a file and a file below it, names
// the entry, publishes nothing and leaves no temporary: the set still
// opens (H1 of the 2026-12-01b review: it published a layer no reader
// accepted, and every later load failed).
func TestWriteLayerRefusesFileWithChild(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "s.kbundle")
	writeLayer(t, set, map[string]string{"base": "b"})
	_, err := WriteLayer(context.Background(), set, nil, func(w *Writer) error {
		if err := w.WriteFile("x", 0o644, time.Unix(1, 0), []byte("file x")); err != nil {
			return err
		}
		return w.WriteFile("x/y", 0o644, time.Unix(1, 0), []byte("file x/y"))
	})
	if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), `"x/y"`) {
		t.Fatalf("WriteLayer: %v, want ErrFormat naming x/y", err)
	}
	if ls, _ := ListLayers(set, 0); len(ls) != 0 {
		t.Errorf("published %v", ls)
	}
	noTemps(t, dir)
	s, err := OpenSet(set, nil)
	if err != nil {
		t.Fatalf("the set no longer opens: %v", err)
	}
	s.Close()
}

func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempTag) {
			t.Errorf("temporary left: %s", e.Name())
		}
	}
}

// writeSpec writes a layer of the set at path from spec: "name=content"
// is a file, "name/" a directory.
func writeSpec(t testing.TB, path string, spec ...string) {
	t.Helper()
	if _, err := WriteLayer(context.Background(), path, nil, func(w *Writer) error {
		for _, s := range spec {
			if n, ok := strings.CutSuffix(s, "/"); ok {
				if err := w.Mkdir(n, 0o755, time.Unix(1, 0)); err != nil {
					return err
				}
				continue
			}
			n, c, _ := strings.Cut(s, "=")
			if err := w.WriteFile(n, 0o644, time.Unix(1, 0), []byte(c)); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// viewSpec is the set's merged view (CacheUnit) as writeSpec writes it:
// name → content, "/" for a directory.
func viewSpec(t testing.TB, s *OpenedSet) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, e := range s.Merged(CacheUnit) {
		if e.Dir {
			out[e.Name] = "/"
			continue
		}
		b, err := s.Read[e.Layer].ReadFile(e.Name)
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name] = string(b)
	}
	return out
}

// treeSpec is the tree at dir as viewSpec gives it, without the install
// record.
func treeSpec(t testing.TB, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case rel == "." || rel == InstalledMarker:
		case d.IsDir():
			out[filepath.ToSlash(rel)] = "/"
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The kind-change rule of the merged view: where layers disagree about a
// name being a file or a directory, the newest wins with its whole
// subtree. The merged view, a load (Stage: overlayLayer) and a merge
// (MergeSet) agree, none fails, and the merged base reads back.
func TestSetKindChange(t *testing.T) {
	cases := []struct {
		name   string
		layers [][]string
		want   map[string]string
	}{
		{"directory becomes a file",
			[][]string{{"x/y=1", "x/z/w=2", "keep=k"}, {"x=now a file"}},
			map[string]string{"x": "now a file", "keep": "k"}},
		{"file becomes a directory",
			[][]string{{"x=1", "keep=k"}, {"x/y=2"}},
			map[string]string{"x": "/", "x/y": "2", "keep": "k"}},
		{"deep subtree becomes a file",
			[][]string{{"a/b/c/d=1", "a/b/e=2", "a/f=3"}, {"a/b=file"}},
			map[string]string{"a": "/", "a/b": "file", "a/f": "3"}},
		{"file becomes a deep directory",
			[][]string{{"a/b=1", "a/c=3"}, {"a/b/c/d=2"}},
			map[string]string{"a": "/", "a/b": "/", "a/b/c": "/", "a/b/c/d": "2", "a/c": "3"}},
		{"empty directory becomes a file",
			[][]string{{"x/", "y=1"}, {"x=f"}},
			map[string]string{"x": "f", "y": "1"}},
		{"file becomes an empty directory",
			[][]string{{"x=1"}, {"x/"}},
			map[string]string{"x": "/"}},
		{"back and forth",
			[][]string{{"x/y=1", "x/q=4"}, {"x=2"}, {"x/z=3"}},
			map[string]string{"x": "/", "x/z": "3"}},
		{"top of the subtree only",
			[][]string{{"a/x/y=1", "a/k=2"}, {"a/x=3"}, {"a/x2/z=4"}},
			map[string]string{"a": "/", "a/x": "3", "a/k": "2", "a/x2": "/", "a/x2/z": "4"}},
		{"names sharing a prefix stay",
			[][]string{{"x/y=1", "x-y=2", "x.z/w=3", "xx=4"}, {"x=f"}},
			map[string]string{"x": "f", "x-y": "2", "x.z": "/", "x.z/w": "3", "xx": "4"}},
		{"directory stays a directory",
			[][]string{{"x/y=1"}, {"x/z=2"}},
			map[string]string{"x": "/", "x/y": "1", "x/z": "2"}},
		{"a unit and a kind change",
			[][]string{{"n/f.nbi=i1", "n/f.1.nbc=c1", "n/g/h=5"}, {"n/f.nbi=i2", "n/g=6"}},
			map[string]string{"n": "/", "n/f.nbi": "i2", "n/g": "6"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			set := filepath.Join(dir, "s.kbundle")
			for _, l := range tc.layers {
				writeSpec(t, set, l...)
			}
			s, err := OpenSet(set, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := viewSpec(t, s); !equalMaps(got, tc.want) {
				t.Errorf("merged view %v, want %v", got, tc.want)
			}
			cd := s.ContentDigest(CacheUnit)
			dest := filepath.Join(dir, "dest")
			st, err := s.Read[0].Stage(context.Background(), dest, s.StageOptions(ExtractOptions{}))
			if err != nil {
				t.Fatalf("load: %v", err)
			}
			if err := st.Install(); err != nil {
				t.Fatal(err)
			}
			st.Commit()
			s.Close()
			if got := treeSpec(t, dest); !equalMaps(got, tc.want) {
				t.Errorf("loaded tree %v, want %v", got, tc.want)
			}
			rec, err := ReadInstallRecord(dest)
			if err != nil {
				t.Fatal(err)
			}
			if ch, err := CompareTree(dest, rec); err != nil || !ch.Same() {
				t.Errorf("loaded tree against its record: %v, %v", ch, err)
			}
			res, err := MergeSet(context.Background(), set, &MergeOptions{Unit: CacheUnit})
			if err != nil {
				t.Fatalf("merge: %v", err)
			}
			if res.Content != cd {
				t.Errorf("merged base's content %v, the view's %v", res.Content, cd)
			}
			r, err := Open(set, nil)
			if err != nil {
				t.Fatalf("the merged base does not open: %v", err)
			}
			r.Close()
			s, err = OpenSet(set, nil)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := viewSpec(t, s); s.HasDeltas() || !equalMaps(got, tc.want) {
				t.Errorf("after merge: %d bundles, view %v, want %v", len(s.Read), got, tc.want)
			}
		})
	}
}

// The review's load-then-merge of a set whose layer made a directory a
// file (H1): the load installs the file, the merge writes a base that
// opens, with the same view.
func TestSetDirBecomesFile(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "s.kbundle")
	writeSpec(t, set, "x/y=y")
	writeSpec(t, set, "x=now a file")
	s, err := OpenSet(set, nil)
	if err != nil {
		t.Fatal(err)
	}
	st, err := s.Read[0].Stage(context.Background(), filepath.Join(dir, "dest"), s.StageOptions(ExtractOptions{}))
	if err != nil {
		t.Fatalf("load (stage) of the set: %v", err)
	}
	if err := st.Install(); err != nil {
		t.Fatal(err)
	}
	st.Commit()
	s.Close()
	if b, err := os.ReadFile(filepath.Join(dir, "dest", "x")); err != nil || string(b) != "now a file" {
		t.Errorf("dest/x: %q, %v", b, err)
	}
	if _, err := MergeSet(context.Background(), set, &MergeOptions{Unit: CacheUnit}); err != nil {
		t.Fatalf("merge: %v", err)
	}
	s, err = OpenSet(set, nil)
	if err != nil {
		t.Fatalf("after merge the base does not open: %v", err)
	}
	defer s.Close()
	if got, want := viewSpec(t, s), map[string]string{"x": "now a file"}; !equalMaps(got, want) {
		t.Errorf("after merge: %v, want %v", got, want)
	}
}

// What WriteLayer and MergeSet wrote is read back before it is published:
// a temporary the reader refuses (here its index digest damaged, or
// entries other than those written) is an error, never published.
func TestVerifyWritten(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil)
	w.WriteFile("a", 0o644, time.Unix(1, 0), []byte("a"))
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	content := ContentDigestOf(sortedEntries(w))
	good := buf.Bytes()
	bad := bytes.Clone(good)
	bad[len(bad)-trailerSize+16] ^= 1 // the trailer's index digest
	cases := []struct {
		name string
		b    []byte
		want Digest
		err  error
	}{
		{"as written", good, content, nil},
		{"index digest damaged", bad, content, ErrChecksum},
		{"other entries", good, Digest{1}, ErrChecksum},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := os.Create(filepath.Join(t.TempDir(), "b"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			f.Write(tc.b)
			err = verifyWritten(f, int64(len(tc.b)), tc.want, "s.kbundle")
			if tc.err == nil && err != nil || tc.err != nil && (!errors.Is(err, tc.err) || !strings.Contains(err.Error(), "cannot publish s.kbundle")) {
				t.Errorf("verifyWritten: %v, want %v", err, tc.err)
			}
		})
	}
}

// TestHoldsLayers: a DEST that is a set's layer folder, lies below it, or
// holds it (S9's remainder), through a symlink too; siblings do not.
func TestHoldsLayers(t *testing.T) {
	dir := t.TempDir()
	set := filepath.Join(dir, "s", "cache.kbundle")
	os.MkdirAll(filepath.Join(dir, "s", "cache.kbundle.d"), 0o755)
	os.Symlink(filepath.Join(dir, "s"), filepath.Join(dir, "link"))
	for _, c := range []struct {
		dest string
		want bool
	}{
		{filepath.Join(dir, "s", "cache.kbundle.d"), true},
		{filepath.Join(dir, "s", "cache.kbundle.d", "x", "y"), true},
		{filepath.Join(dir, "s"), true},
		{dir, true},
		{filepath.Join(dir, "link", "cache.kbundle.d"), true},
		{filepath.Join(dir, "s", "cache.kbundle.dd"), false},
		{filepath.Join(dir, "s", "dest"), false},
		{filepath.Join(dir, "dest"), false},
	} {
		if got := HoldsLayers(c.dest, set); got != c.want {
			t.Errorf("HoldsLayers(%s) = %v, want %v", c.dest, got, c.want)
		}
	}
}
