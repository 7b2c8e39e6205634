package warmup

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kbundle/kbundle/preset"
)

func write(t *testing.T, path string, n int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, make([]byte, n), 0o600); err != nil {
		t.Fatal(err)
	}
}

func paths(c []preset.Change) []string {
	var out []string
	for _, x := range c {
		out = append(out, x.Path)
	}
	return out
}

func TestSnapshotDiff(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "numba", "keep.nbi"), 10)
	write(t, filepath.Join(dir, "numba", "grow.nbi"), 10)
	write(t, filepath.Join(dir, "numba", "touch.nbc"), 10)
	write(t, filepath.Join(dir, "pocl", "gone.so"), 7)
	write(t, filepath.Join(dir, "out.kbundle"), 99)
	before, err := TakeSnapshot(dir, "out.kbundle")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := before["out.kbundle"]; ok {
		t.Fatal("skipped path recorded")
	}
	write(t, filepath.Join(dir, "numba", "grow.nbi"), 25)
	old := time.Now().Add(-time.Hour)
	os.Chtimes(filepath.Join(dir, "numba", "touch.nbc"), old, old)
	os.Remove(filepath.Join(dir, "pocl", "gone.so"))
	write(t, filepath.Join(dir, "pocl", "kcache", "new.so"), 1000)
	write(t, filepath.Join(dir, "xdg", "pyopencl", "small"), 3)
	write(t, filepath.Join(dir, "out.kbundle"), 500)
	after, err := TakeSnapshot(dir, filepath.Join(dir, "out.kbundle"))
	if err != nil {
		t.Fatal(err)
	}
	d := Diff(before, after)
	if got, want := paths(d.Added), []string{"pocl/kcache/new.so", "xdg/pyopencl/small"}; !slices.Equal(got, want) {
		t.Errorf("added %v, want %v", got, want)
	}
	if got, want := paths(d.Changed), []string{"numba/grow.nbi", "numba/touch.nbc"}; !slices.Equal(got, want) {
		t.Errorf("changed %v, want %v", got, want)
	}
	if got, want := paths(d.Removed), []string{"pocl/gone.so"}; !slices.Equal(got, want) {
		t.Errorf("removed %v, want %v", got, want)
	}
	if d.AddedBytes != 1003 || d.ChangedBytes != 35 || d.RemovedBytes != 7 {
		t.Errorf("bytes added %d changed %d removed %d", d.AddedBytes, d.ChangedBytes, d.RemovedBytes)
	}
	if d.TotalFiles != 5 || d.TotalBytes != 10+25+10+1000+3 {
		t.Errorf("total %d files %d bytes", d.TotalFiles, d.TotalBytes)
	}
	if got, want := paths(d.Largest(2)), []string{"pocl/kcache/new.so", "numba/grow.nbi"}; !slices.Equal(got, want) {
		t.Errorf("largest %v, want %v", got, want)
	}
	if d.Empty() {
		t.Error("Empty() on a non-empty delta")
	}
	if !Diff(after, after).Empty() {
		t.Error("a snapshot differs from itself")
	}
}

func TestSnapshotMissingDir(t *testing.T) {
	s, err := TakeSnapshot(filepath.Join(t.TempDir(), "nope"))
	if err != nil || len(s) != 0 {
		t.Fatalf("missing dir: %v %v", s, err)
	}
}

func TestSnapshotSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write(t, filepath.Join(outside, "big"), 1<<20)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Skip(err)
	}
	s, err := TakeSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) != 1 || s["link"].Mode&os.ModeSymlink == 0 {
		t.Errorf("symlink followed or lost: %v", s)
	}
}

func TestDirOf(t *testing.T) {
	for in, want := range map[string]string{"numba/a/b": "numba", "top": ".", "x/": "x"} {
		if got := DirOf(in); got != want {
			t.Errorf("DirOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestNetworkFSName(t *testing.T) {
	for magic, want := range map[uint32]string{
		0x6969: "NFS", 0x0BD00BD0: "Lustre", 0x47504653: "GPFS (IBM Storage Scale)",
		0x19830326: "BeeGFS", 0xFF534D42: "CIFS", 0xEF53: "", 0x01021994: "",
	} {
		if got := networkFSName(magic); got != want {
			t.Errorf("networkFSName(%#x) = %q, want %q", magic, got, want)
		}
	}
	_ = NetworkFS(t.TempDir()) // must not fail on a local directory
	if got := NetworkFS("/does/not/exist"); got != "" {
		t.Errorf("NetworkFS(missing) = %q", got)
	}
}
