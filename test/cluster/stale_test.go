package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// deadPid returns a pid that no process has.
func deadPid(t *testing.T) int {
	t.Helper()
	for pid := 4194000; pid > 100000; pid -= 7 {
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			return pid
		}
	}
	t.Fatal("no free pid found")
	return 0
}

// tempMarker and markerText are bundle's: the locked file at the top of
// every temporary tree, its proof of being kbundle's own temporary.
const (
	tempMarker = ".kbundle-temporary"
	markerText = "kbundle: temporary tree of an unfinished extraction, locked while its process lives; kbundle removes it once unlocked\n"
)

// TestStaleTemps: what a killed load or extract left on a node (temp names
// .kbundle-tmp-<host>-<pid>-<random>: a tree with its unlocked marker, a
// file) is removed by the next load or extract into the same parent when
// it belongs to the same user; a live process's (its marker locked,
// whatever its pid says), another host's, another user's and a tree
// without the marker (a directory renamed to such a name) are left alone.
// Under mpirun, mpiexec.hydra, and a plain `kbundle extract` on the node.
func TestStaleTemps(t *testing.T) {
	c := needCluster(t)
	tree := makeTree(t, 64<<10)
	node := c.nodes[1]
	dead := strconv.Itoa(deadPid(t))
	stale := []string{
		".kbundle-tmp-" + node + "-" + dead + "-111", // a tree
		".kbundle-tmp-" + node + "-" + dead + "-222", // a file
	}
	keep := []string{
		".kbundle-tmp-" + node + "-" + dead + "-333", // a tree, its marker locked: its process lives (in some PID namespace)
		".kbundle-tmp-kbn99-" + dead + "-444",        // another host's
		".kbundle-tmp-" + node + "-" + dead + "-555", // another user's (chowned below)
		".kbundle-tmp-" + node + "-" + dead + "-666", // a tree without the marker
	}
	plantTree := func(t *testing.T, dir string, marker bool) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, "sub", "part"), make([]byte, 1<<20), 0o600)
		if marker {
			if err := os.WriteFile(filepath.Join(dir, tempMarker), []byte(markerText), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	plant := func(t *testing.T, parent string) {
		t.Helper()
		root := c.root(node, parent)
		plantTree(t, filepath.Join(root, stale[0]), true)
		os.WriteFile(filepath.Join(root, stale[1]), []byte("partial"), 0o600)
		plantTree(t, filepath.Join(root, keep[0]), true)
		f, err := os.Open(filepath.Join(root, keep[0], tempMarker))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil { // held by this test: alive
			t.Fatal(err)
		}
		for _, k := range keep[1:3] {
			if err := os.WriteFile(filepath.Join(root, k), []byte("keep"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Lchown(filepath.Join(root, keep[2]), 65534, 65534); err != nil {
			t.Fatal(err)
		}
		plantTree(t, filepath.Join(root, keep[3]), false)
	}
	check := func(t *testing.T, parent string, dests ...string) {
		t.Helper()
		want := map[string][]string{}
		for _, n := range c.nodes {
			want[n] = append([]string(nil), dests...)
		}
		want[node] = append(want[node], keep...)
		c.wantOnly(t, parent, want)
	}
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			kb := c.kbundle(t, l.v)
			file := pack(t, kb, tree)
			parent := c.localDir(t)
			plant(t, parent)
			w := newWrapper(t, false)
			r := c.job(t, l, nil, w.script, kb, "load", "--bundle", file, "--to", filepath.Join(parent, "dest"))
			w.wantExits(t, c, r, 0)
			check(t, parent, "dest")
		})
	}
	t.Run("extract", func(t *testing.T) {
		kb := c.kbundle(t, mpiLaunches[0].v)
		file := pack(t, kb, tree)
		parent := c.localDir(t)
		plant(t, parent)
		if so, se, code := c.on(t, node, kb, "extract", file, filepath.Join(parent, "dest")); code != 0 {
			t.Fatalf("extract on %s: exit %d\n%s%s", node, code, so, se)
		}
		want := map[string][]string{node: append([]string{"dest"}, keep...)}
		for _, n := range c.nodes {
			if n != node {
				want[n] = nil
			}
		}
		c.wantOnly(t, parent, want)
	})
}
