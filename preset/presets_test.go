package preset

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// required is the table the issue asks for; more presets may follow.
var required = map[string][]string{
	"tack":     {"TACK_CACHE_DIR", "TACK_CACHE"},
	"triton":   {"TRITON_CACHE_DIR"},
	"inductor": {"TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR"},
	"jax":      {"JAX_COMPILATION_CACHE_DIR"},
	"numba":    {"NUMBA_CACHE_DIR"},
	"cupy":     {"CUPY_CACHE_DIR"},
	"pocl":     {"POCL_CACHE_DIR", "POCL_KERNEL_CACHE"},
	"pyopencl": {"XDG_CACHE_HOME", "POCL_CACHE_DIR", "POCL_KERNEL_CACHE"},
	"cuda":     {"CUDA_CACHE_PATH"},
	"julia":    {"JULIA_DEPOT_PATH"},
}

func TestPresetsComplete(t *testing.T) {
	subdirs := map[string]string{}
	for name, want := range required {
		p, err := Lookup(name)
		if err != nil {
			t.Fatalf("preset %s: %v", name, err)
		}
		var got []string
		for _, v := range p.AllVars() {
			got = append(got, v.Name)
		}
		for _, w := range want {
			if !slices.Contains(got, w) {
				t.Errorf("preset %s does not set %s (sets %v)", name, w, got)
			}
		}
	}
	for _, p := range Presets() {
		if p.Framework == "" || p.Subdir == "" || len(p.Vars) == 0 || len(p.Misses) == 0 {
			t.Errorf("preset %s: framework, subdir, vars and misses are required", p.Name)
		}
		if prev, ok := subdirs[p.Subdir]; ok {
			t.Errorf("presets %s and %s share subdirectory %s", prev, p.Name, p.Subdir)
		}
		subdirs[p.Subdir] = p.Name
		if !filepath.IsLocal(p.Subdir) {
			t.Errorf("preset %s: subdir %q is not local", p.Name, p.Subdir)
		}
		for _, v := range p.Vars {
			if v.Source == "" || v.Doc == "" {
				t.Errorf("preset %s: variable %s needs a source and a doc line", p.Name, v.Name)
			}
			if v.Dir && !filepath.IsLocal(filepath.FromSlash(v.Value)) {
				t.Errorf("preset %s: %s=%q leaves DIR", p.Name, v.Name, v.Value)
			}
		}
		for _, inc := range p.Includes {
			if _, err := Lookup(inc); err != nil {
				t.Errorf("preset %s includes %s: %v", p.Name, inc, err)
			}
		}
	}
	// Every preset can share one DIR: no variable gets two values.
	if _, err := EnvFor("/d", Presets()...); err != nil {
		t.Errorf("presets cannot share one DIR: %v", err)
	}
}

func TestLookup(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		err        error
	}{
		{"numba", "numba", nil},
		{" Numba ", "numba", nil},
		{"TRITON", "triton", nil},
		{"nope", "", ErrUnknownPreset},
		{"", "", ErrUnknownPreset},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Lookup(tc.name)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Lookup(%q) error %v, want %v", tc.name, err, tc.err)
			}
			if err == nil && p.Name != tc.want {
				t.Fatalf("Lookup(%q) = %s, want %s", tc.name, p.Name, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "numba") {
				t.Errorf("error %q does not list the known presets", err)
			}
		})
	}
}

