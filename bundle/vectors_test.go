package bundle

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/kbundle/kbundle/bundle/internal/gen/raw"
	"github.com/kbundle/kbundle/bundle/internal/gen/vectors"
)

const vectorDir = "testdata/vectors"

// sentinels maps the outcome names of vectors.tsv to the errors.
var sentinels = map[string]error{
	vectors.ErrFormat:       ErrFormat,
	vectors.ErrVersion:      ErrVersion,
	vectors.ErrChecksum:     ErrChecksum,
	vectors.ErrInsecurePath: ErrInsecurePath,
	vectors.ErrTooLarge:     ErrTooLarge,
}

// isSentinel reports whether err wraps one of the bundle-content sentinels.
func isSentinel(err error) bool {
	for _, s := range sentinels {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

type vectorCase struct{ file, want, stage, doc string }

// readVectorTable parses testdata/vectors/vectors.tsv.
func readVectorTable(t testing.TB) []vectorCase {
	t.Helper()
	f, err := os.Open(filepath.Join(vectorDir, "vectors.tsv"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var cs []vectorCase
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		p := strings.Split(line, "\t")
		if len(p) != 4 {
			t.Fatalf("vectors.tsv: bad line %q", line)
		}
		cs = append(cs, vectorCase{p[0], p[1], p[2], p[3]})
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return cs
}

// TestVectorsUpToDate checks that the committed vectors are exactly what
// the generator produces (run `go run ./bundle/internal/gen` after
// changing bundle/internal/gen/vectors).
func TestVectorsUpToDate(t *testing.T) {
	vs := vectors.All()
	want := map[string][]byte{"vectors.tsv": vectors.TSV(vs), "content-digests.tsv": vectors.ContentDigests(vs)}
	for _, v := range vs {
		want[v.Name+".kbundle"] = v.Data
	}
	ents, err := os.ReadDir(vectorDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != len(want) {
		t.Errorf("%s holds %d files, the generator makes %d", vectorDir, len(ents), len(want))
	}
	for _, e := range ents {
		got, err := os.ReadFile(filepath.Join(vectorDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		w, ok := want[e.Name()]
		if !ok {
			t.Errorf("%s: not made by the generator", e.Name())
		} else if !bytes.Equal(got, w) {
			t.Errorf("%s differs from the generator's output", e.Name())
		}
	}
	if t.Failed() {
		t.Log("regenerate with: go run ./bundle/internal/gen")
	}
}

// TestVectors checks every vector's recorded outcome.
func TestVectors(t *testing.T) {
	cases := readVectorTable(t)
	if len(cases) < 50 {
		t.Fatalf("only %d vectors", len(cases))
	}
	for _, c := range cases {
		t.Run(strings.TrimSuffix(c.file, ".kbundle"), func(t *testing.T) {
			data, err := os.ReadFile(filepath.Join(vectorDir, c.file))
			if err != nil {
				t.Fatal(err)
			}
			if c.want == vectors.OK {
				checkValid(t, data)
				return
			}
			want, ok := sentinels[c.want]
			if !ok {
				t.Fatalf("unknown outcome %q", c.want)
			}
			r, err := NewReaderBytes(data)
			switch c.stage {
			case vectors.StageOpen:
				if err == nil {
					t.Fatalf("%s: NewReaderBytes accepted it, want %s", c.doc, c.want)
				}
			case vectors.StageVerify:
				if err != nil {
					t.Fatalf("%s: NewReaderBytes: %v, want success then %s from Verify", c.doc, err, c.want)
				}
				err = r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 0})
				if err == nil {
					t.Fatalf("%s: Verify accepted it, want %s", c.doc, c.want)
				}
			default:
				t.Fatalf("unknown stage %q", c.stage)
			}
			if !errors.Is(err, want) {
				t.Fatalf("%s: got %v, want %s", c.doc, err, c.want)
			}
			// The same through a file: the message names it.
			p := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				t.Fatal(err)
			}
			rc, err := Open(p, nil)
			if err == nil {
				err = rc.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 1})
				rc.Close()
			}
			if !errors.Is(err, want) || !strings.Contains(err.Error(), p) {
				t.Fatalf("Open+Verify: %v, want %s naming %s", err, c.want, p)
			}
		})
	}
}

// checkValid opens, verifies, walks and extracts a valid bundle.
func checkValid(t *testing.T, data []byte) {
	t.Helper()
	r, err := NewReaderBytes(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Verify(context.Background(), &VerifyOptions{Deep: true, Jobs: 0}); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range r.Entries() {
		names = append(names, e.Name)
		if !e.Dir {
			if _, err := r.ReadEntry(e.Name); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := fstest.TestFS(r, names...); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "dest")
	if _, err := r.Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err)
	}
	for _, e := range r.Entries() {
		fi, err := os.Lstat(filepath.Join(dest, filepath.FromSlash(e.Name)))
		if err != nil {
			t.Fatal(err)
		}
		if fi.IsDir() != e.Dir || fi.Mode().Perm() != e.Mode || !fi.ModTime().Equal(e.ModTime) || (!e.Dir && fi.Size() != e.Size) {
			t.Fatalf("%s extracted as %v %v %d, want %v %v %d", e.Name, fi.Mode(), fi.ModTime(), fi.Size(), e.Info().Mode(), e.ModTime, e.Size)
		}
	}
}

// TestValidVectorsContent checks the valid vectors' trees entry by entry,
// and that the real Writer, given the same tree in the same order, writes
// exactly the bytes the specification-only encoder wrote.
func TestValidVectorsContent(t *testing.T) {
	for _, v := range vectors.All() {
		if v.Want != vectors.OK {
			continue
		}
		t.Run(v.Name, func(t *testing.T) {
			r, err := NewReaderBytes(v.Data)
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Entries()) != len(v.Files) {
				t.Fatalf("%d entries, want %d", len(r.Entries()), len(v.Files))
			}
			for _, f := range v.Files {
				fi, err := r.Stat(f.Name)
				if err != nil {
					t.Fatal(err)
				}
				if fi.IsDir() != f.Dir || fi.Mode().Perm() != fs.FileMode(f.Mode) || !fi.ModTime().Equal(time.Unix(f.Sec, int64(f.Nsec))) {
					t.Fatalf("%s: %v %v", f.Name, fi.Mode(), fi.ModTime())
				}
				if !f.Dir {
					got, err := r.ReadEntry(f.Name)
					if err != nil || !bytes.Equal(got, f.Data) {
						t.Fatalf("%s: content %q, %v; want %q", f.Name, got, err, f.Data)
					}
				}
			}
			meta := r.Meta()
			if len(meta) != len(v.Meta) {
				t.Fatalf("meta %v, want %v", meta, v.Meta)
			}
			for _, m := range v.Meta {
				if meta[m.Key] != m.Value {
					t.Fatalf("meta %q = %q, want %q", m.Key, meta[m.Key], m.Value)
				}
			}

			var buf bytes.Buffer
			w := NewWriter(&buf, &WriterOptions{SegmentSize: int64(v.SegmentSize), Jobs: 2})
			writeRaw(t, w, v.Meta, v.Files)
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(buf.Bytes(), v.Data) {
				t.Fatalf("the Writer wrote %d bytes that differ from the %d-byte vector built from docs/FORMAT.md", buf.Len(), len(v.Data))
			}
		})
	}
}

func writeRaw(t *testing.T, w *Writer, meta []raw.Meta, files []raw.File) {
	t.Helper()
	for _, m := range meta {
		if err := w.SetMeta(m.Key, m.Value); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range files {
		mt := time.Unix(f.Sec, int64(f.Nsec))
		var err error
		if f.Dir {
			err = w.Mkdir(f.Name, fs.FileMode(f.Mode), mt)
		} else {
			err = w.WriteFile(f.Name, fs.FileMode(f.Mode), mt, f.Data)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}
