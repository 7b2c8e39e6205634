package cluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/internal/testutil/tree"
)

// The shape every job here has: 3 nodes of 2 ranks, placed by slot (ranks
// 0-1 on kbn1, 2-3 on kbn2, 4-5 on kbn3).
const (
	numNodes  = 3
	perNode   = 2
	np        = numNodes * perNode
	localRoot = "/tmp/node-local" // each node's own tmpfs
	subnet    = "198.18.0.0/24"
	bridge    = "kbbr0"
)

// jobTimeout bounds every launched command: a hang is a failure.
var jobTimeout = 3 * time.Minute

// tmpRoot holds this test process's shared-file-system files (bundles,
// wrappers, traces); removed by TestMain.
var tmpRoot string

func TestMain(m *testing.M) {
	d, err := os.MkdirTemp("", "kbundle-cluster-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Chmod(d, 0o755)
	tmpRoot = d
	code := testutil.Main(m)
	os.RemoveAll(d)
	os.Exit(code)
}

// cluster is the running test cluster.
type cluster struct {
	state string            // its state folder
	nodes []string          // compute nodes, kbn1..kbnN
	pids  map[string]int    // node -> holder pid (kbctl too)
	conf  string            // Slurm configuration, "" without Slurm
	kb    map[string]string // variant -> kbundle binary
}

var (
	theCluster *cluster
	clusterMu  sync.Mutex
)

// needCluster returns the cluster named by KBUNDLE_TEST_CLUSTER, skipping
// the test when it is not set and failing it when the cluster is broken.
func needCluster(t *testing.T) *cluster {
	t.Helper()
	state := os.Getenv("KBUNDLE_TEST_CLUSTER")
	if state == "" {
		t.Skip("no test cluster: start one with `eval \"$(scripts/ci/nscluster-up.sh)\"` (as root), which sets KBUNDLE_TEST_CLUSTER")
	}
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if theCluster != nil {
		return theCluster
	}
	c := &cluster{state: state, pids: map[string]int{}, kb: map[string]string{}}
	list, err := os.ReadFile(filepath.Join(state, "nodes", "list"))
	if err != nil {
		t.Fatalf("KBUNDLE_TEST_CLUSTER=%s but the cluster is not up: %v (scripts/ci/nscluster-up.sh %s)", state, err, state)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		name, _, _ := strings.Cut(line, " ")
		b, err := os.ReadFile(filepath.Join(state, "nodes", name+".pid"))
		if err != nil {
			t.Fatalf("cluster %s: node %s has no holder: %v", state, name, err)
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || syscall.Kill(pid, 0) != nil {
			t.Fatalf("cluster %s: node %s is down (holder pid %q)", state, name, b)
		}
		c.pids[name] = pid
		if strings.HasPrefix(name, "kbn") {
			c.nodes = append(c.nodes, name)
		}
	}
	if len(c.nodes) < numNodes {
		t.Fatalf("cluster %s has %d nodes, the tests need %d", state, len(c.nodes), numNodes)
	}
	c.nodes = c.nodes[:numNodes]
	if b, err := os.ReadFile(filepath.Join(state, "slurm", "conf")); err == nil {
		c.conf = strings.TrimSpace(string(b))
	}
	for _, n := range c.nodes {
		if so, se, code := c.on(t, n, "hostname"); code != 0 || strings.TrimSpace(so) != n {
			t.Fatalf("node %s does not answer: exit %d, %q %q", n, code, so, se)
		}
	}
	theCluster = c
	return c
}

// kbundle returns the kbundle binary of variant v, built once; it lives on
// the shared file system so every node runs the same file.
func (c *cluster) kbundle(t *testing.T, v testutil.Variant) string {
	t.Helper()
	clusterMu.Lock()
	defer clusterMu.Unlock()
	if p, ok := c.kb[string(v)]; ok {
		return p
	}
	p := testutil.Kbundle(t, v)
	// testutil builds under $TMPDIR, which is shared, but make the path
	// and its folders readable to every node (and user) anyway.
	for d := filepath.Dir(p); d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	c.kb[string(v)] = p
	return p
}

// needSlurm skips the test when the cluster runs without Slurm, and waits
// (at most 60 s) until every node is idle: a node cut off by an earlier
// test may still be marked not responding.
func (c *cluster) needSlurm(t *testing.T) {
	t.Helper()
	if c.conf == "" {
		t.Skip("the test cluster runs without Slurm (KBUNDLE_NSCLUSTER_SLURM=0)")
	}
	idle := func() string {
		r := run(t, nil, c.onArgv("kbctl", "env", "SLURM_CONF="+c.conf, "sinfo", "-h", "-N", "-o", "%N %t")...)
		return r.stdout
	}
	var state string
	if !waitFor(60*time.Second, func() bool {
		state = idle()
		return strings.Count(state, " idle\n") >= numNodes
	}) {
		t.Fatalf("the cluster's Slurm nodes are not all idle after 60 s:\n%s", state)
	}
}

// root returns path p as seen inside node's mount namespace, from here.
func (c *cluster) root(node, p string) string {
	return filepath.Join("/proc", strconv.Itoa(c.pids[node]), "root", p)
}

// result is a finished command.
type result struct {
	argv           []string
	stdout, stderr string
	code           int
	took           time.Duration
}

func (r *result) String() string {
	return fmt.Sprintf("%q: exit %d after %v\n--- stdout:\n%s--- stderr:\n%s", r.argv, r.code, r.took.Round(time.Millisecond), r.stdout, r.stderr)
}

// proc is a started command.
type proc struct {
	cmd    *exec.Cmd
	ctx    context.Context
	cancel context.CancelFunc
	so, se bytes.Buffer
	start  time.Time
	done   chan struct{}
	res    *result
}

// start starts argv (with testutil.CleanEnv()+env) in its own process
// group, killed with the group after timeout.
func start(t *testing.T, timeout time.Duration, env []string, argv ...string) *proc {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	p := &proc{ctx: ctx, cancel: cancel, done: make(chan struct{})}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(testutil.CleanEnv(), env...)
	cmd.Dir = tmpRoot
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	cmd.Stdout, cmd.Stderr = &p.so, &p.se
	p.cmd = cmd
	p.start = time.Now()
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("%q: %v", argv, err)
	}
	go func() {
		err := cmd.Wait()
		r := &result{argv: argv, took: time.Since(p.start)}
		var ee *exec.ExitError
		switch {
		case err == nil:
		case errors.As(err, &ee):
			r.code = ee.ExitCode()
		default:
			r.code = -1
		}
		p.res = r
		close(p.done)
	}()
	t.Cleanup(func() {
		cancel()
		<-p.done
	})
	return p
}

// wait waits for p and returns its result; a timeout fails the test.
func (p *proc) wait(t *testing.T) *result {
	t.Helper()
	<-p.done
	p.cancel()
	r := p.res
	r.stdout, r.stderr = p.so.String(), p.se.String()
	if p.ctx.Err() == context.DeadlineExceeded {
		t.Fatalf("timed out (a hang is a failure): %s", r)
	}
	return r
}

// run runs argv to its end, bounded by jobTimeout.
func run(t *testing.T, env []string, argv ...string) *result {
	t.Helper()
	return start(t, jobTimeout, env, argv...).wait(t)
}

// on runs argv on node (inside its namespaces) with this process's clean
// environment and returns its outputs and exit code.
func (c *cluster) on(t *testing.T, node string, argv ...string) (stdout, stderr string, code int) {
	t.Helper()
	r := run(t, nil, c.onArgv(node, argv...)...)
	return r.stdout, r.stderr, r.code
}

// mustOn runs argv on node and fails the test unless it succeeds.
func (c *cluster) mustOn(t *testing.T, node string, argv ...string) string {
	t.Helper()
	so, se, code := c.on(t, node, argv...)
	if code != 0 {
		t.Fatalf("on %s: %q: exit %d\n%s%s", node, argv, code, so, se)
	}
	return so
}

func (c *cluster) onArgv(node string, argv ...string) []string {
	return append([]string{"nsenter", "-t", strconv.Itoa(c.pids[node]), "-n", "-u", "-m", "--wd=" + tmpRoot, "--"}, argv...)
}

// hostList is "kbn1:2,kbn2:2,kbn3:2".
// hostListOf is the nodes with per slots each.
func (c *cluster) hostListOf(per int) string {
	var h []string
	for _, n := range c.nodes {
		h = append(h, fmt.Sprintf("%s:%d", n, per))
	}
	return strings.Join(h, ",")
}

// launch names one way of starting np ranks on the cluster.
type launch struct {
	name string
	v    testutil.Variant
	srun bool   // srun -N 3 (--mpi=pmix for Open MPI, pmi2 for MPICH) instead of mpirun/mpiexec
	rt   string // a PyPI runtime (testutil.ExtraRuntimes) instead of Debian's launchers
}

var (
	mpiLaunches  = []launch{{name: "mpirun", v: testutil.OpenMPI}, {name: "mpiexec.hydra", v: testutil.MPICH}}
	srunLaunches = []launch{{name: "srun-pmix", v: testutil.OpenMPI, srun: true}, {name: "srun-pmi2", v: testutil.MPICH, srun: true}}
)

// argv returns the command line that runs argv as np ranks on 3 nodes,
// as a user would (mpirun kills the job when a rank fails or dies).
func (c *cluster) argv(l launch, argv ...string) []string {
	return c.argvKeep(l, false, argv...)
}

// argvKeep is argv; with keep, Open MPI's mpirun lets every rank end on
// its own after one exits non-zero (to check every rank's exit status).
func (c *cluster) argvKeep(l launch, keep bool, argv ...string) []string {
	return c.argvShape(l, keep, perNode, argv...)
}

// argvShape is argvKeep for per ranks on each node.
func (c *cluster) argvShape(l launch, keep bool, per int, argv ...string) []string {
	if keep && !l.srun && l.v == testutil.OpenMPI {
		argv = append([]string{"--mca", "orte_abort_on_non_zero_status", "0"}, argv...)
	}
	agent := filepath.Join(c.state, "rsh")
	switch {
	case l.rt != "":
		return append(c.runtimeArgv(testutil.RuntimeByName(l.rt), per), argv...)
	case l.srun:
		mpi := "pmix"
		if l.v == testutil.MPICH {
			mpi = "pmi2"
		}
		a := []string{"env", "SLURM_CONF=" + c.conf, "srun", "-N", strconv.Itoa(numNodes), "-n", strconv.Itoa(numNodes * per),
			"--ntasks-per-node=" + strconv.Itoa(per), "-O", "--mpi=" + mpi, "--kill-on-bad-exit=0"}
		return c.onArgv("kbctl", append(a, argv...)...)
	case l.v == testutil.OpenMPI:
		a := []string{"mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
			"--mca", "plm_rsh_agent", agent,
			"--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
			"--mca", "btl", "self,vader,tcp", "--mca", "btl_vader_single_copy_mechanism", "none",
			"--host", c.hostListOf(per), "-np", strconv.Itoa(numNodes * per)}
		return append(a, argv...)
	default:
		a := []string{"mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", agent, "-iface", bridge,
			"-hosts", c.hostListOf(per), "-n", strconv.Itoa(numNodes * per)}
		return append(a, argv...)
	}
}

// job runs argv as np ranks with launch l, each rank ending on its own.
func (c *cluster) job(t *testing.T, l launch, env []string, argv ...string) *result {
	t.Helper()
	if l.srun {
		c.needSlurm(t)
	}
	if l.rt != "" {
		env = append(runtimeEnv(testutil.RuntimeByName(l.rt)), env...)
	}
	return run(t, env, c.argvKeep(l, true, argv...)...)
}

// wrapper is a script on the shared file system that runs its arguments on
// a rank, optionally under strace (opens of every file, into
// dir/strace.HOST.RANK), and records "HOST STATUS" in dir/rc.RANK.
type wrapper struct {
	script, dir string
}

func newWrapper(t *testing.T, traced bool) *wrapper {
	t.Helper()
	return makeWrapper(t, traced, false)
}

// newDetachedWrapper is newWrapper with the command in a session of its
// own: Open MPI 5's prterun and MPICH 5's Hydra kill what they started
// once one task exits non-zero, which could kill a wrapper before it
// wrote the status (they have no switch like Open MPI 4's
// orte_abort_on_non_zero_status).
func newDetachedWrapper(t *testing.T, traced bool) *wrapper {
	t.Helper()
	return makeWrapper(t, traced, true)
}

func makeWrapper(t *testing.T, traced, detached bool) *wrapper {
	t.Helper()
	dir, err := os.MkdirTemp(tmpRoot, "ranks-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o777)
	run := `"$@"`
	if traced {
		// -y: each returned fd with its path, however the path was walked;
		// -ff: a file a thread (strace.HOST.RANK.TID), so no call is split
		// into "unfinished" and "resumed" lines
		run = `strace -ff -qq -y -e trace=open,openat,openat2 -o "$d/strace.$h.$r" "$@"`
	}
	record := run + `
rc=$?
echo "$h $rc" >"$d/.rc.$r" && mv "$d/.rc.$r" "$d/rc.$r"
exit $rc`
	if detached {
		record = "setsid sh -c '" + strings.ReplaceAll(record, "'", `'\''`) + "' sh \"$@\" &\nwait $!"
	}
	body := `#!/bin/sh
d=` + dir + `
r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-x}}}
h=$(hostname)
export d r h
` + record + `
`
	w := &wrapper{script: filepath.Join(dir, "wrap.sh"), dir: dir}
	if err := os.WriteFile(w.script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	return w
}

// rankExit is what one rank recorded.
type rankExit struct {
	host string
	code int
}

// exits reads every rank's record; a rank that left none fails the test.
func (w *wrapper) exits(t *testing.T, r *result) []rankExit {
	t.Helper()
	out := make([]rankExit, np)
	// A detached rank may still be writing its record after the launcher
	// returned.
	waitFor(20*time.Second, func() bool {
		m, _ := filepath.Glob(filepath.Join(w.dir, "rc.[0-9]*"))
		return len(m) >= np
	})
	for i := range np {
		b, err := os.ReadFile(filepath.Join(w.dir, fmt.Sprintf("rc.%d", i)))
		if err != nil {
			t.Fatalf("rank %d left no exit status: %v\n%s", i, err, r)
		}
		f := strings.Fields(string(b))
		if len(f) != 2 {
			t.Fatalf("rank %d: record %q", i, b)
		}
		out[i].host = f[0]
		out[i].code, _ = strconv.Atoi(f[1])
	}
	return out
}

// wantExits fails unless every rank exited with want, and rank i ran on
// node i/perNode.
func (w *wrapper) wantExits(t *testing.T, c *cluster, r *result, want int) {
	t.Helper()
	for i, e := range w.exits(t, r) {
		if e.code != want {
			t.Errorf("rank %d (%s) exited %d, want %d", i, e.host, e.code, want)
		}
		if e.host != c.nodes[i/perNode] {
			t.Errorf("rank %d ran on %s, want %s", i, e.host, c.nodes[i/perNode])
		}
	}
	if t.Failed() {
		t.Logf("%s", r)
	}
}

// opens counts, over every rank's trace, the successful opens of path
// (for reading or writing: O_PATH handles are not opens of the content),
// whether by its full name or relative to a directory descriptor.
func (w *wrapper) opens(t *testing.T, path string) (n int, where []string) {
	t.Helper()
	traces, _ := filepath.Glob(filepath.Join(w.dir, "strace.*"))
	if len(traces) == 0 {
		t.Fatalf("no strace output in %s", w.dir)
	}
	for _, tr := range traces {
		b, err := os.ReadFile(tr)
		if err != nil {
			t.Fatal(err)
		}
		k, lines := testutil.TraceOpens(string(b), path)
		n += k
		for _, line := range lines {
			where = append(where, filepath.Base(tr)+": "+line)
		}
	}
	return n, where
}

// --- trees ------------------------------------------------------------------------

// makeTree writes a small cache tree with varied modes (exec bits), nested
// and empty directories and nanosecond mtimes, under a fresh folder of the
// shared file system, and returns its path.
func makeTree(t *testing.T, big int) string {
	t.Helper()
	base, err := os.MkdirTemp(tmpRoot, "tree-")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(base, "cache")
	rng := rand.New(rand.NewPCG(7, 9))
	files := []struct {
		name string
		size int
		mode fs.FileMode
	}{
		{"triton/abc123/kernel.cubin", 70000, 0o644},
		{"triton/abc123/kernel.json", 300, 0o644},
		{"triton/def456/kernel.so", 150000, 0o755},
		{"numba/mod.nbi", 5000, 0o640},
		{"numba/mod.1.nbc", 0, 0o644},
		{"bin/tool", 4000, 0o750},
		{"top.txt", 12, 0o444},
		{"big/blob.bin", big, 0o644},
	}
	spec := tree.Spec{}
	for i, f := range files {
		b := make([]byte, f.size)
		if f.name == "big/blob.bin" {
			for j := 0; j+8 <= len(b); j += 8 { // incompressible
				v := rng.Uint64()
				for k := range 8 {
					b[j+k] = byte(v >> (8 * k))
				}
			}
		} else {
			for j := range b {
				b[j] = byte(rng.IntN(16))
			}
		}
		spec[f.name] = tree.File{Data: string(b), Mode: f.mode, MTime: time.Unix(1700000000+int64(i), int64(123456789+i))}
	}
	// Directory mtimes in the order of a walk.
	for i, d := range []string{"big", "bin", "empty", "empty/dir", "numba", "triton", "triton/abc123", "triton/def456"} {
		mode := fs.FileMode(0o755)
		if strings.HasPrefix(d, "empty") {
			mode = 0o750
		}
		spec[d] = tree.File{Dir: true, Mode: mode, MTime: time.Unix(1600000000+int64(i), 987654321)}
	}
	tree.Write(t, dir, spec)
	return dir
}

// pack packs tree with the CLI into a fresh folder of the shared file
// system and returns the bundle's path.
func pack(t *testing.T, kb, tree string) string {
	t.Helper()
	store, err := os.MkdirTemp(tmpRoot, "store-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(store, 0o755)
	out := filepath.Join(store, "cache.kbundle")
	if r := run(t, nil, kb, "pack", "--dir", tree, "-o", out); r.code != 0 {
		t.Fatalf("pack: %s", r)
	}
	return out
}

// sameTrees compares two trees: kinds, all permission bits, nanosecond
// mtimes (files and directories) and content (tree.Diff); got must also
// hold kbundle's top-level install marker, and nothing else.
func sameTrees(t *testing.T, label, want, got string) {
	t.Helper()
	if d := tree.Diff(want, got, tree.Options{Mtimes: true, AllModeBits: true}); d != "" {
		t.Errorf("%s: %s differs from %s:\n%s", label, got, want, d)
	}
	if fi, err := os.Lstat(filepath.Join(got, installedMarker)); err != nil || !fi.Mode().IsRegular() {
		t.Errorf("%s: %s: no %s (kbundle marks every tree it installs; docs/commands/load.md)", label, got, installedMarker)
	}
}

// installedMarker is the file kbundle puts at the top of every tree it
// installs (docs/commands/load.md, --force).
const installedMarker = ".kbundle-installed"

// localDir makes a fresh folder under every node's node-local tmpfs (the
// same path on each) and returns its path as the nodes see it; it is
// removed (on every node) when the test ends.
func (c *cluster) localDir(t *testing.T) string {
	t.Helper()
	name := fmt.Sprintf("t%d-%s", os.Getpid(), strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()))
	p := filepath.Join(localRoot, name)
	for _, n := range c.nodes {
		if err := os.MkdirAll(c.root(n, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			// A test may have mounted something there.
			c.on(t, n, "sh", "-c", `while mountpoint -q "$1"; do umount -l "$1" || break; done`, "sh", p)
			os.RemoveAll(c.root(n, p))
		}
	})
	return p
}

// entries lists dir on node (names, sorted); a missing dir gives nil.
func (c *cluster) entries(node, dir string) []string {
	ents, err := os.ReadDir(c.root(node, dir))
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	slices.Sort(names)
	return names
}

// wantOnly fails unless dir holds exactly names on every node.
func (c *cluster) wantOnly(t *testing.T, dir string, names map[string][]string) {
	t.Helper()
	for _, n := range c.nodes {
		want := names[n]
		slices.Sort(want)
		if got := c.entries(n, dir); !slices.Equal(got, want) {
			t.Errorf("%s: %s holds %q, want only %q", n, dir, got, want)
		}
	}
}

// strays lists kbundle processes (binary kb) still running in any node.
func (c *cluster) strays(kb string) []int { return testutil.Processes(kb) }

// noStrays fails the test (and kills them) when kbundle processes outlive
// their job by more than grace.
func (c *cluster) noStrays(t *testing.T, kb string, grace time.Duration) {
	t.Helper()
	deadline := time.Now().Add(grace)
	for {
		s := c.strays(kb)
		if len(s) == 0 {
			return
		}
		if time.Now().After(deadline) {
			for _, pid := range s {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			t.Errorf("kbundle processes %v still running %v after the job ended (killed now)", s, grace)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rankPid finds the kbundle process (binary kb) of world rank r on node.
func (c *cluster) rankPid(node, kb string, r int) int {
	uts, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/uts", c.pids[node]))
	want := strconv.Itoa(r)
	for _, pid := range c.strays(kb) {
		if u, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/uts", pid)); u != uts {
			continue
		}
		env, _ := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		for _, kv := range strings.Split(string(env), "\x00") {
			name, val, _ := strings.Cut(kv, "=")
			if (name == "OMPI_COMM_WORLD_RANK" || name == "PMI_RANK" || name == "SLURM_PROCID") && val == want {
				return pid
			}
		}
	}
	return 0
}

// shape limits the bridge's egress to each of the nodes to rate (e.g.
// "200mbit") until the test ends.
func (c *cluster) shape(t *testing.T, rate string, nodes ...string) {
	t.Helper()
	for _, n := range nodes {
		dev := "kbv" + strings.TrimPrefix(n, "kbn")
		exec.Command("tc", "qdisc", "del", "dev", dev, "root").Run()
		if b, err := exec.Command("tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", rate, "burst", "256kb", "latency", "50ms").CombinedOutput(); err != nil {
			t.Fatalf("tc on %s: %v: %s", dev, err, b)
		}
		t.Cleanup(func() { exec.Command("tc", "qdisc", "del", "dev", dev, "root").Run() })
	}
}

// waitFor polls cond every 50 ms until it holds or timeout passes.
func waitFor(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cond()
}
