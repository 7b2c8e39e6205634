package harvest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// asNobody re-runs the test named name as the user nobody (65534) when
// this process is root, for whom no file is unreadable; it reports
// whether the caller should return (the test ran in the child).
func asNobody(t *testing.T, name string) bool {
	t.Helper()
	if os.Geteuid() != 0 {
		return false
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("root reads every file, and setpriv (to run as nobody) is not installed")
	}
	bin, err := os.MkdirTemp("", "kbundle-harvest-bin-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(bin)
	os.Chmod(bin, 0o755)
	self, _ := os.Executable()
	if out, err := exec.Command("cp", self, filepath.Join(bin, "harvest.test")).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	os.Chmod(filepath.Join(bin, "harvest.test"), 0o755)
	cmd := exec.Command("setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "--",
		filepath.Join(bin, "harvest.test"), "-test.run=^"+name+"$", "-test.count=1", "-test.v")
	cmd.Dir, cmd.Env = "/", append(os.Environ(), "HOME=/", "TMPDIR=/tmp")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+name) {
		t.Fatalf("as nobody: %v\n%s", err, out)
	}
	return true
}

// TestPartialUnitLeftOut is X6 of the 2026-12-01b review: a Numba unit
// whose index changed but one of whose unchanged files cannot be read was
// published without that file, and the unit rule then dropped the set's
// copy of it: the set lost it. A unit with an unreadable file is left
// out whole (and named); the set keeps its version.
func TestPartialUnitLeftOut(t *testing.T) {
	if asNobody(t, "TestPartialUnitLeftOut") {
		return
	}
	dir := t.TempDir()
	set, dest := filepath.Join(dir, "cache.kbundle"), filepath.Join(dir, "dest")
	install(t, set, dest, 1, map[string]string{"mod/f-1.py311.nbi": "idx1", "mod/f-1.py311.1.nbc": "code1", "other.txt": "o"})
	d := dest + ".node0"
	write(t, d, "mod/f-1.py311.nbi", "idx2")
	write(t, d, "mod/f-1.py311.2.nbc", "code2")
	write(t, d, "new.txt", "n")
	if err := os.Chmod(filepath.Join(d, "mod/f-1.py311.1.nbc"), 0); err != nil {
		t.Fatal(err)
	}
	s := run(t, set, dest, 1, 1)[0]
	if s.Layer == "" {
		t.Fatalf("no layer: %+v", s)
	}
	got := layerFiles(t, s.Layer)
	if len(got) != 1 || got["new.txt"] != "n" {
		t.Errorf("layer holds %v, want new.txt alone (the unit with the unreadable file left out)", got)
	}
	var line string
	for _, sk := range s.Nodes[0].Skipped {
		if sk.Name == "mod/f-1.py311.nb*" || strings.HasPrefix(sk.Why, "cache unit left out") {
			line = sk.Name + ": " + sk.Why
		}
	}
	if !strings.Contains(line, "mod/f-1.py311.1.nbc") {
		t.Errorf("the unit left out is not named: %+v", s.Nodes[0].Skipped)
	}
}
