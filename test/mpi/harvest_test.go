package mpi

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// TestHarvestUnderMPI: kbundle harvest under both MPIs at np 2 with fake
// nodes: after a load, the entry one node compiled becomes the set's
// first layer, written once by rank 0; a second harvest writes nothing.
// A build without MPI under the launcher is refused (exit 2, no
// --per-task: only load has it), and a harvest that runs past its
// --timeout is aborted on every rank with a message naming it, as load's
// guard does.
func TestHarvestUnderMPI(t *testing.T) {
	tree := makeTree(t)
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			kb := testutil.Kbundle(t, v)
			set := packTree(t, tree)
			dest := filepath.Join(t.TempDir(), "dest")
			if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("load: exit %d\n%s", code, se)
			}
			if err := os.WriteFile(filepath.Join(dest+".node1", "new.bin"), []byte("compiled on node 1"), 0o600); err != nil {
				t.Fatal(err)
			}
			_, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--bundle", set, "--to", dest)
			layers, _ := filepath.Glob(set + ".d/*.kbundle")
			if code != 0 || len(layers) != 1 || strings.Count(se, "compiled 1 entry (") != 1 {
				t.Fatalf("harvest: exit %d, layers %v, want one layer and one node that compiled 1 entry\n%s", code, layers, se)
			}
			if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--bundle", set, "--to", dest); code != 0 {
				t.Fatalf("second harvest: exit %d\n%s", code, se)
			}
			if again, _ := filepath.Glob(set + ".d/*.kbundle"); len(again) != 1 {
				t.Errorf("a second harvest of the same trees wrote a layer: %v", again)
			}
			_, se, code = testutil.RunMPI(t, v, 2, env, kb, "harvest", "--timeout", "0.000001", "--bundle", set, "--to", dest)
			if code == 0 || !strings.Contains(se, "harvest did not finish within 1µs") {
				t.Errorf("harvest past its timeout: exit %d\n%s", code, se)
			}
		})
	}
	t.Run("nompi", func(t *testing.T) {
		kb := testutil.Kbundle(t, testutil.NoMPI)
		set := packTree(t, tree)
		_, se, code := testutil.RunMPI(t, testutil.OpenMPI, 2, nil, kb, "harvest", "--bundle", set, "--to", filepath.Join(t.TempDir(), "d"))
		if code != 2 || !strings.Contains(se, "built without MPI but runs under Open MPI's mpirun") || strings.Contains(se, "--per-task") {
			t.Errorf("exit %d, want 2 and the mismatch named without --per-task\n%s", code, se)
		}
	})
}

// TestHarvestRecordsToolchain: the layer a harvest under mpirun writes
// records the toolchain of the presets DEST was loaded with, read with
// the job's Python (--python): Debian's python3 and its Numba, as `warm`
// records them for a base.
func TestHarvestRecordsToolchain(t *testing.T) {
	const py = "/usr/bin/python3"
	out, err := exec.Command(py, "-c", "import platform, numba; print(platform.python_version(), numba.__version__)").Output()
	if err != nil {
		if testutil.Required("JIT") {
			t.Fatalf("Debian's python3-numba is missing (make deps): %v", err)
		}
		t.Skip("Debian's python3-numba is missing")
	}
	want := strings.Fields(string(out))
	tree := makeTree(t)
	env := []string{"KBUNDLE_TEST_RANKS_PER_NODE=1"}
	v := testutil.OpenMPI
	kb := testutil.Kbundle(t, v)
	set := packTree(t, tree)
	dest := filepath.Join(t.TempDir(), "dest")
	if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "load", "-q", "--preset", "numba", "--bundle", set, "--to", dest); code != 0 {
		t.Fatalf("load: exit %d\n%s", code, se)
	}
	if err := os.WriteFile(filepath.Join(dest+".node0", "new.bin"), []byte("compiled on node 0"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, se, code := testutil.RunMPI(t, v, 2, env, kb, "harvest", "--python", py, "--bundle", set, "--to", dest); code != 0 {
		t.Fatalf("harvest: exit %d\n%s", code, se)
	}
	layers, _ := filepath.Glob(set + ".d/*.kbundle")
	if len(layers) != 1 {
		t.Fatalf("layers %v, want one", layers)
	}
	r, err := bundle.Open(layers[0], nil)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	m := r.Meta()
	if m[bundle.MetaPython] != want[0] || m[bundle.MetaNumba] != want[1] {
		t.Errorf("the layer records python %q, numba %q; want %q, %q (all: %v)", m[bundle.MetaPython], m[bundle.MetaNumba], want[0], want[1], m)
	}
}
