package mpi

import (
	"encoding/json"
	"fmt"
	"github.com/kbundle/kbundle/bundle"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestLoadBundleProgram runs a Go program calling broadcast.LoadBundle on
// every rank; all ranks must hold the source tree, checked collectively.
// The bundle goes in many small chunks (KBUNDLE_BCAST_CHUNK).
func TestLoadBundleProgram(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	for _, c := range variantsNP() {
		t.Run(testutil.Describe(c.v, c.np), func(t *testing.T) {
			prog := testutil.Build(t, c.v, "./test/mpi/internal/loadprog")
			env := []string{"KBUNDLE_BCAST_CHUNK=1000", "KBUNDLE_CACHE_DIR=" + filepath.Dir(file)}
			stdout, stderr, code := testutil.RunMPI(t, c.v, c.np, env, prog, "-tree", tree)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			rc, err := bundle.Open(file, nil)
			if err != nil {
				t.Fatal(err)
			}
			chunks := (rc.BodyEnd() - rc.BodyStart() + 999) / 1000 // the body's; the prelude goes first
			rc.Close()
			for r := range c.np {
				want := fmt.Sprintf("ok rank %d size %d entries ", r, c.np)
				if !strings.Contains(stdout, want) {
					t.Errorf("missing %q\nstdout:\n%s", want, stdout)
				}
			}
			if want := fmt.Sprintf(" chunks %d\n", chunks); !strings.Contains(stdout, want) {
				t.Errorf("want %d chunks\nstdout:\n%s", chunks, stdout)
			}
		})
	}
}

// TestLoadCLI runs `kbundle load` end to end; DEST must equal the source
// tree (content, permissions, nanosecond mtimes), and rank 0 alone
// prints DEST and the summary.
func TestLoadCLI(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	for _, c := range variantsNP() {
		t.Run(testutil.Describe(c.v, c.np), func(t *testing.T) {
			kb := testutil.Kbundle(t, c.v)
			dest := filepath.Join(t.TempDir(), "dest")
			env := []string{"KBUNDLE_BCAST_CHUNK=4096"}
			stdout, stderr, code := testutil.RunMPI(t, c.v, c.np, env, kb, "load", "--bundle", file, "--to", dest)
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			if stdout != dest+"\n" {
				t.Errorf("stdout %q, want DEST once", stdout)
			}
			if n := strings.Count(stderr, "kbundle: loaded "); n != 1 {
				t.Errorf("%d summaries\nstderr:\n%s", n, stderr)
			}
			sameTrees(t, tree, dest)

			// --json, --force and a preset, into the same DEST.
			stdout, stderr, code = testutil.RunMPI(t, c.v, c.np, nil, kb, "load", "--bundle", file, "--to", dest, "--force", "--json", "--preset", "triton")
			if code != 0 {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			var s struct {
				Dest    string   `json:"dest"`
				Entries int      `json:"entries"`
				Nodes   int      `json:"nodes"`
				Ranks   int      `json:"ranks"`
				MPI     bool     `json:"mpi"`
				Env     []string `json:"env"`
			}
			if err := json.Unmarshal([]byte(stdout), &s); err != nil {
				t.Fatalf("%v\nstdout:\n%s", err, stdout)
			}
			if s.Dest != dest || s.Nodes != 1 || s.Ranks != c.np || s.MPI != (c.np > 1) || s.Entries == 0 ||
				len(s.Env) == 0 || !strings.HasPrefix(s.Env[0], "TRITON_CACHE_DIR="+dest) {
				t.Errorf("summary %+v", s)
			}
			const grp = "triton/abc123/__grp__kernel.json"
			// Relocation rewrites the group file (and so its directory's mtime).
			sameTrees(t, tree, dest, grp, path.Dir(grp))
			if b, err := os.ReadFile(filepath.Join(dest, grp)); err != nil || !strings.Contains(string(b), dest+"/triton/abc123/kernel.cubin") {
				t.Errorf("group file not relocated to DEST: %s %v", b, err)
			}
		})
	}
}

// TestLoadPrintEnv: --print-env prints only the export lines.
func TestLoadPrintEnv(t *testing.T) {
	file := packTree(t, makeTree(t))
	v := testutil.OpenMPI
	kb := testutil.Kbundle(t, v)
	dest := filepath.Join(t.TempDir(), "dest")
	stdout, stderr, code := testutil.RunMPI(t, v, 2, nil, kb, "load", "--bundle", file, "--to", dest, "--preset", "triton", "--print-env")
	if code != 0 || stdout != "export TRITON_CACHE_DIR="+dest+"/triton\nexport TRITON_CACHE_AUTOTUNING=1\n" {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
}

// TestVersion: `kbundle version` names the MPI library of each build.
func TestVersion(t *testing.T) {
	for _, v := range append([]testutil.Variant{testutil.NoMPI}, testutil.MPIVariants...) {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			stdout, stderr, code := testutil.Run(t, nil, kb, "version")
			if code != 0 || !strings.Contains(stdout, "mpi: "+libraryName[v]) {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
		})
	}
}

// TestLoadWithoutLauncher: an MPI build started directly loads locally.
func TestLoadWithoutLauncher(t *testing.T) {
	tree := makeTree(t)
	file := packTree(t, tree)
	for _, v := range append([]testutil.Variant{testutil.NoMPI}, testutil.MPIVariants...) {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			dest := filepath.Join(t.TempDir(), "dest")
			stdout, stderr, code := testutil.Run(t, nil, kb, "load", "--bundle", file, "--to", dest)
			if code != 0 || stdout != dest+"\n" {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
			}
			sameTrees(t, tree, dest)
		})
	}
}
