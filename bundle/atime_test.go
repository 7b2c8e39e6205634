package bundle

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func atime(t *testing.T, p string) time.Time {
	t.Helper()
	fi, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return time.Unix(fi.Sys().(*syscall.Stat_t).Atim.Unix())
}

// Extraction sets a file's access time to its mtime, so that on a
// relatime mount (and strictatime) the job's first read moves it past the
// install record's install time, which is how harvest tells use; kbundle's
// own reads of a DEST (CompareTree, PathDigest: hashAt) use O_NOATIME and
// leave it. Checked for real on the test's temporary directory, unless it
// is mounted noatime.
func TestOwnReadsKeepAtime(t *testing.T) {
	dir := t.TempDir()
	path, dest := filepath.Join(dir, "b.kbundle"), filepath.Join(dir, "dest")
	writeLayer(t, path, map[string]string{"numba/f.nbi": "index", "numba/f.1.nbc": "code"})
	r, err := Open(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, err := r.Extract(context.Background(), dest, nil); err != nil {
		t.Fatal(err)
	}
	rec, err := ReadInstallRecord(dest)
	if err != nil {
		t.Fatal(err)
	}
	installed, err := time.Parse(time.RFC3339Nano, rec.Installed)
	if err != nil {
		t.Fatal(err)
	}
	nbi, nbc := filepath.Join(dest, "numba/f.nbi"), filepath.Join(dest, "numba/f.1.nbc")
	for _, p := range []string{nbi, nbc} {
		if fi, _ := os.Stat(p); !atime(t, p).Equal(fi.ModTime()) {
			t.Fatalf("%s: atime %v after extraction, want its mtime %v", p, atime(t, p), fi.ModTime())
		}
	}
	// A file whose mtime alone changed is read by CompareTree (and diff's
	// PathDigest) to compare digests.
	at := atime(t, nbc)
	if err := os.Chtimes(nbc, at, at.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	ch, err := CompareTree(dest, rec)
	if err != nil || !ch.Same() {
		t.Fatalf("CompareTree: %v, %v", ch, err)
	}
	if _, err := PathDigest(dest, "numba/f.1.nbc"); err != nil {
		t.Fatal(err)
	}
	if got := atime(t, nbc); !got.Equal(at) {
		t.Errorf("kbundle's reads moved the access time from %v to %v", at, got)
	}

	var st unix.Statfs_t
	if err := unix.Statfs(dest, &st); err != nil {
		t.Fatal(err)
	}
	if st.Flags&unix.ST_NOATIME != 0 {
		t.Skip("the temporary directory is mounted noatime: reads cannot be seen here")
	}
	time.Sleep(20 * time.Millisecond) // past the install time, on a coarse clock too
	for _, p := range []string{nbi, nbc} {
		if _, err := os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
		if got := atime(t, p); !got.After(installed) {
			t.Errorf("%s: read after the install (%v), atime %v: a job's read would not be seen", p, installed, got)
		}
	}
}
