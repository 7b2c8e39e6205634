package warmup

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
