// Package gpu holds the GPU machine's check, check.sh, and its programs;
// this test runs it here: in dry mode (it checks its inputs and prints
// what it would run, within 4 minutes), and for real with a stand-in
// framework (a fake CuPy), so that its steps and its verdict are tested
// where no GPU is.
package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
)

func script(t *testing.T, env []string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command("./check.sh", args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

func TestCheckDryRun(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	kb := testutil.Kbundle(t, testutil.NoMPI)
	out, code := script(t, []string{"KBUNDLE=" + kb}, "--dry-run")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	caps := regexp.MustCompile(`budget (\d+)s, caps (\d+)s in all`).FindStringSubmatch(out)
	if caps == nil {
		t.Fatalf("no budget:\n%s", out)
	}
	if budget, _ := strconv.Atoi(caps[1]); budget > 240 {
		t.Errorf("a budget of %ds, over 4 minutes", budget)
	}
	if sum, _ := strconv.Atoi(caps[2]); sum > 240 {
		t.Errorf("the frameworks' caps add up to %ds, over 4 minutes", sum)
	}
	for _, f := range []string{"inductor", "jax", "cupy", "numba-cuda"} {
		for _, step := range []string{" warm --dir WORKDIR/" + f + "/cache --preset ", " pack --dir WORKDIR/" + f + "/cache ",
			" load --bundle WORKDIR/" + f + "/cache.kbundle --to WORKDIR/" + f + "/loaded --json"} {
			if !regexp.MustCompile(`(?m)^  timeout \d+ ` + regexp.QuoteMeta(kb+step)).MatchString(out) {
				t.Errorf("%s: no %q step under timeout:\n%s", f, step, out)
			}
		}
	}
	if strings.Contains(out, "KBUNDLE_CHECK") {
		t.Errorf("the dry run ran a program:\n%s", out)
	}

	// Its inputs: a missing kbundle, an MPI build.
	if out, code := script(t, []string{"KBUNDLE=/nonexistent/kbundle"}, "--dry-run"); code != 2 || !strings.Contains(out, "no kbundle at /nonexistent/kbundle") {
		t.Errorf("missing kbundle: exit %d:\n%s", code, out)
	}
	fake := filepath.Join(t.TempDir(), "kbundle")
	os.WriteFile(fake, []byte("#!/bin/sh\necho '{\"mpi\": true}'\n"), 0o755)
	if out, code := script(t, []string{"KBUNDLE=" + fake}, "--dry-run"); code != 2 || !strings.Contains(out, "is built with MPI") {
		t.Errorf("MPI build: exit %d:\n%s", code, out)
	}
}

// The real steps, with a CuPy stand-in: the warm-up compiles every
// kernel, the program after the load compiles none; the frameworks not
// installed are skipped, and said.
func TestCheckFakeFramework(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	if exec.Command("python3", "-c", "import torch").Run() == nil {
		t.Skip("a real torch is installed: this test would run it")
	}
	kb := testutil.Kbundle(t, testutil.NoMPI)
	work := t.TempDir()
	fake, _ := filepath.Abs("testdata/fake")
	out, code := script(t, []string{"KBUNDLE=" + kb, "WORKDIR=" + filepath.Join(work, "w"), "OUT=" + filepath.Join(work, "out"),
		"PYTHONPATH=" + fake, "PYTHONDONTWRITEBYTECODE=1", "TMPDIR=" + work}, "--only", "cupy,inductor")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	if !regexp.MustCompile(`(?m)^check: cupy: ok: warm-up compiled 4, after the load 4 hits, 0 misses; gpu_arch -, 0 entries left out`).MatchString(out) ||
		!strings.Contains(out, "check: inductor: torch is not installed for python3: skipped") || strings.Contains(out, "jax") {
		t.Errorf("output:\n%s", out)
	}
	summary, _ := os.ReadFile(filepath.Join(work, "out", "summary.txt"))
	if !strings.Contains(string(summary), "cupy: ok") {
		t.Errorf("summary:\n%s", summary)
	}
	info, _ := os.ReadFile(filepath.Join(work, "out", "cupy-info.txt"))
	if !regexp.MustCompile(`(?m)^toolchain.python: +3\.`).Match(info) {
		t.Errorf("kbundle info shows no toolchain:\n%s", info)
	}
}
