package mpi

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// TestLoadBig loads, once, a bundle above 2 GiB (incompressible data)
// with broadcast.LoadBundle under Open MPI with 2 ranks (both receive it:
// `kbundle load` on one node would not broadcast at all), in chunks of
// the largest MPI count (2^31-1 bytes) plus a tail, and checks that both
// ranks hold the source tree. Needs
// KBUNDLE_TEST_BIG=1 (set by `make test`), about 7 GiB of memory and
// 5 GiB of disk, and a minute or two.
func TestLoadBig(t *testing.T) {
	if os.Getenv("KBUNDLE_TEST_BIG") != "1" {
		t.Skip("set KBUNDLE_TEST_BIG=1 to load a bundle above 2 GiB")
	}
	v := testutil.OpenMPI
	prog := testutil.Build(t, v, "./test/mpi/internal/loadprog")
	start := time.Now()
	tree := filepath.Join(t.TempDir(), "cache")
	if err := os.MkdirAll(filepath.Join(tree, "big"), 0o755); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewChaCha8([32]byte{1}))
	const files, size = 17, 128 << 20 // 2176 MiB
	buf := make([]byte, size)
	for i := range files {
		for j := 0; j < len(buf); j += 8 {
			v := rng.Uint64()
			for k := range 8 {
				buf[j+k] = byte(v >> (8 * k))
			}
		}
		if err := os.WriteFile(filepath.Join(tree, "big", "blob"+strconv.Itoa(i)), buf, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	buf = nil
	store := filepath.Join(t.TempDir(), "store")
	os.Mkdir(store, 0o700)
	file := filepath.Join(store, "cache.kbundle")
	res, err := bundle.Pack(context.Background(), tree, file, &bundle.PackOptions{Level: bundle.LevelFastest})
	if err != nil {
		t.Fatal(err)
	}
	if res.PackedBytes <= 1<<31 {
		t.Fatalf("bundle of %d bytes is not above 2 GiB", res.PackedBytes)
	}
	t.Logf("made a %d-byte bundle in %v", res.PackedBytes, time.Since(start))

	start = time.Now()
	env := []string{"KBUNDLE_BCAST_CHUNK=" + strconv.Itoa(1<<31-1)}
	stdout, stderr, code := testutil.RunMPI(t, v, 2, env, prog, "-bundle", file, "-tree", tree)
	if code != 0 {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"ok rank 0 size 2 entries 18 chunks 2\n", "ok rank 1 size 2 entries 18 chunks 2\n"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("missing %q\nstdout:\n%s", want, stdout)
		}
	}
	t.Logf("loaded and checked on 2 ranks in %v", time.Since(start))
}
