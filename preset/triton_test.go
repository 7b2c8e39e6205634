package preset

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// copyTree copies the fixture so tests can rewrite it.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
}

func readGroup(t *testing.T, path string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

func TestRelocateTriton(t *testing.T) {
	for _, tc := range []struct {
		name, origin string
	}{
		{"recorded origin", "/home/alice/kcache"},
		{"origin with trailing slash", "/home/alice/kcache/"},
		{"unknown origin", ""},
		{"unrelated origin", "/elsewhere"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dest := filepath.Join(t.TempDir(), "loaded")
			copyTree(t, "testdata/triton-cache", filepath.Join(dest, "triton"))
			p, _ := Lookup("triton")
			if err := p.Relocate(dest, tc.origin); err != nil {
				t.Fatal(err)
			}
			for _, grp := range []string{"ABCKEY1/__grp__add_kernel.json", "DEFKEY2/__grp__mul_kernel.json"} {
				path := filepath.Join(dest, "triton", filepath.FromSlash(grp))
				doc := readGroup(t, path)
				children := doc["child_paths"].(map[string]any)
				if len(children) < 2 {
					t.Fatalf("%s lost children: %v", grp, children)
				}
				for name, v := range children {
					cp := v.(string)
					want := filepath.Join(filepath.Dir(path), name)
					if cp != want {
						t.Errorf("%s: %s -> %s, want %s", grp, name, cp, want)
					}
					if _, err := os.Stat(cp); err != nil {
						t.Errorf("%s: child %s does not exist after relocation", grp, cp)
					}
				}
			}
			// Other keys survive.
			if doc := readGroup(t, filepath.Join(dest, "triton", "DEFKEY2", "__grp__mul_kernel.json")); doc["extra"] != float64(1) {
				t.Errorf("extra key lost: %v", doc)
			}
			// A remote manager's group (names only) is untouched.
			b, _ := os.ReadFile(filepath.Join(dest, "triton", "REMOTE3", "__grp__r.json"))
			orig, _ := os.ReadFile("testdata/triton-cache/REMOTE3/__grp__r.json")
			if string(b) != string(orig) {
				t.Errorf("remote group rewritten: %s", b)
			}
			// No temporary files left behind.
			filepath.WalkDir(dest, func(p string, d fs.DirEntry, err error) error {
				if strings.Contains(d.Name(), ".kbundle-relocate-") {
					t.Errorf("temporary file left: %s", p)
				}
				return nil
			})
		})
	}
}

// Relocating twice (or where nothing moved) changes nothing.
func TestRelocateTritonIdempotent(t *testing.T) {
	dest := t.TempDir()
	copyTree(t, "testdata/triton-cache", filepath.Join(dest, "triton"))
	p, _ := Lookup("inductor") // includes triton
	if err := p.Relocate(dest, "/home/alice/kcache"); err != nil {
		t.Fatal(err)
	}
	grp := filepath.Join(dest, "triton", "ABCKEY1", "__grp__add_kernel.json")
	first, _ := os.ReadFile(grp)
	if err := p.Relocate(dest, dest); err != nil {
		t.Fatal(err)
	}
	second, _ := os.ReadFile(grp)
	if string(first) != string(second) {
		t.Errorf("second relocation changed the file:\n%s\n%s", first, second)
	}
	if !strings.Contains(string(first), dest) {
		t.Errorf("group does not point into %s: %s", dest, first)
	}
}

// A child whose file is not in the bundle keeps its old path (Triton then
// drops it and recompiles that kernel, as it would have anyway).
func TestRelocateTritonMissingChild(t *testing.T) {
	dest := t.TempDir()
	dir := filepath.Join(dest, "triton", "K")
	os.MkdirAll(dir, 0o700)
	grp := filepath.Join(dir, "__grp__k.json")
	os.WriteFile(grp, []byte(`{"child_paths": {"k.cubin": "/gone/triton/K/k.cubin", "n": 3}}`), 0o600)
	p, _ := Lookup("triton")
	if err := p.Relocate(dest, "/nowhere"); err != nil {
		t.Fatal(err)
	}
	doc := readGroup(t, grp)
	if got := doc["child_paths"].(map[string]any)["k.cubin"]; got != "/gone/triton/K/k.cubin" {
		t.Errorf("missing child rewritten to %v", got)
	}
}

func TestRelocateTritonBadGroup(t *testing.T) {
	dest := t.TempDir()
	os.WriteFile(filepath.Join(dest, "__grp__bad.json"), []byte(`{"child_paths": `), 0o600)
	p, _ := Lookup("triton")
	err := p.Relocate(dest, "/o")
	if !errors.Is(err, ErrGroupFile) {
		t.Fatalf("Relocate on a truncated group: %v, want ErrGroupFile", err)
	}
	if !strings.Contains(err.Error(), "__grp__bad.json") {
		t.Errorf("error does not name the file: %v", err)
	}
}

