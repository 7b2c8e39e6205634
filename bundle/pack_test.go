package bundle

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestPackSymlinkRace is the scenario of review finding B3: while the
// victim packs a directory another user can write, that user keeps
// exchanging a regular file with a symlink to the victim's private file.
// Reading by path after the walk followed the symlink and packed the
// secret; Pack must pack the regular file, or fail, never the secret.
func TestPackSymlinkRace(t *testing.T) {
	base := t.TempDir()
	secret := []byte("TOP-SECRET-ssh-key-material-0123456789\n")
	os.WriteFile(filepath.Join(base, "secret.txt"), secret, 0o600)
	cache := filepath.Join(base, "cache")
	os.Mkdir(cache, 0o755)
	os.WriteFile(filepath.Join(cache, "k.cubin"), []byte("kernel\n"), 0o644)
	os.WriteFile(filepath.Join(cache, "f.bin"), bytes.Repeat([]byte("A"), len(secret)), 0o644)
	os.Symlink(filepath.Join(base, "secret.txt"), filepath.Join(cache, "zz-link"))
	a, b := filepath.Join(cache, "f.bin"), filepath.Join(cache, "zz-link")
	stopSwapping := swapping(a, b)
	out := filepath.Join(base, "p.kbundle")
	var ok, failed int
	for i := 0; i < 200; i++ {
		_, err := Pack(context.Background(), cache, out, &PackOptions{Host: fixedHost, Jobs: 2})
		if err != nil {
			if !errors.Is(err, errChanged) {
				stopSwapping()
				t.Fatalf("pack %d: %v, want a 'changed while being packed' error", i, err)
			}
			failed++
			continue
		}
		ok++
		got, _ := os.ReadFile(out)
		r, err := NewReaderBytes(got)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range r.Entries() {
			if e.Dir {
				continue
			}
			data, err := r.ReadEntry(e.Name)
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(data, []byte("TOP-SECRET")) {
				stopSwapping()
				t.Fatalf("pack %d: entry %s holds the private file", i, e.Name)
			}
		}
	}
	swaps := stopSwapping()
	t.Logf("200 packs during %d swaps: %d packed without the secret, %d refused (changed while being packed)", swaps, ok, failed)
}

// TestPackSymlinks: a symlink to a regular file inside the tree (Julia
// artifacts: libz.so -> libz.so.1 -> libz.so.1.2.13) is stored as a copy,
// stored once; others are listed as skipped with the reason (M8).
func TestPackSymlinks(t *testing.T) {
	src := t.TempDir()
	lib := filepath.Join(src, "artifacts", "0123", "lib")
	os.MkdirAll(lib, 0o755)
	body := bytes.Repeat([]byte("ELF"), 100000)
	os.WriteFile(filepath.Join(lib, "libz.so.1.2.13"), body, 0o755)
	os.Symlink("libz.so.1.2.13", filepath.Join(lib, "libz.so.1"))
	os.Symlink("libz.so.1", filepath.Join(lib, "libz.so"))
	os.Symlink("../lib/./libz.so", filepath.Join(lib, "libz-dots.so"))
	os.Symlink("lib", filepath.Join(src, "artifacts", "0123", "lib64")) // a directory: skipped
	os.Symlink("nowhere", filepath.Join(lib, "dangling"))
	os.Symlink("self", filepath.Join(lib, "self"))
	out, res := pack(t, src, nil)
	if res.Files != 4 || len(res.Copied) != 3 || len(res.Skipped) != 3 {
		t.Fatalf("files=%d copied=%q skipped=%q", res.Files, res.Copied, res.Skipped)
	}
	for _, want := range []string{"artifacts/0123/lib/dangling (target artifacts/0123/lib/nowhere is not packed",
		"artifacts/0123/lib/self (too many levels", "artifacts/0123/lib64 (points to a directory)"} {
		if !strings.Contains(strings.Join(res.Skipped, "\n"), want) {
			t.Errorf("skipped %q lacks %q", res.Skipped, want)
		}
	}
	if res.Unique != 1 || res.RawBytes != 4*int64(len(body)) {
		t.Errorf("unique=%d raw=%d: the copies must share one blob", res.Unique, res.RawBytes)
	}
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, n := range []string{"libz.so", "libz.so.1", "libz-dots.so"} {
		got, err := rc.ReadEntry("artifacts/0123/lib/" + n)
		if err != nil || !bytes.Equal(got, body) {
			t.Errorf("%s: %v, %d bytes", n, err, len(got))
		}
	}
}

