package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

func openPacked(t *testing.T) (*ReadCloser, string) {
	t.Helper()
	src := makeTree(t, 7, 60)
	out, _ := pack(t, src, nil)
	rc, err := Open(out, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc, src
}

// TestStageInstallAbort: the two-phase extraction used for all-or-nothing
// loads: nothing at dest before Install, the old tree back after an Abort
// of an installed replacement, nothing at all after an Abort of a fresh one.
func TestStageInstallAbort(t *testing.T) {
	rc, src := openPacked(t)
	ctx := context.Background()
	t.Run("abort before install", func(t *testing.T) {
		parent := filepath.Join(t.TempDir(), "made", "here")
		dest := filepath.Join(parent, "dest")
		if _, err := rc.Stage(ctx, dest, nil); !errors.Is(err, ErrNoParent) || !strings.Contains(err.Error(), filepath.Dir(parent)+":") {
			t.Fatalf("Stage with missing parents: %v, want ErrNoParent naming %s", err, filepath.Dir(parent))
		}
		if _, err := os.Lstat(filepath.Dir(parent)); !os.IsNotExist(err) {
			t.Fatalf("a refused Stage made %s", filepath.Dir(parent))
		}
		s, err := rc.Stage(ctx, dest, &ExtractOptions{Parents: true})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(dest); !os.IsNotExist(err) {
			t.Fatalf("dest exists before Install: %v", err)
		}
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Lstat(filepath.Join(filepath.Dir(parent))); !os.IsNotExist(err) {
			t.Fatalf("parents Stage made are still there: %v", err)
		}
	})
	t.Run("install then abort", func(t *testing.T) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "dest")
		s, err := rc.Stage(ctx, dest, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(); err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dest)
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		noLeftovers(t, parent)
	})
	// replaceInstalled stages the bundle over a tree kbundle installed
	// earlier (with Force) and installs it.
	replaceInstalled := func(t *testing.T) (parent, dest string, s *Staged) {
		t.Helper()
		parent = t.TempDir()
		dest = filepath.Join(parent, "dest")
		installedBefore(t, dest, 0o755)
		s, err := rc.Stage(ctx, dest, &ExtractOptions{Force: true})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Install(); err != nil {
			t.Fatal(err)
		}
		return parent, dest, s
	}
	t.Run("replace then abort restores the old tree", func(t *testing.T) {
		parent, dest, s := replaceInstalled(t)
		sameTree(t, src, dest)
		if err := s.Abort(); err != nil {
			t.Fatal(err)
		}
		if b, err := os.ReadFile(filepath.Join(dest, "old")); err != nil || string(b) != "old" {
			t.Fatalf("old tree not restored: %q %v", b, err)
		}
		noLeftovers(t, parent, "dest")
	})
	t.Run("replace then commit", func(t *testing.T) {
		parent, dest, s := replaceInstalled(t)
		if err := s.Commit(); err != nil {
			t.Fatal(err)
		}
		sameTree(t, src, dest)
		noLeftovers(t, parent, "dest")
	})
}

// TestProgressCumulative: Extract's and Verify's progress reach the total
// exactly once and never go back.
func TestProgressCumulative(t *testing.T) {
	rc, _ := openPacked(t)
	check := func(t *testing.T, run func(func(done, total int64))) {
		var last, full int64
		var calls int
		run(func(done, total int64) {
			calls++
			if done < last || done > total {
				t.Fatalf("progress %d of %d after %d", done, total, last)
			}
			if done == total {
				full++
			}
			last = done
		})
		if calls == 0 || full != 1 {
			t.Fatalf("%d calls, %d at 100%%", calls, full)
		}
	}
	t.Run("extract", func(t *testing.T) {
		check(t, func(p func(int64, int64)) {
			if _, err := rc.Extract(context.Background(), filepath.Join(t.TempDir(), "d"), &ExtractOptions{Jobs: 4, Progress: p}); err != nil {
				t.Fatal(err)
			}
		})
	})
	for _, deep := range []bool{false, true} {
		t.Run("verify deep="+strconv.FormatBool(deep), func(t *testing.T) {
			check(t, func(p func(int64, int64)) {
				if err := rc.Verify(context.Background(), &VerifyOptions{Deep: deep, Jobs: 4, Progress: p}); err != nil {
					t.Fatal(err)
				}
			})
		})
	}
}
