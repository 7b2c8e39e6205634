package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
)

// The PyPI runtimes (Open MPI 5.0.11, MPICH 5.0.2, Intel MPI 2021.19.0,
// testutil.ExtraRuntimes) across the 3 nodes, each through its own
// launcher's rsh agent: detect, one load and one unusable bundle each
// (issue 20); the full matrix stays with Debian's two.

// runtimeLaunches are the PyPI runtimes as launches.
func runtimeLaunches() []launch {
	var out []launch
	for _, rt := range testutil.ExtraRuntimes() {
		out = append(out, launch{name: rt.Name, v: rt.Build, rt: rt.Name})
	}
	return out
}

// runtimeArgv is the launcher's command line for numNodes x per ranks,
// started on the nodes through the cluster's rsh agent.
//   - Open MPI 5 (prterun) maps by core once oversubscribed, and these
//     nodes show one core each: `--oversubscribe` alone puts every rank on
//     the first host. `--map-by slot:OVERSUBSCRIBE` fills each host's slots.
//   - Intel MPI's Hydra is started with -bootstrap rsh (not I_MPI_HYDRA_BOOTSTRAP=fork
//     as on one machine) and -ppn for the ranks per host.
func (c *cluster) runtimeArgv(rt testutil.Runtime, per int) []string {
	agent := filepath.Join(c.state, "rsh")
	n := strconv.Itoa(numNodes * per)
	switch rt.Name {
	case "openmpi5":
		return []string{rt.Launcher(), "--allow-run-as-root", "--map-by", "slot:OVERSUBSCRIBE",
			"--mca", "plm_rsh_agent", agent,
			"--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
			"--mca", "btl", "self,sm,tcp", "--host", c.hostListOf(per), "-np", n}
	case "mpich5":
		return []string{rt.Launcher(), "-launcher", "rsh", "-launcher-exec", agent, "-iface", bridge,
			"-hosts", c.hostListOf(per), "-n", n}
	case "impi":
		return []string{rt.Launcher(), "-bootstrap", "rsh", "-bootstrap-exec", agent, "-iface", bridge,
			"-hosts", strings.Join(c.nodes, ","), "-ppn", strconv.Itoa(per), "-n", n}
	}
	panic("cluster: no launch for runtime " + rt.Name)
}

// runtimeEnv puts the runtime's libraries first, so that the build of its
// ABI (linked with Debian's library) runs with this one on every node (the
// rsh agent passes the environment on).
func runtimeEnv(rt testutil.Runtime) []string {
	return []string{"LD_LIBRARY_PATH=" + filepath.Join(rt.Prefix(), "lib")}
}

// TestRuntimeDetect is TestDetect under each PyPI runtime.
func TestRuntimeDetect(t *testing.T) {
	c := needCluster(t)
	for _, l := range runtimeLaunches() {
		t.Run(l.name, func(t *testing.T) {
			testutil.NeedRuntime(t, testutil.RuntimeByName(l.rt))
			checkDetect(t, c, l)
		})
	}
}

// TestRuntimeLoad is TestLoad under each PyPI runtime: identical trees on
// the 3 nodes, the bundle opened once in the job, every rank exits 0.
func TestRuntimeLoad(t *testing.T) {
	c := needCluster(t)
	tree := makeTree(t, 3<<20)
	for _, l := range runtimeLaunches() {
		t.Run(l.name, func(t *testing.T) {
			testutil.NeedRuntime(t, testutil.RuntimeByName(l.rt))
			checkLoad(t, c, l, tree, newDetachedWrapper(t, true))
		})
	}
}

// TestRuntimeUnusable: a bit-flipped bundle under each PyPI runtime on the
// 3 nodes: every rank of every node exits 3, the reason is printed once,
// and no node has DEST or anything beside it.
func TestRuntimeUnusable(t *testing.T) {
	c := needCluster(t)
	src := makeTree(t, 1<<20)
	for _, l := range runtimeLaunches() {
		t.Run(l.name, func(t *testing.T) {
			testutil.NeedRuntime(t, testutil.RuntimeByName(l.rt))
			kb := c.kbundle(t, l.v)
			file := pack(t, kb, src)
			fi, err := os.Stat(file)
			if err != nil {
				t.Fatal(err)
			}
			tree.Flip(t, file, fi.Size()/2)
			parent := c.localDir(t)
			dest := filepath.Join(parent, "dest")
			w := newDetachedWrapper(t, false)
			r := c.job(t, l, nil, w.script, kb, "load", "--bundle", file, "--to", dest)
			w.wantExits(t, c, r, 3)
			if n := strings.Count(r.stderr, "no usable bundle"); n != 1 {
				t.Errorf("the reason is printed %d times, want once\n%s", n, r)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q on failure", r.stdout)
			}
			c.wantOnly(t, parent, map[string][]string{})
			c.noStrays(t, kb, 10e9)
		})
	}
}
