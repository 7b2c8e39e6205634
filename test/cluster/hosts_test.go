package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The launching machine names every node in its own /etc/hosts while the
// cluster is up (scripts/ci/lib.sh hosts_block): mpirun and mpiexec.hydra
// resolve the hosts they are given there, and a name left to DNS cost a
// 5 s resolver timeout in 1 launch in 3 to 20 (docs/cluster.md).
func TestClusterHostsHere(t *testing.T) {
	c := needCluster(t)
	hosts, err := os.ReadFile("/etc/hosts")
	if err != nil {
		t.Fatal(err)
	}
	list, err := os.ReadFile(filepath.Join(c.state, "nodes", "list"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		f := strings.Fields(line) // name addr/len veth
		if len(f) < 2 {
			t.Fatalf("nodes/list line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "/")
		if !strings.Contains(string(hosts), "\n"+addr+" "+f[0]+"\n") {
			t.Errorf("/etc/hosts does not name node %s (%s):\n%s", f[0], addr, hosts)
		}
	}
}

// hosts_block adds the cluster's block to a hosts file, replaces an
// earlier one (a killed cluster's) and, without lines, removes it, leaving
// the file byte for byte as it was.
func TestHostsBlock(t *testing.T) {
	lib, _ := filepath.Abs("../../scripts/ci/lib.sh")
	f := filepath.Join(t.TempDir(), "hosts")
	orig := "127.0.0.1 localhost\n::1 localhost ip6-localhost\n"
	os.WriteFile(f, []byte(orig), 0o644)
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("bash", append([]string{"-c", `. "$0"; hosts_block "$@"`, lib, f}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("hosts_block %q: %v: %s", args, err, out)
		}
		b, _ := os.ReadFile(f)
		return string(b)
	}
	got := run("198.18.0.1 kbn1\n198.18.0.2 kbn2")
	if !strings.HasPrefix(got, orig) || !strings.Contains(got, "\n198.18.0.1 kbn1\n198.18.0.2 kbn2\n") {
		t.Errorf("added:\n%s", got)
	}
	got = run("198.18.0.1 kbn1")
	if strings.Contains(got, "kbn2") || strings.Count(got, "kbundle test cluster: begin") != 1 {
		t.Errorf("replaced:\n%s", got)
	}
	if got = run(); got != orig {
		t.Errorf("removed: %q, want %q", got, orig)
	}
}
