package democache

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDeterministic(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	sa, err := Generate(a, Options{Kernels: 3, Seed: 7, Scale: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	sb, _ := Generate(b, Options{Kernels: 3, Seed: 7, Scale: 0.1})
	if sa != sb || sa.Files != 21 {
		t.Fatalf("stats %v vs %v", sa, sb)
	}
	ents, _ := os.ReadDir(a)
	for _, e := range ents {
		fs, _ := os.ReadDir(filepath.Join(a, e.Name()))
		for _, f := range fs {
			x, _ := os.ReadFile(filepath.Join(a, e.Name(), f.Name()))
			y, _ := os.ReadFile(filepath.Join(b, e.Name(), f.Name()))
			if f.Name()[:7] != "__grp__" && string(x) != string(y) {
				t.Fatalf("%s differs", f.Name())
			}
		}
	}
}
