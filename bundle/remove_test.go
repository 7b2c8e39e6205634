package bundle

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRemoveTreeRace is the scenario of review finding B2: while a tree is
// removed (--force, or a failed extraction), its owner keeps exchanging a
// subdirectory with a symlink to a directory outside it. A path-based
// chmod followed the symlink and changed the outside directory's mode;
// removeTree must never touch anything outside the tree.
func TestRemoveTreeRace(t *testing.T) {
	for run := 0; run < 10; run++ {
		base := t.TempDir()
		target := filepath.Join(base, "target")
		os.MkdirAll(filepath.Join(target, "sub"), 0o755)
		os.WriteFile(filepath.Join(target, "sub", "keep"), []byte("keep"), 0o644)
		os.Chmod(target, 0o555) // what the chmod-by-path would "fix" to 0700
		tree := filepath.Join(base, "tree")
		os.Mkdir(tree, 0o755)
		for i := range 300 {
			d := filepath.Join(tree, fmt.Sprintf("d%04d", i))
			os.Mkdir(d, 0o500) // read-only: removal must make each writable
		}
		os.Mkdir(filepath.Join(tree, "d9999"), 0o500)
		os.Symlink(target, filepath.Join(tree, "zz-link"))
		var stop atomic.Bool
		done := make(chan struct{})
		go func() {
			a, b := filepath.Join(tree, "d9999"), filepath.Join(tree, "zz-link")
			for !stop.Load() {
				if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) != nil {
					break // the tree is gone
				}
			}
			close(done)
		}()
		err := removeTree(tree)
		stop.Store(true)
		<-done
		if fi, serr := os.Stat(target); serr != nil || fi.Mode().Perm() != 0o555 {
			t.Fatalf("run %d: the directory outside the tree changed: %v %v", run, fi.Mode(), serr)
		}
		if b, _ := os.ReadFile(filepath.Join(target, "sub", "keep")); string(b) != "keep" {
			t.Fatalf("run %d: a file outside the tree was removed", run)
		}
		if err != nil {
			// The racing rename may make one unlinkat fail; a retry ends it.
			if err := removeTree(tree); err != nil {
				t.Fatalf("run %d: %v", run, err)
			}
		}
		if _, err := os.Lstat(tree); !os.IsNotExist(err) {
			t.Fatalf("run %d: tree still there: %v", run, err)
		}
		os.Chmod(target, 0o755)
	}
}

// TestRemoveTreeDeepReadOnly is review finding B6: a tree whose absolute
// paths are longer than PATH_MAX, with read-only directories, is removed
// (path-based chmod failed with ENAMETOOLONG and left it behind).
func TestRemoveTreeDeepReadOnly(t *testing.T) {
	tree := filepath.Join(t.TempDir(), "tree")
	os.Mkdir(tree, 0o755)
	fd, err := unix.Open(tree, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	comp := strings.Repeat("L", 200)
	var fds []int
	for range 30 { // 30 x 201 bytes > PATH_MAX
		if err := unix.Mkdirat(fd, comp, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, comp, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fds = append(fds, fd)
		fd = next
	}
	f, _ := unix.Openat(fd, "z", unix.O_CREAT|unix.O_WRONLY, 0o000)
	unix.Close(f)
	for _, d := range append(fds, fd) {
		unix.Fchmod(d, 0o500)
		unix.Close(d)
	}
	if err := removeTree(tree); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(tree); !os.IsNotExist(err) {
		t.Fatalf("tree still there: %v", err)
	}
}
