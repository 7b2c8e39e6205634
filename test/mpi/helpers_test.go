package mpi

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
)

// makeTree writes a small cache tree with varied modes, nested and empty
// directories and nanosecond mtimes, and returns its path.
func makeTree(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "cache")
	rng := rand.New(rand.NewPCG(1, 2))
	files := []struct {
		name string
		size int
		mode fs.FileMode
	}{
		{"triton/abc123/kernel.cubin", 70000, 0o644},
		{"triton/abc123/kernel.json", 300, 0o644},
		{"triton/abc123/__grp__kernel.json", 200, 0o600},
		{"triton/def456/kernel.so", 150000, 0o755},
		{"numba/mod.nbi", 5000, 0o640},
		{"numba/mod.1.nbc", 0, 0o644},
		{"top.txt", 12, 0o444},
	}
	spec := tree.Spec{}
	for i, f := range files {
		b := make([]byte, f.size)
		for j := range b {
			b[j] = byte(rng.IntN(16)) // compressible but not trivial
		}
		if strings.HasPrefix(path.Base(f.name), "__grp__") {
			// A Triton group file names its children by absolute path.
			b = []byte(`{"child_paths": {"kernel.cubin": "` + filepath.Join(dir, filepath.FromSlash(path.Dir(f.name)), "kernel.cubin") + `"}}`)
		}
		spec[f.name] = tree.File{Data: string(b), Mode: f.mode, MTime: time.Unix(1700000000+int64(i), int64(123456789+i))}
	}
	spec["empty/dir"] = tree.File{Dir: true, Mode: 0o750}
	// Directory mtimes, deepest first as before.
	dirs := []string{"empty", "empty/dir", "numba", "triton", "triton/abc123", "triton/def456"}
	for i := len(dirs) - 1; i >= 0; i-- {
		f := spec[dirs[i]]
		f.Dir = true
		f.MTime = time.Unix(1600000000+int64(i), 987654321)
		spec[dirs[i]] = f
	}
	tree.Write(t, dir, spec)
	return dir
}

// packTree packs tree into a fresh private directory and returns the
// bundle's path.
func packTree(t *testing.T, tree string) string {
	t.Helper()
	store := filepath.Join(t.TempDir(), "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(store, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), tree, out, nil); err != nil {
		t.Fatal(err)
	}
	return out
}

// sameTrees compares two trees: kinds, permissions, nanosecond mtimes
// (files and directories) and content; skip names only mode and kind
// (tree.Same, the one definition every package uses).
func sameTrees(t *testing.T, want, got string, skipContent ...string) {
	t.Helper()
	tree.Same(t, want, got, tree.Options{Mtimes: true, SkipContent: skipContent})
}

// rankWrapper writes a script that runs its arguments and records the
// exit status in dir/rc.RANK (rank from Open MPI's or PMI's variables),
// so tests can check that every rank exited the same way.
func rankWrapper(t *testing.T) (script, dir string) {
	t.Helper()
	dir = t.TempDir()
	script = filepath.Join(dir, "wrap.sh")
	body := `#!/bin/sh
"$@"
rc=$?
echo $rc > "` + dir + `/rc.${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-x}}"
exit $rc
`
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return script, dir
}

// rankCodes reads the exit statuses written by rankWrapper's script.
func rankCodes(t *testing.T, dir string, np int) []int {
	t.Helper()
	codes := make([]int, np)
	for r := range np {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("rc.%d", r)))
		if err != nil {
			t.Fatalf("rank %d left no exit status: %v", r, err)
		}
		codes[r], err = strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
	}
	return codes
}

// wantExits fails unless every one of np ranks recorded (rankWrapper) the
// exit status want.
func wantExits(t *testing.T, dir string, np, want int, stderr string) {
	t.Helper()
	for r, got := range rankCodes(t, dir, np) {
		if got != want {
			t.Errorf("rank %d exited %d, want %d\nstderr:\n%s", r, got, want, stderr)
		}
	}
}

// variants lists the builds to test with their rank counts.
func variantsNP() []struct {
	v  testutil.Variant
	np int
} {
	var out []struct {
		v  testutil.Variant
		np int
	}
	for _, v := range testutil.MPIVariants {
		for _, np := range []int{1, 2, 4} {
			out = append(out, struct {
				v  testutil.Variant
				np int
			}{v, np})
		}
	}
	return out
}
