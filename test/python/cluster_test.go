package pythontest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

// The multi-node cluster of scripts/ci/nscluster-up.sh:
// 3 namespace nodes of 2 ranks, node-local tmpfs at /tmp/node-local
// (see the script's header and test/cluster).
const (
	clusterNodes   = 3
	clusterPerNode = 2
	clusterLocal   = "/tmp/node-local"
	clusterSubnet  = "198.18.0.0/24"
	clusterBridge  = "kbbr0"
)

// clusterState returns the cluster's state folder and its first nodes, or
// skips when KBUNDLE_TEST_CLUSTER is unset (a named cluster that is not up
// fails).
func clusterState(t *testing.T) (string, []string) {
	t.Helper()
	state := os.Getenv("KBUNDLE_TEST_CLUSTER")
	if state == "" {
		t.Skip("no test cluster: start one with `eval \"$(scripts/ci/nscluster-up.sh)\"` (as root), which sets KBUNDLE_TEST_CLUSTER")
	}
	list, err := os.ReadFile(filepath.Join(state, "nodes", "list"))
	if err != nil {
		t.Fatalf("KBUNDLE_TEST_CLUSTER=%s but the cluster is not up: %v", state, err)
	}
	var nodes []string
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		if name, _, _ := strings.Cut(line, " "); strings.HasPrefix(name, "kbn") {
			nodes = append(nodes, name)
		}
	}
	if len(nodes) < clusterNodes {
		t.Fatalf("cluster %s has %d nodes, want %d", state, len(nodes), clusterNodes)
	}
	return state, nodes[:clusterNodes]
}

// clusterReadable makes dir and the folders above it up to $TMPDIR
// readable by all: a test's files live under $TMPDIR, which every node
// shares, and the nodes' ranks read them whatever the umask.
func clusterReadable(dir string) {
	for d := dir; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
}

// clusterArgv runs argv as 6 ranks on 3 nodes with v's launcher (as
// test/cluster does).
func clusterArgv(state string, nodes []string, v testutil.Variant, argv ...string) []string {
	var hosts []string
	for _, n := range nodes {
		hosts = append(hosts, fmt.Sprintf("%s:%d", n, clusterPerNode))
	}
	np := strconv.Itoa(clusterNodes * clusterPerNode)
	agent := filepath.Join(state, "rsh")
	if v == testutil.OpenMPI {
		return append([]string{"mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
			"--mca", "plm_rsh_agent", agent,
			"--mca", "oob_tcp_if_include", clusterSubnet, "--mca", "btl_tcp_if_include", clusterSubnet,
			"--mca", "btl", "self,vader,tcp", "--mca", "btl_vader_single_copy_mechanism", "none",
			"--host", strings.Join(hosts, ","), "-np", np}, argv...)
	}
	return append([]string{"mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", agent, "-iface", clusterBridge,
		"-hosts", strings.Join(hosts, ","), "-n", np}, argv...)
}

// clusterReport is what cluster_prog.py writes for one rank.
type clusterReport struct {
	Rank     int               `json:"rank"`
	Host     string            `json:"host"`
	OK       bool              `json:"ok"`
	Kind     string            `json:"kind"`
	Reason   string            `json:"reason"`
	Nodes    int               `json:"nodes"`
	Ranks    int               `json:"ranks"`
	Leader   bool              `json:"leader"`
	Dest     string            `json:"dest"`
	Env      map[string]string `json:"env"`
	Environ  string            `json:"environ"`
	Warnings int               `json:"warnings"`
	Digest   string            `json:"digest"`
	Want     string            `json:"want"`
	Beside   []string          `json:"beside"`
}

