package bundle

import (
	"context"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// ExtractOptions.Skip leaves names out of a staged set, whatever their
// content: a blob shared by a kept and a skipped file, a skipped blob
// spanning several segments, an empty file, a whole directory with what is
// below it, in the base and in a layer. Every skipped blob is still read
// (a damaged one fails the staging), and the install record describes the
// tree as installed: its entries and content digest without the skipped
// ones, the set's digest beside them, the filter and the count.
func TestStageSkip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cache.kbundle")
	hA, hB := strings.Repeat("A", 52), strings.Repeat("B", 52)
	big := make([]byte, 3*MinSegmentSize+77)
	rand.New(rand.NewSource(1)).Read(big)
	opt := &LayerOptions{Writer: WriterOptions{SegmentSize: MinSegmentSize}}
	write := func(files map[string][]byte) {
		t.Helper()
		if _, err := WriteLayer(context.Background(), path, opt, func(w *Writer) error {
			for n, c := range files {
				if err := w.WriteFile(n, 0o644, time.Unix(1, 0), c); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	write(map[string][]byte{
		"triton/" + hA + "/k.cubin": []byte("shared"), "triton/" + hA + "/k.json": []byte(`{"target":{"arch":80}}`),
		"triton/" + hA + "/empty": nil, "triton/" + hA + "/big.bin": big,
		"triton/" + hB + "/k.cubin": []byte("shared"), "triton/" + hB + "/k.json": []byte(`{"target":{"arch":90}}`),
		"plain": []byte("p"),
	})
	write(map[string][]byte{"sub/x": []byte("layer"), "other": []byte("o")})
	skip := func(name string) bool { return name == "triton/"+hA || name == "sub" }

	s, err := OpenSet(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dest := filepath.Join(dir, "dest")
	o := s.StageOptions(ExtractOptions{Jobs: 3, Skip: skip, Record: RecordInfo{Filter: "gpu-arch cuda:90"}})
	st, err := s.Read[0].Stage(context.Background(), dest, o)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Install(); err != nil {
		t.Fatal(err)
	}
	st.Commit()
	if _, err := os.Lstat(filepath.Join(dest, "triton", hA)); !os.IsNotExist(err) {
		t.Errorf("the skipped directory is there: %v", err)
	}
	for _, n := range []string{"triton/" + hB + "/k.cubin", "plain", "other"} {
		if _, err := os.Stat(filepath.Join(dest, n)); err != nil {
			t.Errorf("kept %s: %v", n, err)
		}
	}
	// 7 entries: hA and its 4 files (base), sub and sub/x (the layer).
	if r := st.Result(); r.Skipped != 7 || r.SkippedBytes != int64(len(big)+len("shared")+len(`{"target":{"arch":80}}`)+len("layer")) {
		t.Errorf("result %+v", r)
	}
	rec, err := ReadInstallRecord(dest)
	if err != nil {
		t.Fatal(err)
	}
	var kept []Entry
	for _, e := range s.Merged(CacheUnit) {
		if !strings.HasPrefix(e.Name, "triton/"+hA) && !strings.HasPrefix(e.Name, "sub") {
			kept = append(kept, e.Entry)
		}
	}
	if want := FormatDigest(ContentDigestOf(kept)); rec.ContentDigest != want {
		t.Errorf("record's content digest %s, want the installed tree's %s", rec.ContentDigest, want)
	}
	if want := FormatDigest(s.ContentDigest(CacheUnit)); rec.SetContentDigest != want || rec.Skipped != 7 || rec.Filter != "gpu-arch cuda:90" {
		t.Errorf("record: set %s skipped %d filter %q, want %s 7", rec.SetContentDigest, rec.Skipped, rec.Filter, want)
	}
	for _, e := range rec.Entries {
		if strings.HasPrefix(e.Name, "triton/"+hA) || strings.HasPrefix(e.Name, "sub") {
			t.Errorf("record names skipped %s", e.Name)
		}
	}
	if ch, err := CompareTree(dest, rec); err != nil || !ch.Same() {
		t.Errorf("tree against its record: %v, %v", ch, err)
	}
	b, _ := os.ReadFile(filepath.Join(dest, InstalledMarker))
	if _, err := ParseInstallRecord(b); err != nil {
		t.Errorf("the record does not parse: %v", err)
	}

	// Without a filter that leaves anything out, the record has none.
	dest2 := filepath.Join(dir, "dest2")
	st, err = s.Read[0].Stage(context.Background(), dest2, s.StageOptions(ExtractOptions{Skip: func(string) bool { return false }, Record: RecordInfo{Filter: "x"}}))
	if err != nil {
		t.Fatal(err)
	}
	if rec := st.Record(); rec.Filter != "" || rec.Skipped != 0 || rec.SetContentDigest != "" || rec.ContentDigest != FormatDigest(s.ContentDigest(CacheUnit)) {
		t.Errorf("unfiltered record %+v", rec)
	}
	st.Abort()
}

// A skipped blob is read and checked all the same: damaged, the staging
// fails, although only skipped bytes are damaged.
func TestStageSkipStillChecks(t *testing.T) {
	src := t.TempDir()
	os.MkdirAll(filepath.Join(src, "gone"), 0o755)
	big := make([]byte, 3*MinSegmentSize)
	rand.New(rand.NewSource(2)).Read(big) // incompressible: segment k is about bytes 16+k*64Ki..
	os.WriteFile(filepath.Join(src, "gone", "f"), big, 0o644)
	os.WriteFile(filepath.Join(src, "kept"), []byte("k"), 0o644)
	file, _ := pack(t, src, &PackOptions{SegmentSize: MinSegmentSize})
	data, _ := os.ReadFile(file)
	skip := &ExtractOptions{Skip: func(n string) bool { return n == "gone" }}
	r, err := NewReaderBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), skip); err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), data...)
	bad[headerSize+MinSegmentSize+MinSegmentSize/2] ^= 0xff // inside segment 1: gone/f's bytes only
	rb, err := NewReaderBytes(bad)
	if err != nil {
		t.Fatal(err)
	}
	if _, err = rb.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), skip); err == nil {
		t.Fatal("a damaged skipped blob was not caught")
	}
}
