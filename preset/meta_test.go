package preset

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"testing/fstest"

	"github.com/kbundle/kbundle/bundle"
)

func names(ps []*Preset) []string {
	out := []string{}
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}

func TestPresetsFromMeta(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    string
		unknown bool
	}{
		{"", "", false},
		{"numba", "numba", false},
		{"numba,pyopencl", "numba,pyopencl", false},
		{" pocl pyopencl ", "pocl,pyopencl", false},
		{"JAX,jax", "jax", false},
		{"numba,fromthefuture", "numba", true},
	} {
		t.Run(tc.value, func(t *testing.T) {
			meta := map[string]string{bundle.MetaOrigin: "/x"}
			if tc.value != "" {
				meta[bundle.MetaPreset] = tc.value
			}
			ps, err := PresetsFromMeta(meta)
			if got := Names(ps); got != tc.want {
				t.Errorf("presets %q, want %q", got, tc.want)
			}
			if errors.Is(err, ErrUnknownPreset) != tc.unknown {
				t.Errorf("err %v, unknown preset expected: %v", err, tc.unknown)
			}
		})
	}
}

func TestMissingContent(t *testing.T) {
	all, err := ParseList("numba,inductor,pyopencl,jax")
	if err != nil {
		t.Fatal(err)
	}
	fsys := fstest.MapFS{
		"numba/x/f.nbi":      {Data: []byte("i")},
		"inductor/fxgraph/a": {Data: []byte("g")}, // triton/ empty: fine, included
		"xdg/.keep-dir-only": {Mode: os.ModeDir},
		"pocl/k/parallel.bc": {Data: []byte("b")},
		"jax":                {Mode: os.ModeDir},
		"cache.kbundle":      {Data: []byte("b")},
	}
	missing, err := MissingContent(fsys, all)
	if err != nil {
		t.Fatal(err)
	}
	if got := Names(missing); got != "pyopencl,jax" {
		t.Errorf("missing %q, want pyopencl,jax", got)
	}
}

// MissingContent works on the bundle itself (a *bundle.Reader is an
// fs.FS), before anything is extracted.
func TestMissingContentBundle(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "numba", "x"), 0o700)
	os.WriteFile(filepath.Join(dir, "numba", "x", "f.nbi"), []byte("i"), 0o600)
	out := filepath.Join(t.TempDir(), "b.kbundle")
	if _, err := bundle.Pack(context.Background(), dir, out, &bundle.PackOptions{Preset: "numba"}); err != nil {
		t.Fatal(err)
	}
	rc, err := bundle.Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	recorded, err := PresetsFromMeta(rc.Meta())
	if err != nil || Names(recorded) != "numba" {
		t.Fatalf("recorded %q, %v", Names(recorded), err)
	}
	asked, _ := ParseList("numba", "triton")
	missing, err := MissingContent(rc, asked)
	if err != nil || Names(missing) != "triton" {
		t.Errorf("missing %q, %v; want triton", Names(missing), err)
	}
}

func TestParseListUnknown(t *testing.T) {
	ps, err := ParseList("numba", "nope,zip")
	if !errors.Is(err, ErrUnknownPreset) || Names(ps) != "numba" {
		t.Errorf("%q %v", names(ps), err)
	}
}

// FuzzPresetsFromMeta: any recorded value gives known presets, each once,
// and an error exactly when a name is unknown; never a panic.
func FuzzPresetsFromMeta(f *testing.F) {
	for _, s := range []string{"", "numba", "numba,pyopencl", " pocl\tpyopencl ", "JAX,jax", "x,,y", ",", "inductor nope"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		ps, err := PresetsFromMeta(map[string]string{bundle.MetaPreset: v})
		seen := map[string]bool{}
		for _, p := range ps {
			if _, lerr := Lookup(p.Name); lerr != nil || seen[p.Name] {
				t.Fatalf("%q: preset %q unknown or repeated", v, p.Name)
			}
			seen[p.Name] = true
		}
		if err != nil && !errors.Is(err, ErrUnknownPreset) {
			t.Fatalf("%q: %v", v, err)
		}
	})
}
