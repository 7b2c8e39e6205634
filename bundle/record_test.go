package bundle

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestContentDigestVectors pins the content digest's definition to the
// independent encoder's (bundle/internal/gen/raw): content-digests.tsv
// holds what it computes from docs/FORMAT.md.
func TestContentDigestVectors(t *testing.T) {
	f, err := os.Open(filepath.Join(vectorDir, "content-digests.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		file, want, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad line %q", line)
		}
		r := readerOf(t, vector(t, strings.TrimSuffix(file, ".kbundle")))
		if got := FormatDigest(r.ContentDigest()); got != want {
			t.Errorf("%s: content digest %s, want %s", file, got, want)
		}
		seen[file] = want
	}
	if len(seen) < 5 {
		t.Fatalf("only %d content digests", len(seen))
	}
	// Packed elsewhere, later, with other mtimes and group write: the same.
	if seen["valid-basic.kbundle"] != seen["valid-basic-moved.kbundle"] {
		t.Errorf("valid-basic and valid-basic-moved differ in content digest")
	}
	if a, b := vector(t, "valid-basic"), vector(t, "valid-basic-moved"); FormatDigest(readerOf(t, a).FileDigest()) == FormatDigest(readerOf(t, b).FileDigest()) {
		t.Errorf("the two vectors have one file digest: the test shows nothing")
	}
}

func TestContentDigestChanges(t *testing.T) {
	base := readerOf(t, vector(t, "valid-basic")).Entries()
	want := ContentDigestOf(base)
	for _, c := range []struct {
		name string
		same bool
		edit func(es []Entry)
	}{
		{"mtime", true, func(es []Entry) { es[0].ModTime = time.Unix(5, 0) }},
		{"group write", true, func(es []Entry) { es[0].Mode |= 0o020 }},
		{"mode", false, func(es []Entry) { es[0].Mode = 0o700 }},
		{"content", false, func(es []Entry) { es[len(es)-1].Digest[0] ^= 1 }},
		{"size", false, func(es []Entry) { es[len(es)-1].Size++ }},
		{"name", false, func(es []Entry) { es[len(es)-1].Name += "x" }},
		{"dropped", false, func(es []Entry) {}},
	} {
		es := slices.Clone(base)
		file := slices.IndexFunc(es, func(e Entry) bool { return e.Name == "c" })
		es[len(es)-1], es[file] = es[file], es[len(es)-1] // the edits' last entry is a file
		c.edit(es)
		es[len(es)-1], es[file] = es[file], es[len(es)-1]
		if c.name == "dropped" {
			es = es[:len(es)-1]
		}
		if got := ContentDigestOf(es) == want; got != c.same {
			t.Errorf("%s: same digest = %v, want %v", c.name, got, c.same)
		}
	}
}