func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		preset string
		want   []string
	}{
		{"numba", []string{"NUMBA_CACHE_DIR=/d/numba"}},
		{"tack", []string{"TACK_CACHE_DIR=/d/tack", "TACK_CACHE=write"}},
		{"triton", []string{"TRITON_CACHE_DIR=/d/triton", "TRITON_CACHE_AUTOTUNING=1"}},
		{"inductor", []string{"TORCHINDUCTOR_CACHE_DIR=/d/inductor", "TRITON_CACHE_DIR=/d/triton", "TRITON_CACHE_AUTOTUNING=1"}},
		{"pocl", []string{"POCL_CACHE_DIR=/d/pocl", "POCL_KERNEL_CACHE=1"}},
		{"pyopencl", []string{"XDG_CACHE_HOME=/d/xdg", "POCL_CACHE_DIR=/d/pocl", "POCL_KERNEL_CACHE=1"}},
		{"jax", []string{"JAX_COMPILATION_CACHE_DIR=/d/jax", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0", "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1", "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none"}},
		{"cupy", []string{"CUPY_CACHE_DIR=/d/cupy"}},
		{"cuda", []string{"CUDA_CACHE_PATH=/d/cuda"}},
		{"julia", []string{"JULIA_DEPOT_PATH=/d/julia"}},
	} {
		t.Run(tc.preset, func(t *testing.T) {
			p, err := Lookup(tc.preset)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Env("/d/"); !slices.Equal(got, tc.want) {
				t.Errorf("Env = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnvRelativeDirIsMadeAbsolute(t *testing.T) {
	p, _ := Lookup("numba")
	wd, _ := os.Getwd()
	got := p.Env("cache")
	if want := "NUMBA_CACHE_DIR=" + filepath.Join(wd, "cache", "numba"); got[0] != want {
		t.Errorf("Env(relative) = %q, want %q", got[0], want)
	}
}

func TestEnvForDedupes(t *testing.T) {
	tr, _ := Lookup("triton")
	ind, _ := Lookup("inductor")
	got, err := EnvFor("/d", tr, ind)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"TRITON_CACHE_DIR=/d/triton", "TRITON_CACHE_AUTOTUNING=1", "TORCHINDUCTOR_CACHE_DIR=/d/inductor"}
	if !slices.Equal(got, want) {
		t.Errorf("EnvFor = %q, want %q", got, want)
	}
}

// TestPresetsDocumented checks that docs/presets.md names every preset,
// every variable and every variable's documentation source.
func TestPresetsDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "docs", "presets.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, p := range Presets() {
		if !strings.Contains(doc, "`"+p.Name+"`") {
			t.Errorf("docs/presets.md does not mention preset `%s`", p.Name)
		}
		if !strings.Contains(doc, p.Subdir) {
			t.Errorf("docs/presets.md does not give %s's subdirectory %s", p.Name, p.Subdir)
		}
		for _, v := range p.Vars {
			if !strings.Contains(doc, "`"+v.Name+"`") && !strings.Contains(doc, "`"+v.Name+"=") {
				t.Errorf("docs/presets.md does not mention %s's variable `%s`", p.Name, v.Name)
			}
		}
	}
	if !strings.Contains(strings.ToLower(doc), "writable") {
		t.Error("docs/presets.md does not say the loaded copy must be writable")
	}
}

// TestMergeDB: MIOpen's databases are merged record by record, SQLite
// and text each its way; other presets' files are not.
func TestMergeDB(t *testing.T) {
	for _, c := range []struct {
		presets []string
		name    string
		want    string
	}{
		{nil, "miopen/cache/gfx942_304.ukdb", MergeSQLite},
		{nil, "miopen/db/gfx942_304_1.1.0.udb", MergeSQLite},
		{[]string{"miopen"}, "miopen/db/gfx90a68_1.1.0.udb", MergeSQLite},
		{nil, "miopen/db/gfx942_304.HIP.6_2_0.ufdb.txt", MergeLines},
		{nil, "miopen/db/gfx942_304.HIP.6_2_0.udb.txt", MergeLines},
		{nil, "miopen/db/notes.txt", ""},
		{nil, "triton/x.ukdb", ""},
		{[]string{"triton"}, "miopen/cache/gfx942_304.ukdb", ""},
		{[]string{"no-such-preset"}, "miopen/cache/gfx942_304.ukdb", ""},
	} {
		if got := MergeDB(c.presets, c.name); got != c.want {
			t.Errorf("MergeDB(%q, %q) = %q, want %q", c.presets, c.name, got, c.want)
		}
	}
}
