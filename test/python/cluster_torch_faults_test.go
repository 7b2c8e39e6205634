package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// TestClusterTorchFaults is the cluster proof of load_bundle(group)'s
// faults, on the namespace cluster's 3 nodes x 2 torchrun workers (one
// `torchrun --nnodes 3 --nproc-per-node 2 --rdzv-backend c10d` a node,
// gloo over the nodes' links, mpi4py blocked, no libmpi; torch_prog.py,
// the load's timeout 60 s), each job's DEST in a folder of its own in
// every node's node-local storage, which the test lists on each node
// through the cluster's rsh:
//
//   - damaged-index, damaged-data: a bundle with a byte flipped in its
//     index (rank 0 refuses it before streaming) or in its data (300 MB:
//     found while every node stages it): all 6 workers raise the same
//     BundleUnusableError, and no node has anything in the folder;
//   - killed: a worker of a node that is not rank 0's (rank 3, not its
//     node's leader) is SIGKILLed while its node stages the bundle (300
//     MB): every node's torchrun ends, non-zero, within the load's
//     timeout of the kill, no worker reports success, and no node has a
//     DEST or a staging tree left;
//   - dest-taken: on the second node DEST is a foreign non-empty folder,
//     on the third a plain file: every worker raises a LoadFailedError
//     naming both hosts, what was there is untouched, and no node keeps
//     a copy.
func TestClusterTorchFaults(t *testing.T) {
	state, nodes := clusterState(t)
	tr := torchrun(t)
	pp := torchSite(t)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "torch_prog.py")
	clusterReadable(strings.SplitN(pp, ":", 2)[1])
	base := t.TempDir()
	os.Chmod(base, 0o755)
	small := filepath.Join(base, "small")
	for _, f := range []string{"numba/a.nbi", "numba/a.1.nbc", "triton/k1/kernel.json", "top.txt"} {
		os.MkdirAll(filepath.Join(small, filepath.Dir(f)), 0o755)
		os.WriteFile(filepath.Join(small, f), []byte(strings.Repeat(f, 5000)), 0o644)
	}
	good := small + ".kbundle"
	if _, se, code := testutil.Run(t, nil, kb, "pack", "--dir", small, "-o", good); code != 0 {
		t.Fatalf("pack %s: %s", small, se)
	}
	os.RemoveAll(small)
	large := bigBundle(t, kb, base)
	// damage writes file with its middle byte flipped, as name.
	damage := func(file, name string) string {
		b, _ := os.ReadFile(file)
		b[len(b)/2] ^= 0xff
		bad := filepath.Join(base, name)
		os.WriteFile(bad, b, 0o644)
		return bad
	}

	rsh := func(t *testing.T, node string, argv ...string) string {
		t.Helper()
		so, se, code := testutil.Run(t, nil, append([]string{filepath.Join(state, "rsh"), node}, argv...)...)
		if code != 0 {
			t.Fatalf("%s: %v: exit %d\n%s", node, argv, code, se)
		}
		return so
	}
	// folder makes the job's folder on every node (removed at the end)
	// and returns it.
	folder := func(t *testing.T, name string) string {
		t.Helper()
		dir := filepath.Join(clusterLocal, fmt.Sprintf("kbundle-torchfault-%d-%s", os.Getpid(), name))
		for _, n := range nodes {
			rsh(t, n, "mkdir", "-p", dir)
			t.Cleanup(func() { testutil.Run(t, nil, filepath.Join(state, "rsh"), n, "rm", "-rf", dir) })
		}
		return dir
	}
	// holds checks what each node has in dir (`ls -A`): want[i] on the
	// i-th node, nothing where want is short.
	holds := func(t *testing.T, dir string, want ...string) {
		t.Helper()
		for i, n := range nodes {
			l := strings.Join(strings.Fields(rsh(t, n, "ls", "-A", dir)), " ")
			w := ""
			if i < len(want) {
				w = want[i]
			}
			if l != w {
				t.Errorf("%s: in %s: %q, want %q", n, dir, l, w)
			}
		}
	}
	job := func(t *testing.T, env []string, file, dest string) ([]torchNodeRun, []torchResult, string) {
		t.Helper()
		runs := clusterTorchrun(t, state, nodes, tr, pp, env, prog, "load", file, dest)
		out := torchOutput(runs)
		res := torchResults[torchResult](t, out)
		for _, r := range res {
			if r.OK || r.LibMPI || r.MPI4py {
				t.Errorf("rank %d on %s: %+v, want a failure with neither libmpi nor mpi4py", r.Rank, r.Host, r)
			}
		}
		return runs, res, out
	}
	// refused is a job that every worker sees fail and reports (each
	// catches the error and ends normally): 6 results, every torchrun 0.
	refused := func(t *testing.T, file, dest string) []torchResult {
		t.Helper()
		runs, res, out := job(t, nil, file, dest)
		if len(res) != clusterNodes*clusterPerNode || runs[0].Code != 0 || runs[1].Code != 0 || runs[2].Code != 0 {
			t.Fatalf("%d results, want %d, and every torchrun 0\n%s", len(res), clusterNodes*clusterPerNode, out)
		}
		t.Logf("rank %d: %s: %s", res[0].Rank, res[0].Error, res[0].Message)
		return res
	}

	// Damaged: the small bundle's middle is its index, which rank 0
	// checks before it streams; the large one's is data, which fails the
	// check while every node stages it.
	for _, c := range []struct{ name, file string }{
		{"damaged-index", damage(good, "damaged-index.kbundle")},
		{"damaged-data", damage(large, "damaged-data.kbundle")},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := folder(t, c.name)
			res := refused(t, c.file, filepath.Join(dir, "dest"))
			for _, r := range res {
				if r.Error != "BundleUnusableError" || r.Message != res[0].Message || !strings.Contains(r.Message, c.name+".kbundle") {
					t.Errorf("rank %d on %s: %+v, want the BundleUnusableError of rank %d: %q", r.Rank, r.Host, r, res[0].Rank, res[0].Message)
				}
			}
			holds(t, dir)
		})
	}

	t.Run("killed", func(t *testing.T) {
		dir := folder(t, "killed")
		start := time.Now()
		runs, res, out := job(t, []string{"KBUNDLE_BCAST_CHUNK=65536", "TORCH_PROG_KILL=3:0.2:" + dir, "TORCH_PROG_RAISE=1"}, large, filepath.Join(dir, "dest"))
		var kill struct {
			Host string
			Time float64
		}
		for _, r := range runs {
			for _, line := range strings.Split(r.Stderr, "\n") {
				if js, ok := strings.CutPrefix(line, "KILL "); ok {
					json.Unmarshal([]byte(js), &kill)
				}
			}
		}
		if kill.Host == "" {
			t.Fatalf("rank 3 was not killed\n%s", out)
		}
		killed := time.Unix(0, int64(kill.Time*1e9))
		for _, r := range res {
			if r.Rank == 0 && r.Host == kill.Host {
				t.Errorf("rank 0 ran on %s too, the killed worker's node", kill.Host)
			}
		}
		// The bound is the load's timeout (torch_prog.py), from the kill.
		var last time.Duration
		for _, r := range runs {
			took := r.End.Sub(killed)
			if r.Code == 0 || took > 60*time.Second {
				t.Errorf("%s: torchrun exit %d, %v after the kill, want non-zero within 60 s", r.Node, r.Code, took.Round(time.Millisecond))
			}
			last = max(last, took)
		}
		holds(t, dir)
		t.Logf("rank 3 killed on %s %v after the start; every torchrun ended within %v of it; %d results (failures)",
			kill.Host, killed.Sub(start).Round(time.Millisecond), last.Round(time.Millisecond), len(res))
		if t.Failed() {
			t.Logf("%s", out)
		}
	})

	t.Run("dest-taken", func(t *testing.T) {
		dir := folder(t, "taken")
		dest := filepath.Join(dir, "dest")
		rsh(t, nodes[1], "mkdir", dest)
		rsh(t, nodes[1], "echo mine >"+dest+"/results")
		rsh(t, nodes[2], "echo mine >"+dest)
		res := refused(t, good, dest)
		for _, r := range res {
			if r.Error != "LoadFailedError" || !strings.Contains(r.Message, nodes[1]) || !strings.Contains(r.Message, nodes[2]) ||
				strings.Contains(r.Message, nodes[0]) {
				t.Errorf("rank %d on %s: %+v, want a LoadFailedError naming %s and %s", r.Rank, r.Host, r, nodes[1], nodes[2])
			}
		}
		holds(t, dir, "", "dest", "dest")
		if got := rsh(t, nodes[1], "cat", dest+"/results") + rsh(t, nodes[2], "cat", dest) + rsh(t, nodes[1], "ls", "-A", dest); got != "mine\nmine\nresults\n" {
			t.Errorf("what was at DEST changed: %q", got)
		}
	})
}
