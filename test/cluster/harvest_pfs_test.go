package cluster

import (
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// pfsPort is the port of the test's sshd, on the bridge address only.
const pfsPort = "2222"

// networkFS serves a fresh folder of this machine over sshfs, from an
// sshd on the bridge address, mounted read-write in every node's mount
// namespace at the same path (each node its own client, its own caches,
// its own flock table, as on NFS or Lustre); it installs Debian's sshfs
// and openssh-server first where they are missing, and skips saying why
// when that fails. It returns the folder as this machine sees it
// (server) and as the nodes do (mount). Everything is undone when the
// test ends. Recipe: /work/shared/lab/sshfs (there read-only).
func (c *cluster) networkFS(t *testing.T) (server, mount string) {
	t.Helper()
	return c.networkFSWith(t, writerCaches)
}

// networkFSWith is networkFS with the sshfs options opts(i) on node i
// (0-based).
func (c *cluster) networkFSWith(t *testing.T, opts func(i int) []string) (server, mount string) {
	t.Helper()
	if _, err := exec.LookPath("sshfs"); err != nil || !exists("/usr/sbin/sshd") {
		cmd := exec.Command("apt-get", "install", "-y", "--no-install-recommends", "sshfs", "openssh-server")
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Skipf("no network file system for this test: sshfs and openssh-server are not installed and apt-get could not install them (%v):\n%s", err, tail(string(out), 600))
		}
	}
	w, err := os.MkdirTemp(tmpRoot, "pfs-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(w, 0o755)
	server, mount = filepath.Join(w, "export"), filepath.Join(w, "mnt")
	for _, d := range []string{server, mount} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	key := filepath.Join(w, "key")
	for _, k := range []string{key, filepath.Join(w, "hostkey")} {
		if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", k).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v\n%s", err, out)
		}
	}
	pub, _ := os.ReadFile(key + ".pub")
	os.WriteFile(filepath.Join(w, "auth"), pub, 0o600)
	os.MkdirAll("/run/sshd", 0o755)
	pidFile := filepath.Join(w, "sshd.pid")
	if r := run(t, nil, "/usr/sbin/sshd", "-p", pfsPort, "-o", "ListenAddress=198.18.0.254", "-o", "HostKey="+filepath.Join(w, "hostkey"),
		"-o", "AuthorizedKeysFile="+filepath.Join(w, "auth"), "-o", "PidFile="+pidFile,
		"-o", "PermitRootLogin=prohibit-password", "-o", "StrictModes=no"); r.code != 0 {
		t.Fatalf("sshd: %s", r)
	}
	t.Cleanup(func() {
		for _, n := range c.nodes {
			c.on(t, n, "umount", "-l", mount)
		}
		if b, err := os.ReadFile(pidFile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				syscall.Kill(pid, syscall.SIGTERM)
			}
		}
	})
	c.mountFS(t, server, mount, key, opts)
	return server, mount
}

// writerCaches are TestHarvestConcurrentPFS's mounts: on kbn1 and kbn2
// (the writers) sshfs's default caches (attributes and directory
// listings kept 20 s: a writer lists a stale layer directory), on kbn3
// (the reader) keeping them 1 s (its loads see new layers soon).
func writerCaches(i int) []string {
	if i == 2 {
		return []string{"-o", "dcache_timeout=1"}
	}
	return nil
}