// TestClusterLoad: load_bundle on 3 nodes x 2 ranks (mpirun, Hydra): every
// node's node-local copy is the source tree, one leader a node, the
// preset's variable set on every rank, nothing else beside DEST; with a
// damaged bundle every rank gets the same reason, rank 0 alone warns, and
// no node keeps anything.
func TestClusterLoad(t *testing.T) {
	state, nodes := clusterState(t)
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "cluster_prog.py")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			py := python(t, v)
			site := install(t, py)
			fx := fixtureMap(fixtures(t))
			clusterReadable(fx["KBUNDLE_PYTEST_TREE"])
			for _, c := range []struct {
				name, bundle string
				ok           bool
			}{{"good", fx["KBUNDLE_PYTEST_BUNDLE"], true}, {"damaged", fx["KBUNDLE_PYTEST_DAMAGED"], false}} {
				t.Run(c.name, func(t *testing.T) {
					out := t.TempDir()
					os.Chmod(out, 0o777)
					parent := filepath.Join(clusterLocal, fmt.Sprintf("kbundle-pytest-%d-%s-%s", os.Getpid(), v, c.name))
					task := `PYTHONPATH="$1" PYTHONDONTWRITEBYTECODE=1 exec "$0" "$2" "$3" "$4" "$5" "$6"`
					argv := clusterArgv(state, nodes, v, "sh", "-c", task, py, site, prog, c.bundle, fx["KBUNDLE_PYTEST_TREE"], parent, out)
					so, se, code := testutil.Run(t, nil, argv...)
					launch := fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", code, so, se)
					if code != 0 {
						t.Fatalf("%s", launch)
					}
					checkCluster(t, out, nodes, parent, c.ok, launch)
				})
			}
		})
	}
}

func checkCluster(t *testing.T, out string, nodes []string, parent string, ok bool, launch string) {
	t.Helper()
	np := clusterNodes * clusterPerNode
	leaders := map[string]int{}
	var first clusterReport
	for r := range np {
		b, err := os.ReadFile(filepath.Join(out, "rank."+strconv.Itoa(r)))
		if err != nil {
			t.Fatalf("rank %d wrote no report: %v\n%s", r, err, launch)
		}
		var rep clusterReport
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("rank %d: %v: %s", r, err, b)
		}
		if want := nodes[r/clusterPerNode]; rep.Host != want {
			t.Errorf("rank %d ran on %s, want %s", r, rep.Host, want)
		}
		if r == 0 {
			first = rep
		}
		wantWarn := 0
		if !ok && r == 0 {
			wantWarn = 1
		}
		if rep.Warnings != wantWarn {
			t.Errorf("rank %d: %d warnings, want %d", r, rep.Warnings, wantWarn)
		}
		if !ok {
			if rep.OK || rep.Kind != "unusable" || rep.Reason != first.Reason || !strings.Contains(rep.Reason, "damaged.kbundle") ||
				rep.Environ != "" || len(rep.Beside) != 0 {
				t.Errorf("rank %d: %+v, want the same unusable result as rank 0 (%q) and nothing beside DEST", r, rep, first.Reason)
			}
			continue
		}
		dest := filepath.Join(parent, "dest")
		if !rep.OK || rep.Nodes != clusterNodes || rep.Ranks != np || rep.Dest != dest {
			t.Errorf("rank %d: %+v", r, rep)
		}
		if rep.Digest != rep.Want || rep.Want == "missing" {
			t.Errorf("rank %d on %s: the node's copy differs from the source tree", r, rep.Host)
		}
		if rep.Env["TRITON_CACHE_DIR"] != dest+"/triton" || rep.Environ != dest+"/triton" {
			t.Errorf("rank %d: env %v, os.environ %q", r, rep.Env, rep.Environ)
		}
		if strings.Join(rep.Beside, ",") != "dest" {
			t.Errorf("rank %d on %s: beside DEST: %v", r, rep.Host, rep.Beside)
		}
		if rep.Leader {
			leaders[rep.Host]++
		}
	}
	t.Logf("rank 0 on %s: ok %v, %d nodes, dest %s, reason %q; leaders %v", first.Host, first.OK, first.Nodes, first.Dest, first.Reason, leaders)
	if ok {
		for _, n := range nodes {
			if leaders[n] != 1 {
				t.Errorf("node %s has %d leaders, want 1", n, leaders[n])
			}
		}
	}
}