func TestRelocateNoopPresets(t *testing.T) {
	dest := t.TempDir()
	copyTree(t, "testdata/triton-cache", dest)
	before := treeState(t, dest)
	for _, name := range []string{"numba", "pocl", "pyopencl", "jax", "cupy", "cuda", "julia", "tack"} {
		p, _ := Lookup(name)
		if err := p.Relocate(dest, "/home/alice/kcache"); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	if after := treeState(t, dest); !reflect.DeepEqual(before, after) {
		t.Errorf("no-op presets changed files:\nbefore %v\nafter  %v", before, after)
	}
}

// treeState maps every file under dir (relative) to its size, mode and
// mtime: what warmup.TakeSnapshot compares.
func treeState(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			out[rel] = fmt.Sprint(fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// FuzzRelocateTritonGroup feeds arbitrary group files to the rewriter: it
// must not panic, must fail only with ErrGroupFile, and must leave valid
// JSON whenever it rewrote a file.
func FuzzRelocateTritonGroup(f *testing.F) {
	for _, s := range []string{
		`{"child_paths": {"a.cubin": "/old/triton/K/a.cubin"}}`,
		`{"child_paths": ["a", "b"]}`,
		`{"child_paths": {"a": 1, "b": null, "c": "/old/x"}}`,
		`{}`, `[]`, `null`, `{"child_paths": `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dest := t.TempDir()
		dir := filepath.Join(dest, "triton", "K")
		os.MkdirAll(dir, 0o700)
		os.WriteFile(filepath.Join(dir, "a.cubin"), []byte("x"), 0o600)
		grp := filepath.Join(dir, "__grp__a.json")
		os.WriteFile(grp, data, 0o600)
		err := relocateTriton(dest, dest, "/old")
		if err != nil && !errors.Is(err, ErrGroupFile) {
			t.Fatalf("unexpected error kind: %v", err)
		}
		after, _ := os.ReadFile(grp)
		if string(after) != string(data) && !json.Valid(after) {
			t.Fatalf("rewrote to invalid JSON: %q", after)
		}
	})
}

// RelocateStaged rewrites the group files in the staging directory but
// makes them name the final destination, from every kind of origin (the
// recorded one, unknown, and a path already pointing into the staging
// directory, as a load that relocated there would have left it).
func TestRelocateStaged(t *testing.T) {
	for _, origin := range []string{"/home/alice/kcache", "", "/elsewhere"} {
		t.Run("origin "+origin, func(t *testing.T) {
			root := t.TempDir()
			staged := filepath.Join(root, ".loaded.kbundle-tmp-x")
			dest := filepath.Join(root, "loaded")
			copyTree(t, "testdata/triton-cache", filepath.Join(staged, "triton"))
			p, _ := Lookup("triton")
			if err := p.RelocateStaged(staged, dest, origin); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(staged, dest); err != nil {
				t.Fatal(err)
			}
			for _, grp := range []string{"ABCKEY1/__grp__add_kernel.json", "DEFKEY2/__grp__mul_kernel.json"} {
				path := filepath.Join(dest, "triton", filepath.FromSlash(grp))
				children := readGroup(t, path)["child_paths"].(map[string]any)
				for name, v := range children {
					if want := filepath.Join(filepath.Dir(path), name); v.(string) != want {
						t.Errorf("%s: %s -> %s, want %s", grp, name, v, want)
					}
					if !regularFile(v.(string)) {
						t.Errorf("%s: %s does not exist", grp, v)
					}
				}
			}
		})
	}
	t.Run("paths into the staging directory", func(t *testing.T) {
		root := t.TempDir()
		staged := filepath.Join(root, ".loaded.kbundle-tmp-x")
		dest := filepath.Join(root, "loaded")
		key := filepath.Join(staged, "triton", "K")
		os.MkdirAll(key, 0o700)
		os.WriteFile(filepath.Join(key, "k.bin"), []byte("k"), 0o600)
		os.WriteFile(filepath.Join(key, "__grp__k.json"), []byte(`{"child_paths":{"k.bin":"`+filepath.Join(key, "k.bin")+`"}}`), 0o600)
		p, _ := Lookup("triton")
		if err := p.RelocateStaged(staged, dest, ""); err != nil {
			t.Fatal(err)
		}
		got := readGroup(t, filepath.Join(key, "__grp__k.json"))["child_paths"].(map[string]any)["k.bin"]
		if want := filepath.Join(dest, "triton", "K", "k.bin"); got != want {
			t.Errorf("k.bin -> %v, want %s", got, want)
		}
	})
}

// TestRelocateStagedPresets: the package-level RelocateStaged (load's and
// extract's) runs every preset's relocation on the staged copy, naming
// dest, and stops with the first failure.
func TestRelocateStagedPresets(t *testing.T) {
	numba, _ := Lookup("numba")
	inductor, _ := Lookup("inductor") // includes triton
	for _, tc := range []struct {
		name      string
		presets   []*Preset
		bad       bool // a group file that cannot be parsed
		relocated bool
	}{
		{"none", nil, false, false},
		{"no relocation", []*Preset{numba}, false, false},
		{"included triton", []*Preset{numba, inductor}, false, true},
		{"bad group file", []*Preset{numba, inductor}, true, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			staged := filepath.Join(root, ".loaded.kbundle-tmp-x")
			dest := filepath.Join(root, "loaded")
			copyTree(t, "testdata/triton-cache", filepath.Join(staged, "triton"))
			if tc.bad {
				os.WriteFile(filepath.Join(staged, "triton", "ABCKEY1", "__grp__bad.json"), []byte(`{"child_paths": `), 0o600)
			}
			err := RelocateStaged(staged, dest, "/home/alice/kcache", tc.presets...)
			if tc.bad != errors.Is(err, ErrGroupFile) || !tc.bad && err != nil {
				t.Fatalf("RelocateStaged: %v, want ErrGroupFile %v", err, tc.bad)
			}
			if tc.bad {
				return // the staged copy is thrown away
			}
			grp := filepath.Join(staged, "triton", "ABCKEY1", "__grp__add_kernel.json")
			children := readGroup(t, grp)["child_paths"].(map[string]any)
			for name, v := range children {
				if got := strings.HasPrefix(v.(string), dest+string(filepath.Separator)); got != tc.relocated {
					t.Errorf("%s -> %s: under dest %v, want %v", name, v, got, tc.relocated)
				}
			}
		})
	}
}
