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
)

// TestExtractUnknownRecordedPreset: a bundle recording a preset this
// kbundle does not know (from a newer one) is unusable for extract, as for
// load (exit 3, nothing extracted), unless --preset names the presets with --replace-presets.
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
	for _, want := range []string{`unknown preset "kbundle-future"`, "hint: upgrade kbundle, or name the presets with --preset and --replace-presets"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr does not say %q:\n%s", want, &errOut)
		}
	}
	if _, err := os.Lstat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s exists after the refusal (%v)", dest, err)
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"kbundle", "extract", "-q", "--preset", "triton", "--replace-presets", b, dest}, &out, &errOut); code != 0 {
		t.Fatalf("with --preset: exit %d; stderr:\n%s", code, &errOut)
	}
	if want := "export TRITON_CACHE_DIR=" + filepath.Join(dest, "triton") + "\nexport TRITON_CACHE_AUTOTUNING=1\n"; out.String() != want {
		t.Errorf("stdout %q, want %q", &out, want)
	}
}