// TestInstallRecord: every extraction writes a record of the tree as
// installed (after the staged tree's changes through Dir, such as
// relocation), which CompareTree checks the tree against.
func TestInstallRecord(t *testing.T) {
	r := readerOf(t, vector(t, "valid-basic"))
	dest := filepath.Join(t.TempDir(), "d")
	st, err := r.Stage(context.Background(), dest, &ExtractOptions{Record: RecordInfo{Bundle: "/b/x.kbundle", Job: "42", Host: "n1", Presets: []string{"triton"}}})
	if err != nil {
		t.Fatal(err)
	}
	// A relocation: one file rewritten in the staged tree.
	rewritten := filepath.Join(st.Dir(), "b.json")
	os.Chmod(rewritten, 0o600)
	if err := os.WriteFile(rewritten, []byte(`{"relocated":true}`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Chmod(rewritten, 0o644)
	if err := st.Install(); err != nil {
		t.Fatal(err)
	}
	st.Commit()
	rec, err := ReadInstallRecord(dest)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Version != 1 || rec.Dest != dest || rec.Origin != "/vectors" || rec.Job != "42" || rec.Host != "n1" ||
		!slices.Equal(rec.Presets, []string{"triton"}) || rec.ContentDigest != FormatDigest(r.ContentDigest()) ||
		len(rec.Layers) != 1 || rec.Layers[0].Path != "/b/x.kbundle" || rec.Layers[0].Digest != FormatDigest(r.FileDigest()) {
		t.Errorf("record %+v", rec)
	}
	if _, err := time.Parse(time.RFC3339Nano, rec.Installed); err != nil {
		t.Errorf("installed: %v", err)
	}
	if len(rec.Entries) != len(r.Entries()) {
		t.Fatalf("%d entries recorded, want %d", len(rec.Entries), len(r.Entries()))
	}
	for i, e := range r.Entries() {
		re := rec.Entries[i]
		switch {
		case re.Name != e.Name:
			t.Errorf("entry %d: %q, want %q", i, re.Name, e.Name)
		case e.Name == "b.json":
			d, _ := PathDigest(dest, "b.json")
			if re.Dig != FormatDigest(d) || re.Packed != FormatDigest(e.Digest) {
				t.Errorf("relocated b.json: digest %s packed %s, want %s and %s", re.Dig, re.Packed, FormatDigest(d), FormatDigest(e.Digest))
			}
		case !e.Dir && (re.Dig != FormatDigest(e.Digest) || re.Packed != "" || re.Size != e.Size || !re.ModTime().Equal(e.ModTime)):
			t.Errorf("%s: recorded %+v, want the index's", e.Name, re)
		}
	}
	if c, err := CompareTree(dest, rec); err != nil || !c.Same() {
		t.Fatalf("CompareTree after install: %v %v", c, err)
	}

	// Touched with the same bytes: unchanged. Then a new file, a changed
	// one and a missing one.
	k := filepath.Join(dest, "a", "k.ptx")
	os.Chtimes(k, time.Now(), time.Now())
	if c, err := CompareTree(dest, rec); err != nil || !c.Same() {
		t.Errorf("CompareTree after touch: %v %v", c, err)
	}
	os.Chmod(filepath.Join(dest, "a"), 0o755)
	os.WriteFile(filepath.Join(dest, "a", "new.cubin"), []byte("new"), 0o644)
	os.Chmod(k, 0o644)
	os.WriteFile(k, []byte("changed same size? no"), 0o644)
	os.Remove(filepath.Join(dest, "c"))
	c, err := CompareTree(dest, rec)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(c.New, []string{"a/new.cubin"}) || !slices.Equal(c.Changed, []string{"a/k.ptx"}) || !slices.Equal(c.Missing, []string{"c"}) {
		t.Errorf("CompareTree: %+v", c)
	}
}

func TestParseInstallRecord(t *testing.T) {
	good := `{"kbundle_install_record":1,"dest":"/d","content_digest":"xxh3-128:00000000000000000000000000000000","layers":[{"path":"/b","digest":"xxh3-128:00000000000000000000000000000000"}],"entries":[],"future":{"x":1}}`
	for _, c := range []struct {
		name, text string
		want       error
	}{
		{"good, with an unknown field", good, nil},
		{"prose marker", markerText + "00.\n", ErrOldMarker},
		{"prose marker is no record", markerText + "00.\n", ErrNoRecord},
		{"newer version", strings.Replace(good, ":1,", ":2,", 1), ErrVersion},
		{"version 0", strings.Replace(good, ":1,", ":0,", 1), ErrFormat},
		{"not json", recordPrefix + "1,", ErrFormat},
		{"other text", "log\n", ErrFormat},
		{"bad digest", strings.Replace(good, `"content_digest":"xxh3-128:0`, `"content_digest":"md5:0`, 1), ErrFormat},
		{"no layer", strings.Replace(good, `"layers":[{"path":"/b","digest":"xxh3-128:00000000000000000000000000000000"}]`, `"layers":[]`, 1), ErrFormat},
		{"insecure name", strings.Replace(good, `"entries":[]`, `"entries":[{"name":"../x","kind":"dir"}]`, 1), ErrInsecurePath},
		{"unsorted", strings.Replace(good, `"entries":[]`, `"entries":[{"name":"b","kind":"dir"},{"name":"a","kind":"dir"}]`, 1), ErrFormat},
		{"kind", strings.Replace(good, `"entries":[]`, `"entries":[{"name":"a","kind":"link"}]`, 1), ErrFormat},
	} {
		_, err := ParseInstallRecord([]byte(c.text))
		if (c.want == nil) != (err == nil) || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzParseInstallRecord: any input is parsed or refused, never a panic;
// what parses, written again, parses to the same record.
func FuzzParseInstallRecord(f *testing.F) {
	f.Add([]byte(`{"kbundle_install_record":1,"content_digest":"xxh3-128:00000000000000000000000000000000","layers":[{}],"entries":[{"name":"a","kind":"file","digest":"xxh3-128:00000000000000000000000000000000"}]}`))
	f.Add([]byte(markerText + "0.\n"))
	f.Add([]byte(`{"kbundle_install_record":2}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		rec, err := ParseInstallRecord(b)
		if err != nil {
			return
		}
		again, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		rec2, err := ParseInstallRecord(again)
		if err != nil {
			t.Fatalf("written again: %v", err)
		}
		if !reflect.DeepEqual(rec, rec2) {
			t.Fatalf("round trip: %+v != %+v", rec, rec2)
		}
	})
}
