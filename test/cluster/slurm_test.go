package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// slurm runs a Slurm client command on the controller node.
func (c *cluster) slurm(t *testing.T, env []string, argv ...string) *result {
	t.Helper()
	a := append([]string{"env", "SLURM_CONF=" + c.conf}, argv...)
	return run(t, env, c.onArgv("kbctl", a...)...)
}

// sbatch submits script with args as a batch job on 3 nodes x 2 tasks,
// waits (at most jobTimeout) for its end and returns its state, exit code
// and output.
func (c *cluster) sbatch(t *testing.T, env []string, script string, args ...string) (state string, exit int, output string) {
	t.Helper()
	c.needSlurm(t)
	dir, err := os.MkdirTemp(tmpRoot, "job-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	out := filepath.Join(dir, "job.out")
	argv := []string{"sbatch", "--parsable", "--job-name=kbundle-cluster-test", "--chdir=" + dir, "--output=" + out,
		"-N", strconv.Itoa(numNodes), "--ntasks-per-node=" + strconv.Itoa(perNode), script}
	r := c.slurm(t, env, append(argv, args...)...)
	if r.code != 0 {
		t.Fatalf("sbatch: %s", r)
	}
	id, _, _ := strings.Cut(strings.TrimSpace(r.stdout), ";")
	if _, err := strconv.Atoi(id); err != nil {
		t.Fatalf("sbatch printed %q, not a job id", r.stdout)
	}
	ended := false
	t.Cleanup(func() {
		if !ended {
			c.slurm(t, nil, "scancel", id)
		}
	})
	deadline := time.Now().Add(jobTimeout)
	var rec string
	for {
		rec = strings.TrimSpace(c.slurm(t, nil, "scontrol", "show", "job", "-o", id).stdout)
		if state, exit, _, ended = testutil.JobEnded(rec); ended {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(out)
			nodes := c.slurm(t, nil, "sinfo", "-N", "-o", "%N %t %E").stdout
			queue := c.slurm(t, nil, "squeue", "-o", "%i %T %R %S").stdout
			t.Fatalf("job %s did not end within %v (a hang is a failure)\n%s\n--- output:\n%s--- sinfo:\n%s--- squeue:\n%s", id, jobTimeout, rec, b, nodes, queue)
		}
		time.Sleep(200 * time.Millisecond)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("job %s ended %s but its output: %v\n%s", id, state, err, rec)
	}
	return state, exit, string(b)
}

// TestSbatch: an `sbatch -N 3` job running the shipped
// scripts/slurm/kbundle-run.sbatch (Open MPI build with srun --mpi=pmix,
// MPICH build with pmi2) loads the bundle onto every node, then runs the
// application on all 6 tasks, which find the loaded copy on their node;
// the script's cleanup then removes it from every node.
func TestSbatch(t *testing.T) {
	c := needCluster(t)
	c.needSlurm(t)
	tree := makeTree(t, 1<<20)
	script := filepath.Join(testutil.RepoRoot(), "scripts", "slurm", "kbundle-run.sbatch")
	for _, l := range srunLaunches {
		for _, cleanup := range []string{"0", "1"} {
			t.Run(fmt.Sprintf("%s/cleanup=%s", l.name, cleanup), func(t *testing.T) {
				kb := c.kbundle(t, l.v)
				file := pack(t, kb, tree)
				parent := c.localDir(t)
				dest := filepath.Join(parent, "dest")
				mpi := strings.TrimPrefix(l.name, "srun-")
				env := []string{"KBUNDLE=" + kb, "KBUNDLE_SRUN_MPI=" + mpi, "KBUNDLE_BUNDLE=" + file,
					"KBUNDLE_LOCAL_DIR=" + dest, "KBUNDLE_CLEANUP=" + cleanup}
				app := `echo "app $(hostname) $SLURM_PROCID $(ls "$KBUNDLE_LOCAL_DIR" | tr '\n' ,)"`
				state, exit, out := c.sbatch(t, env, script, "sh", "-c", app)
				if state != "COMPLETED" || exit != 0 {
					t.Fatalf("job %s exit %d\n%s", state, exit, out)
				}
				if n := strings.Count(out, "kbundle: loaded "); n != 1 || !strings.Contains(out, fmt.Sprintf(" on %d nodes", numNodes)) {
					t.Errorf("want one summary naming %d nodes:\n%s", numNodes, out)
				}
				for i := range np {
					want := fmt.Sprintf("app %s %d big,bin,empty,numba,top.txt,triton,", c.nodes[i/perNode], i)
					if !strings.Contains(out, want+"\n") {
						t.Errorf("no line %q in the job's output:\n%s", want, out)
					}
				}
				if cleanup == "1" {
					c.wantOnly(t, parent, nil)
					return
				}
				for _, n := range c.nodes {
					sameTrees(t, n, tree, c.root(n, dest))
				}
				c.wantOnly(t, parent, map[string][]string{c.nodes[0]: {"dest"}, c.nodes[1]: {"dest"}, c.nodes[2]: {"dest"}})
			})
		}
	}
}
