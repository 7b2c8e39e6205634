package preset

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/launcher"
)

func TestChildEnv(t *testing.T) {
	// Every launcher variable the launcher package knows, plus user ones.
	var base []string
	for _, name := range launcher.Names() {
		base = append(base, name+"=1")
	}
	base = append(base,
		"HOME=/home/u", "PATH=/usr/bin:/bin", "MYAPP_OPT=x=y",
		"NUMBA_CACHE_DIR=/old/place", "OMPI_MCA_btl=self", // configuration, not a launch
	)
	numba, _ := Lookup("numba")
	tack, _ := Lookup("tack")
	env, err := ChildEnv(base, "/c", numba, tack)
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		if launcher.IsLauncherVar(name) {
			t.Errorf("launcher variable %s reaches the child", name)
		}
	}
	for _, want := range []string{"HOME=/home/u", "PATH=/usr/bin:/bin", "MYAPP_OPT=x=y",
		"NUMBA_CACHE_DIR=/c/numba", "TACK_CACHE_DIR=/c/tack", "TACK_CACHE=write"} {
		if !slices.Contains(env, want) {
			t.Errorf("child env lacks %s", want)
		}
	}
	n := 0
	for _, kv := range env {
		if strings.HasPrefix(kv, "NUMBA_CACHE_DIR=") {
			n++
		}
	}
	if n != 1 {
		t.Errorf("NUMBA_CACHE_DIR appears %d times, want once: %q", n, env)
	}
	if len(launcher.Names()) == 0 {
		t.Fatal("launcher.Names() is empty: nothing was tested")
	}
}

func TestPrepare(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "cache")
	py, _ := Lookup("pyopencl")
	ind, _ := Lookup("inductor")
	if err := Prepare(dir, py, ind); err != nil {
		t.Fatal(err)
	}
	for _, sub := range []string{"xdg", "pocl", "inductor", "triton"} {
		fi, err := os.Stat(filepath.Join(dir, sub))
		if err != nil || !fi.IsDir() {
			t.Errorf("%s not created: %v", sub, err)
		}
	}
}

func TestExports(t *testing.T) {
	got := Exports([]string{"A=/plain/path-1.2", "B=has space", "C=it's", "D=", "E=$HOME"})
	want := []string{"export A=/plain/path-1.2", "export B='has space'", `export C='it'\''s'`, "export D=''", "export E='$HOME'"}
	if !slices.Equal(got, want) {
		t.Errorf("Exports = %q, want %q", got, want)
	}
}

func TestActivate(t *testing.T) {
	dest := t.TempDir()
	copyTree(t, "testdata/triton-cache", filepath.Join(dest, "triton"))
	ind, _ := Lookup("inductor")
	vars, err := Activate(dest, "/home/alice/kcache", ind)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(vars, "TRITON_CACHE_DIR="+filepath.Join(dest, "triton")) {
		t.Errorf("vars %q", vars)
	}
	b, _ := os.ReadFile(filepath.Join(dest, "triton", "ABCKEY1", "__grp__add_kernel.json"))
	if strings.Contains(string(b), "/home/alice") {
		t.Errorf("not relocated: %s", b)
	}
}
