package cluster

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/hostlist"
	"github.com/kbundle/kbundle/internal/testutil"
)

// readmeLaunchers makes the `mpirun` README.md's lines run on the cluster
// (docs/cluster.md, "README's loop on the nodes"): a script in a fresh
// folder of the shared file system that runs v's launcher with the
// arguments it is given, and the environment that makes it reach every
// node: the rsh agent, the host file, the interfaces (Open MPI's as
// OMPI_MCA_* variables, Hydra's as HYDRA_*). Open MPI's host file gives
// each node perNode slots; Hydra's one (readmeHydraSlots). It returns the
// folder (to put first on PATH) and the environment.
func (c *cluster) readmeLaunchers(t *testing.T, v testutil.Variant) (dir string, env []string) {
	t.Helper()
	dir, err := os.MkdirTemp(tmpRoot, "launchers-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	agent := filepath.Join(c.state, "rsh")
	hosts := filepath.Join(dir, "hosts")
	var list strings.Builder
	launcher := "mpirun.openmpi"
	for _, n := range c.nodes {
		if v == testutil.OpenMPI {
			fmt.Fprintf(&list, "%s slots=%d\n", n, perNode)
		} else {
			fmt.Fprintf(&list, "%s:%d\n", n, readmeHydraSlots)
		}
	}
	if v == testutil.OpenMPI {
		env = []string{
			"OMPI_ALLOW_RUN_AS_ROOT=1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1",
			"OMPI_MCA_orte_default_hostfile=" + hosts,
			"OMPI_MCA_plm_rsh_agent=" + agent,
			"OMPI_MCA_oob_tcp_if_include=" + subnet, "OMPI_MCA_btl_tcp_if_include=" + subnet,
			"OMPI_MCA_btl=self,vader,tcp", "OMPI_MCA_btl_vader_single_copy_mechanism=none",
		}
	} else {
		launcher = "mpiexec.hydra"
		env = []string{"HYDRA_HOST_FILE=" + hosts, "HYDRA_LAUNCHER=rsh", "HYDRA_LAUNCHER_EXEC=" + agent}
	}
	// A script, not a symlink: Hydra finds its proxy beside the file it
	// was started as.
	for name, body := range map[string]string{
		"hosts":  list.String(),
		"mpirun": "#!/bin/sh\nexec " + launcher + " \"$@\"\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir, env
}

// readmeHydraSlots is the slots of each node in Hydra's host file, as
// many as Open MPI's. Hydra takes --map-by for binding, not placement:
// README.md's `mpirun --map-by ppr:1:node kbundle clean DEST` starts one
// clean on every slot, so two cleans of one DEST run at once on each
// node, which must remove it once and fail nowhere (bundle.Clean locks
// the tree; a clean that finds it gone has nothing to do).
const readmeHydraSlots = perNode

// harvestLines maps each node to what the harvest's report says of it
// (loadcmd.HarvestReport: "HOST (rank N): TEXT", or "HOSTLIST: TEXT" for several
// nodes alike); a line naming no set of the cluster's nodes fails the test.
func (c *cluster) harvestLines(t *testing.T, stderr string) map[string]string {
	t.Helper()
	out := map[string]string{}
	one := regexp.MustCompile(`^(\S+) \(ranks? [0-9]+(-[0-9]+)?\)$`)
	re := regexp.MustCompile(`(?m)^kbundle: (.+?): ((?:compiled|no DEST|not harvested).*)$`)
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		who, text := m[1], m[2]
		if h := one.FindStringSubmatch(who); h != nil {
			out[h[1]] = text
			continue
		}
		named := false
		for mask := 1; mask < 1<<len(c.nodes); mask++ {
			var sub []string
			for i, n := range c.nodes {
				if mask&(1<<i) != 0 {
					sub = append(sub, n)
				}
			}
			if len(sub) > 1 && hostlist.Format(sub) == who {
				for _, n := range sub {
					out[n] = text
				}
				named = true
			}
		}
		if !named {
			t.Errorf("the harvest's line %q names no nodes of the cluster", m[0])
		}
	}
	return out
}

// TestReadmeLoop is test/mpi's TestReadmeLoop on 3 nodes (issue 25, U33):
// README.md's loop, its lines read from the README and run verbatim by
// bash on kbn1 (the job's first node, where a batch script runs), under
// Open MPI's mpirun and MPICH's Hydra as `mpirun`. The only additions are
// what names the cluster's hosts, in the launcher's environment
// (readmeLaunchers): with them the README's `mpirun --map-by ppr:1:node`
// runs one rank on each node and its `mpirun python3 app.py` every slot
// (Open MPI: 2 a node; Hydra: 1, readmeHydraSlots). TMPDIR is each node's own tmpfs (the
// same path on each), SCRATCH and the working folder the shared file
// system. The warm-up packs the int signature; job 1 compiles the float
// one on every node, and its harvest, another launch with another job id,
// finds each node's DEST by its install record and writes one layer; job
// 2 loads base and layer and compiles nothing on any node, so its harvest
// writes nothing; each job's clean leaves no kbundle-* on any node.
func TestReadmeLoop(t *testing.T) {
	c := needCluster(t)
	py := needModule(t, debianPython, "numba", "JIT", "apt-get install python3-numba")
	once, job := testutil.ReadmeLoop(t)
	bin := testutil.FrontBin(t, tmpRoot)
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			lines := job
			if l.v == testutil.MPICH {
				lines = testutil.ReadmeMPICH(job)
			}
			launchers, env := c.readmeLaunchers(t, l.v)
			work, err := os.MkdirTemp(tmpRoot, "work-")
			if err == nil {
				err = os.WriteFile(filepath.Join(work, "app.py"), []byte(testutil.ReadmeApp), 0o644)
			}
			if err != nil {
				t.Fatal(err)
			}
			scratch, err := os.MkdirTemp(tmpRoot, "scratch-")
			if err != nil {
				t.Fatal(err)
			}
			tmp := c.localDir(t)
			set := filepath.Join(scratch, "kcache", "cache.kbundle")
			env = append(env, "PATH="+bin+":"+launchers+":"+filepath.Dir(py)+":"+os.Getenv("PATH"), "TMPDIR="+tmp, "SCRATCH="+scratch)
			sh := func(what string, lines []string) *result {
				t.Helper()
				script := "set -euo pipefail\n" + strings.Join(lines, "\n") + "\n"
				argv := []string{"nsenter", "-t", strconv.Itoa(c.pids[c.nodes[0]]), "-n", "-u", "-m", "--wd=" + work, "--", "bash", "-c", script}
				r := run(t, env, argv...)
				if r.code != 0 {
					t.Fatalf("%s:\n%s\n%s", what, script, r)
				}
				t.Logf("%s: %v", what, r.took.Round(time.Millisecond))
				return r
			}
			// dest is the DEST the job's load printed (kenv.sh, in the
			// working folder).
			dest := func() string {
				b, err := os.ReadFile(filepath.Join(work, "kenv.sh"))
				if err != nil {
					t.Fatal(err)
				}
				for _, kv := range exportsOf(string(b)) {
					if v, ok := strings.CutPrefix(kv, "NUMBA_CACHE_DIR="); ok {
						return strings.TrimSuffix(v, "/numba")
					}
				}
				t.Fatalf("kenv.sh exports no NUMBA_CACHE_DIR:\n%s", b)
				return ""
			}
			layers := func() []bundle.SetLayer {
				ls, err := bundle.ListLayers(set, 0)
				if err != nil {
					t.Fatal(err)
				}
				return ls
			}
			// Nothing of kbundle's is left in any node's TMPDIR.
			clean := func(job string) {
				t.Helper()
				for _, n := range c.nodes {
					for _, e := range c.entries(n, tmp) {
						if strings.Contains(e, "kbundle") {
							t.Errorf("%s left %s/%s on %s", job, tmp, e, n)
						}
					}
				}
			}
			// every node's report: compiled (0 or more), and found the DEST
			// the load made by its install record.
			found := func(job string, r *result, dest string, zero bool) {
				t.Helper()
				byNode := c.harvestLines(t, r.stderr)
				bad := false
				for _, n := range c.nodes {
					text := byNode[n]
					compiled := regexp.MustCompile(`^compiled [1-9][0-9]* entr`).MatchString(text)
					if zero {
						compiled = strings.HasPrefix(text, "compiled 0 entries (0 B) the bundle lacked")
					}
					if !compiled || !strings.Contains(text, "; DEST "+dest+": the newest tree loaded from "+set+" here") {
						t.Errorf("%s: %s's harvest: %q; want it to have compiled %s and to have found %s, the DEST its load made",
							job, n, text, map[bool]string{true: "nothing", false: "something"}[zero], dest)
						bad = true
					}
				}
				if bad {
					t.Logf("%s", r)
				}
			}

			sh("warm-up", once)
			if ls := layers(); len(ls) != 0 {
				t.Fatalf("the warm-up wrote layers %v", ls)
			}

			r := sh("job 1", lines)
			d1 := dest()
			found("job 1", r, d1, false)
			ls := layers()
			if len(ls) != 1 || !strings.Contains(r.stderr, "kbundle: wrote a new layer, "+ls[0].Path) {
				t.Errorf("job 1: layers %v, want the one its harvest wrote\n%s", ls, r)
			}
			clean("job 1")

			r = sh("job 2", lines)
			d2 := dest()
			if d2 == d1 {
				t.Errorf("job 2's DEST is job 1's, %s: two launches, one job id?", d1)
			}
			found("job 2", r, d2, true)
			if !strings.Contains(r.stderr, "kbundle: nothing new: no layer written to") {
				t.Errorf("job 2's harvest wrote something\n%s", r)
			}
			if got := layers(); len(got) != 1 || len(ls) != 1 || got[0].Path != ls[0].Path {
				t.Errorf("layers after job 2 %v, want job 1's %v alone", got, ls)
			}
			clean("job 2")
			for _, name := range []string{"kbundle", "kbundle-openmpi", "kbundle-mpich", "kbundle-nompi"} {
				c.noStrays(t, filepath.Join(bin, name), 10*time.Second)
			}
		})
	}
}
