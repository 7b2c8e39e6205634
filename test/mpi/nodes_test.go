package mpi

import (
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestLoadCLIFakeNodes runs `kbundle load` with every RPN consecutive
// ranks grouped as one node (KBUNDLE_TEST_RANKS_PER_NODE), so that on one
// machine the multi-node path runs for real: several leaders, the bundle
// broadcast among them in many chunks, one extraction per "node" into
// DEST.node<k>, and the outcome agreed by all ranks.
func TestLoadCLIFakeNodes(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	for _, v := range testutil.MPIVariants {
		for _, c := range []struct{ np, rpn int }{{2, 1}, {4, 1}, {4, 2}} {
			nodes := c.np / c.rpn
			t.Run(fmt.Sprintf("%s/np%d/%d-nodes", v, c.np, nodes), func(t *testing.T) {
				kb := testutil.Kbundle(t, v)
				dest := filepath.Join(t.TempDir(), "dest")
				env := []string{"KBUNDLE_BCAST_CHUNK=4096", fmt.Sprintf("KBUNDLE_TEST_RANKS_PER_NODE=%d", c.rpn)}
				stdout, stderr, code := testutil.RunMPI(t, v, c.np, env, kb, "load", "--bundle", file, "--to", dest)
				if code != 0 {
					t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
				}
				if want := fmt.Sprintf(" on %d nodes", nodes); !strings.Contains(stderr, want) {
					t.Errorf("summary lacks %q\nstderr:\n%s", want, stderr)
				}
				if n := strings.Count(stderr, "kbundle: loaded "); n != 1 {
					t.Errorf("%d summaries\nstderr:\n%s", n, stderr)
				}
				for k := range nodes {
					sameTrees(t, tree, fmt.Sprintf("%s.node%d", dest, k))
				}
				if _, err := os.Lstat(dest); err == nil {
					t.Errorf("%s exists: fake nodes must use DEST.node<k>", dest)
				}
				// Leaders stream the bundle into temporary siblings of DEST
				// and rename them: only the DEST.node<k> trees remain.
				if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != nodes {
					t.Errorf("beside DEST: %v, want only the %d node trees", ents, nodes)
				}
			})
		}
	}
}

// TestLoadCLIFakeNodesFailures: a failure on one leader, or a bundle rank
// 0 cannot use, gives every rank of every node the same status and the
// reason once; no node is left with a half-extracted tree.
func TestLoadCLIFakeNodesFailures(t *testing.T) {
	tree := makeTree(t)
	const np = 4
	for _, v := range testutil.MPIVariants {
		t.Run(fmt.Sprintf("%s/node2-dest-not-empty", v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			file := packTree(t, tree)
			dest := filepath.Join(t.TempDir(), "dest")
			busy := dest + ".node2"
			if err := os.MkdirAll(busy, 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(busy, "old"), []byte("old"), 0o600); err != nil {
				t.Fatal(err)
			}
			wrap, codes := rankWrapper(t)
			env := append([]string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}, keepGoing...)
			stdout, stderr, _ := testutil.RunMPI(t, v, np, env, wrap, kb, "load", "--bundle", file, "--to", dest)
			wantExits(t, codes, np, 1, stderr)
			if n := strings.Count(stderr, "destination exists and is not empty"); n != 1 {
				t.Errorf("reason printed %d times\nstderr:\n%s", n, stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q on failure", stdout)
			}
			if b, err := os.ReadFile(filepath.Join(busy, "old")); err != nil || string(b) != "old" {
				t.Errorf("node 2's old DEST was touched: %v", err)
			}
			// All or nothing: no other node keeps a DEST.
			for _, k := range []int{0, 1, 3} {
				if _, err := os.Lstat(fmt.Sprintf("%s.node%d", dest, k)); !os.IsNotExist(err) {
					t.Errorf("node %d has a DEST although node 2 failed: %v", k, err)
				}
			}
			if !strings.Contains(stderr, "(rank 2): ") {
				t.Errorf("the failing node and its ranks are not named\nstderr:\n%s", stderr)
			}
			ents, _ := os.ReadDir(filepath.Dir(dest))
			for _, e := range ents {
				if strings.Contains(e.Name(), "kbundle-tmp") || strings.Contains(e.Name(), "kbundle-spool") {
					t.Errorf("temporary directory left: %s", e.Name())
				}
			}
		})
		t.Run(fmt.Sprintf("%s/bit-flipped", v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			file := packTree(t, tree)
			b, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/3] ^= 0x10
			if err := os.WriteFile(file, b, 0o644); err != nil {
				t.Fatal(err)
			}
			dest := filepath.Join(t.TempDir(), "dest")
			wrap, codes := rankWrapper(t)
			env := append([]string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}, keepGoing...)
			_, stderr, _ := testutil.RunMPI(t, v, np, env, wrap, kb, "load", "--bundle", file, "--to", dest)
			wantExits(t, codes, np, 3, stderr)
			if n := strings.Count(stderr, "checksum mismatch"); n != 1 {
				t.Errorf("reason printed %d times\nstderr:\n%s", n, stderr)
			}
			if ents, _ := os.ReadDir(filepath.Dir(dest)); len(ents) != 0 {
				t.Errorf("left behind: %v", ents)
			}
		})
	}
}

// TestLoadCLIDefaultDestTaken: the default DEST ($TMPDIR/kbundle-USER-JOB),
// made in advance by another user on one node (W6), moves the load on
// every node to the same unguessable sibling; rank 0 says so once, prints
// the new DEST first, and the other user's directory is left alone.
func TestLoadCLIDefaultDestTaken(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a directory of another user")
	}
	tree := makeTree(t)
	const np = 4
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			file := packTree(t, tree)
			tmp := t.TempDir()
			me, err := user.Current()
			if err != nil {
				t.Fatal(err)
			}
			base := filepath.Join(tmp, "kbundle-"+me.Username+"-w6")
			theirs := base + ".node2"
			if err := os.Mkdir(theirs, 0o777); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(theirs, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=1", "TMPDIR=" + tmp, "SLURM_JOB_ID=w6", "KBUNDLE_LOCAL_DIR="}
			stdout, stderr, code := testutil.RunMPI(t, v, np, env, kb, "load", "--bundle", file)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			// (rank 0 names its own path, the same as node 2's on real nodes)
			if n := strings.Count(stderr, base+".node0 belongs to another user on 1 node"); n != 1 {
				t.Errorf("warning printed %d times\nstderr:\n%s", n, stderr)
			}
			first, _, _ := strings.Cut(stdout, "\n")
			sfx, ok := strings.CutPrefix(first, base+"-")
			if !ok || len(sfx) != len("0123456789abcdef.node0") || !strings.HasSuffix(sfx, ".node0") {
				t.Fatalf("DEST %q, want %s-<16 hex digits>.node0\nstderr:\n%s", first, base, stderr)
			}
			moved := strings.TrimSuffix(first, ".node0")
			for k := range np {
				sameTrees(t, tree, fmt.Sprintf("%s.node%d", moved, k))
			}
			if ents, _ := os.ReadDir(theirs); len(ents) != 0 {
				t.Errorf("the other user's directory was written into: %v", ents)
			}
			if ents, _ := os.ReadDir(tmp); len(ents) != np+1 {
				t.Errorf("in TMPDIR: %v, want the %d node trees and the other user's directory", ents, np)
			}
		})
	}
}