// TestPackNeverWritesWhatReadersRefuse: a tree with many long, repetitive
// names compresses its index beyond the reader's 64x bound; the writer
// must then store the index so that the bundle stays readable (B5).
func TestPackNeverWritesWhatReadersRefuse(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, nil)
	dir := strings.Repeat("x", 250) + "/" + strings.Repeat("y", 250) + "/" + strings.Repeat("z", 250)
	mt := time.Unix(1700000000, 0)
	for i := range 20000 {
		if err := w.WriteFile(fmt.Sprintf("%s/%s%05d", dir, strings.Repeat("f", 200), i), 0o644, mt, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := NewReaderBytes(buf.Bytes())
	if err != nil {
		t.Fatalf("the reader refuses what the writer wrote: %v", err)
	}
	if len(r.Entries()) != 20003 {
		t.Fatalf("%d entries", len(r.Entries()))
	}
	// The stored-index encoding round-trips at block boundaries.
	for _, n := range []int{1, 128<<10 - 1, 128 << 10, 128<<10 + 1, 3 << 17} {
		raw := bytes.Repeat([]byte{7}, n)
		got, err := decodeIndex(storeIndex(raw))
		if err != nil || !bytes.Equal(got, raw) {
			t.Fatalf("storeIndex of %d bytes: %v", n, err)
		}
	}
}

// TestPackReportsWritableAndUntrusted: entries others could write are
// listed (W3), and a bundle that load would refuse is reported (H4).
func TestPackReportsWritableAndUntrusted(t *testing.T) {
	src := t.TempDir()
	os.Mkdir(filepath.Join(src, "shared"), 0o755)
	os.Chmod(filepath.Join(src, "shared"), 0o775)
	os.WriteFile(filepath.Join(src, "shared", "k"), []byte("k"), 0o644)
	os.WriteFile(filepath.Join(src, "w"), []byte("w"), 0o644)
	os.Chmod(filepath.Join(src, "w"), 0o666)
	os.WriteFile(filepath.Join(src, "ok"), []byte("ok"), 0o644)
	outDir := filepath.Join(t.TempDir(), "pub")
	os.Mkdir(outDir, 0o755)
	os.Chmod(outDir, 0o777)
	res, err := Pack(context.Background(), src, filepath.Join(outDir, "b.kbundle"), &PackOptions{Host: fixedHost})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(res.Writable, "\n")
	if len(res.Writable) != 2 || !strings.Contains(all, "directory mode 0775") || !strings.Contains(all, "file mode 0666") {
		t.Errorf("writable: %q", res.Writable)
	}
	if !errors.Is(res.Untrusted, ErrUntrusted) || !strings.Contains(res.Untrusted.Error(), "pub: untrusted: directory mode 0777") {
		t.Errorf("untrusted: %v", res.Untrusted)
	}
	os.Chmod(outDir, 0o755)
	os.Chmod(filepath.Join(src, "shared"), 0o755)
	os.Chmod(filepath.Join(src, "w"), 0o644)
	res, err = Pack(context.Background(), src, filepath.Join(outDir, "b.kbundle"), &PackOptions{Host: fixedHost})
	if err != nil || res.Untrusted != nil || len(res.Writable) != 0 {
		t.Fatalf("private tree: %v, %v, %q", err, res.Untrusted, res.Writable)
	}
}

// TestJobsBounded: any --jobs gives a bounded number of workers (B9):
// 2^59 made pack panic (makechan) and extract start 2^59 goroutines.
func TestJobsBounded(t *testing.T) {
	procs := runtime.GOMAXPROCS(0)
	for _, c := range []struct{ in, want int }{
		{0, procs}, {-3, procs}, {1, 1}, {1 << 59, min(4*procs, MaxJobs)}, {1e6, min(4*procs, MaxJobs)},
	} {
		if got := Jobs(c.in); got != c.want {
			t.Errorf("Jobs(%d) = %d, want %d", c.in, got, c.want)
		}
	}
	src := t.TempDir()
	os.WriteFile(filepath.Join(src, "k"), []byte("k"), 0o644)
	out, _ := pack(t, src, &PackOptions{Jobs: 1 << 59})
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), &ExtractOptions{Jobs: 1 << 59}); err != nil {
		t.Fatal(err)
	}
}

// cancelAfter is a context whose Err reports cancellation from its
// (after+1)th call on: Pack cancelled at an exact point of its work.
type cancelAfter struct {
	context.Context
	calls atomic.Int64
	after int64
}

func (c *cancelAfter) Err() error {
	if c.calls.Add(1) > c.after {
		return context.Canceled
	}
	return nil
}

// TestPackCancelledKeepsOld is S8: a pack cancelled (SIGTERM) while it
// copied a big file went on to the end, replaced the existing bundle, and
// the CLI then said "stopped". Cancelled at any point before the rename,
// Pack fails with context.Canceled, the old bundle is unchanged and no
// temporary is left; only a Pack that was not cancelled replaces it.
func TestPackCancelledKeepsOld(t *testing.T) {
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "big"), bytes.Repeat([]byte("kernel\n"), (bigFile+(1<<20))/7), 0o644); err != nil {
		t.Fatal(err)
	}
	outDir := t.TempDir()
	out := filepath.Join(outDir, "old.kbundle")
	old := []byte("the old bundle")
	opt := &PackOptions{Jobs: 1, SegmentSize: MinSegmentSize, Host: fixedHost}
	count := &cancelAfter{Context: context.Background(), after: 1 << 62}
	if _, err := Pack(count, src, filepath.Join(t.TempDir(), "dry.kbundle"), opt); err != nil {
		t.Fatal(err)
	}
	total := count.calls.Load() // checks of the context in a whole pack
	if total < 3 {
		t.Fatalf("Pack checks its context %d times: not inside the copy of a big file", total)
	}
	for _, after := range []int64{0, 1, 2, total / 2, total - 1} {
		t.Run(fmt.Sprintf("cancelled after %d of %d checks", after, total), func(t *testing.T) {
			if err := os.WriteFile(out, old, 0o644); err != nil {
				t.Fatal(err)
			}
			_, err := Pack(&cancelAfter{Context: context.Background(), after: after}, src, out, opt)
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Pack: %v, want context.Canceled", err)
			}
			if b, _ := os.ReadFile(out); !bytes.Equal(b, old) {
				t.Fatalf("the old bundle was replaced (%d bytes)", len(b))
			}
			noLeftovers(t, outDir, "old.kbundle")
		})
	}
}