// mountFS mounts server at mount on every node, with sshfs options
// opts(i) on node i.
func (c *cluster) mountFS(t *testing.T, server, mount, key string, opts func(i int) []string) {
	t.Helper()
	var wg sync.WaitGroup
	for i, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			argv := []string{"sshfs", "-p", pfsPort, "-o", "IdentityFile=" + key, "-o", "StrictHostKeyChecking=no",
				"-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR"}
			argv = append(argv, opts(i)...)
			so, se, code := c.on(t, n, append(argv, "root@198.18.0.254:"+server, mount)...)
			if code != 0 {
				t.Errorf("sshfs on %s: exit %d\n%s%s", n, code, so, se)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
}

// remountFS remounts the network file system on every node (with
// writerCaches): fresh caches, so that each sees what the server holds
// now.
func (c *cluster) remountFS(t *testing.T, server, mount string) {
	t.Helper()
	for _, n := range c.nodes {
		c.mustOn(t, n, "umount", mount)
	}
	c.mountFS(t, server, mount, filepath.Join(filepath.Dir(server), "key"), writerCaches)
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// argvOn is the command line that runs argv as one rank on each of hosts
// (rank 0 on hosts[0]) with launch l (mpirun or Hydra).
func (c *cluster) argvOn(l launch, hosts []string, argv ...string) []string {
	var h []string
	for _, n := range hosts {
		h = append(h, n+":1")
	}
	n := strconv.Itoa(len(hosts))
	if l.v == testutil.OpenMPI {
		a := []string{"mpirun.openmpi", "--allow-run-as-root", "--oversubscribe",
			"--mca", "plm_rsh_agent", filepath.Join(c.state, "rsh"),
			"--mca", "oob_tcp_if_include", subnet, "--mca", "btl_tcp_if_include", subnet,
			"--mca", "btl", "self,vader,tcp", "--mca", "btl_vader_single_copy_mechanism", "none",
			"--host", strings.Join(h, ","), "-np", n}
		return append(a, argv...)
	}
	a := []string{"mpiexec.hydra", "-launcher", "rsh", "-launcher-exec", filepath.Join(c.state, "rsh"), "-iface", bridge,
		"-hosts", strings.Join(h, ","), "-n", n}
	return append(a, argv...)
}

// filesOn is the regular files of dir on node but the install record:
// name → content.
func (c *cluster) filesOn(t *testing.T, node, dir string) map[string]string {
	t.Helper()
	return filesIn(c.root(node, dir))
}

// filesIn is filesOn of a folder of this machine, root.
func filesIn(root string) map[string]string {
	out := map[string]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() || d.Name() == installedMarker || d.Name() == ".kbundle-harvested" {
			return nil
		}
		b, _ := os.ReadFile(p)
		rel, _ := filepath.Rel(root, p)
		out[rel] = string(b)
		return nil
	})
	return out
}

