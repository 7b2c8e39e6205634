package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/warmup"
)

// TestRecordedOr: extract applies --preset's presets when given (even
// none), else the bundle's recorded ones, as load does.
func TestRecordedOr(t *testing.T) {
	numba, _ := warmup.Lookup("numba")
	for _, tc := range []struct {
		name  string
		named []*warmup.Preset
		given bool
		meta  map[string]string
		want  string // preset names, or "error"
	}{
		{"recorded", nil, false, map[string]string{bundle.MetaPreset: "triton,jax"}, "triton,jax"},
		{"none recorded", nil, false, map[string]string{}, ""},
		{"named replaces recorded", []*warmup.Preset{numba}, true, map[string]string{bundle.MetaPreset: "triton"}, "numba"},
		{"empty --preset applies none", nil, true, map[string]string{bundle.MetaPreset: "triton"}, ""},
		{"recorded unknown", nil, false, map[string]string{bundle.MetaPreset: "triton,kbundle-future"}, "error"},
		{"named beats an unknown recorded", []*warmup.Preset{numba}, true, map[string]string{bundle.MetaPreset: "kbundle-future"}, "numba"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := recordedOr(tc.named, tc.given, tc.meta)
			if tc.want == "error" {
				if !errors.Is(err, warmup.ErrUnknownPreset) {
					t.Fatalf("error %v, want ErrUnknownPreset", err)
				}
				return
			}
			if err != nil || warmup.PresetNames(got) != tc.want {
				t.Fatalf("recordedOr = %q, %v; want %q", warmup.PresetNames(got), err, tc.want)
			}
		})
	}
}

// TestExtractUnknownRecordedPreset: a bundle recording a preset this
// kbundle does not know (from a newer one) is unusable for extract, as for
// load (exit 3, nothing extracted), unless --preset names the presets.
func TestExtractUnknownRecordedPreset(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(src, "triton", "k"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "triton", "k", "k.ptx"), []byte("ptx"), 0o644); err != nil {
		t.Fatal(err)
	}
	b := filepath.Join(dir, "b.kbundle")
	if _, err := bundle.Pack(context.Background(), src, b, &bundle.PackOptions{Preset: "triton,kbundle-future"}); err != nil {
		t.Fatal(err)
	}
	var out, errOut bytes.Buffer
	dest := filepath.Join(dir, "dest")
	if code := run([]string{"kbundle", "extract", b, dest}, &out, &errOut); code != exitUnusable {
		t.Fatalf("exit %d, want %d; stderr:\n%s", code, exitUnusable, &errOut)
	}
	for _, want := range []string{`unknown preset "kbundle-future"`, "hint: upgrade kbundle, or name the presets with --preset"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, &errOut)
		}
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after the refusal (%v)", dest, err)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"kbundle", "extract", "-q", "--preset", "triton", b, dest}, &out, &errOut); code != 0 {
		t.Fatalf("with --preset: exit %d; stderr:\n%s", code, &errOut)
	}
	if want := "export TRITON_CACHE_DIR=" + filepath.Join(dest, "triton") + "\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", &out, want)
	}
}