// TestHarvestConcurrentPFS (issue 17): two jobs harvest into one set on
// a real network file system (sshfs, mounted on each node) at the same
// time, their rank 0s on different nodes (kbn1, kbn2), each with files
// of its own on its two nodes. Both rank 0s are stopped with their layer
// written (KBUNDLE_TEST_FAILPOINT=written:0:wait=FILE), then continued
// together, so both publish at once, each listing a layer directory its
// client may have cached: neither loses its entries (two layers, a load
// on every node shows both jobs' files). Meanwhile kbn3 loads the set in
// a loop; every load holds the base and exactly one of: nothing new, job
// A's files, job B's, both: never a part of a layer.
func TestHarvestConcurrentPFS(t *testing.T) {
	c := needCluster(t)
	server, mount := c.networkFS(t)
	nompi := c.kbundle(t, testutil.NoMPI)
	src := makeTree(t, 64<<10)
	base := map[string]string{}
	filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			b, _ := os.ReadFile(p)
			rel, _ := filepath.Rel(src, p)
			base[rel] = string(b)
		}
		return nil
	})
	for _, l := range mpiLaunches {
		t.Run(l.name, func(t *testing.T) {
			kb := c.kbundle(t, l.v)
			dir := filepath.Join(server, l.name)
			if err := os.Mkdir(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			if r := run(t, nil, nompi, "pack", "--dir", src, "-o", filepath.Join(dir, "cache.kbundle")); r.code != 0 {
				t.Fatalf("pack: %s", r)
			}
			set := filepath.Join(mount, l.name, "cache.kbundle") // as the nodes see it
			parent := c.localDir(t)
			type job struct {
				name  string
				hosts []string
				files map[string]string // node → file it compiled
				dest  string
			}
			jobs := []*job{
				{"A", []string{c.nodes[0], c.nodes[2]}, map[string]string{c.nodes[0]: "a/on-kbn1.bin", c.nodes[2]: "a/on-kbn3.bin"}, filepath.Join(parent, "A")},
				{"B", []string{c.nodes[1], c.nodes[2]}, map[string]string{c.nodes[1]: "b/on-kbn2.bin", c.nodes[2]: "b/on-kbn3.bin"}, filepath.Join(parent, "B")},
			}
			want := func(j *job) map[string]string {
				m := map[string]string{}
				for n, f := range j.files {
					m[f] = "job " + j.name + " compiled this on " + n
				}
				return m
			}
			for _, j := range jobs {
				if r := run(t, nil, c.argvOn(l, j.hosts, kb, "load", "-q", "--bundle", set, "--to", j.dest)...); r.code != 0 {
					t.Fatalf("job %s: load: %s", j.name, r)
				}
				for node, f := range j.files {
					p := c.root(node, filepath.Join(j.dest, f))
					os.MkdirAll(filepath.Dir(p), 0o755)
					if err := os.WriteFile(p, []byte(want(j)[f]), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}

			// kbn3 loads in a loop until told to stop.
			stop := make(chan struct{})
			var mu sync.Mutex // seen and loopErr
			seen := map[string]int{}
			var loopErr []string
			fail := func(f string, a ...any) { mu.Lock(); loopErr = append(loopErr, fmt.Sprintf(f, a...)); mu.Unlock() }
			loopDone := make(chan struct{})
			go func() {
				defer close(loopDone)
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					dest := filepath.Join(parent, fmt.Sprintf("loop%d", i))
					r := run(t, nil, c.onArgv(c.nodes[2], nompi, "load", "-q", "--bundle", set, "--to", dest)...)
					if r.code != 0 {
						fail("%s", r)
						return
					}
					got := c.filesOn(t, c.nodes[2], dest)
					os.RemoveAll(c.root(c.nodes[2], dest))
					state := ""
					for n, b := range base {
						if got[n] != b {
							fail("load %d: base file %s is %d bytes, want %d", i, n, len(got[n]), len(b))
						}
						delete(got, n)
					}
					for _, j := range jobs {
						w := want(j)
						n := 0
						for f, b := range w {
							if got[f] == b {
								n++
								delete(got, f)
							}
						}
						switch n {
						case len(w):
							state += j.name
						case 0:
						default:
							fail("load %d: %d of job %s's %d files: a part of a layer", i, n, j.name, len(w))
						}
					}
					if len(got) > 0 {
						fail("load %d: files of no valid set: %v", i, got)
					}
					if state == "" {
						state = "base"
					}
					mu.Lock()
					seen[state]++
					mu.Unlock()
				}
			}()

			// Both harvests at once, held with their layers written: each
			// rank 0 waits for its gate file (on the shared file system).
			gates, err := os.MkdirTemp(tmpRoot, "gates-")
			if err != nil {
				t.Fatal(err)
			}
			os.Chmod(gates, 0o755)
			var procs []*proc
			for _, j := range jobs {
				env := []string{"KBUNDLE_TEST_FAILPOINT=written:0:wait=" + filepath.Join(gates, j.name)}
				procs = append(procs, start(t, jobTimeout, env, c.argvOn(l, j.hosts, kb, "harvest", "--bundle", set, "--to", j.dest)...))
			}
			for _, j := range jobs {
				if !waitFor(30*time.Second, func() bool { return exists(filepath.Join(gates, j.name+".reached")) }) {
					t.Fatalf("job %s's rank 0 on %s never reached its failpoint", j.name, j.hosts[0])
				}
			}
			time.Sleep(500 * time.Millisecond) // loads of the set as it was
			for _, j := range jobs {
				if err := os.WriteFile(filepath.Join(gates, j.name), nil, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			for i, p := range procs {
				if r := p.wait(t); r.code != 0 {
					t.Errorf("job %s: harvest: %s", jobs[i].name, r)
				}
			}
			waitFor(5*time.Second, func() bool { // loads of the new set
				mu.Lock()
				defer mu.Unlock()
				return seen["AB"] > 0
			})
			close(stop)
			<-loopDone
			for _, e := range loopErr {
				t.Error(e)
			}
			t.Logf("kbn3's loads during the harvests saw: %v", seen)

			layers, err := bundle.ListLayers(filepath.Join(dir, "cache.kbundle"), 0)
			if err != nil || len(layers) != 2 || layers[0].Seq != 1 || layers[1].Seq != 2 {
				t.Fatalf("layers %v (%v), want one per job, numbered 1 and 2", layers, err)
			}
			t.Logf("published: %s, %s", filepath.Base(layers[0].Path), filepath.Base(layers[1].Path))

			// Every node, with fresh caches, loads base and both layers.
			c.remountFS(t, server, mount)
			final := filepath.Join(parent, "final")
			if r := c.job(t, l, nil, kb, "load", "-q", "--bundle", set, "--to", final); r.code != 0 {
				t.Fatalf("final load: %s", r)
			}
			for _, n := range c.nodes {
				got := c.filesOn(t, n, final)
				for _, j := range jobs {
					for f, b := range want(j) {
						if got[f] != b {
							t.Errorf("%s: the final load lacks job %s's %s", n, j.name, f)
						}
					}
				}
			}
			c.noStrays(t, kb, 10*time.Second)
		})
	}
}
