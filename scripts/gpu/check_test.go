// Package gpu holds the GPU machine's check, check.sh, and its programs;
// this test runs it here: in dry mode (it checks its inputs and prints
// what it would run, within 4 minutes), and for real with stand-in
// frameworks (a fake CuPy; a fake torch on an SM90 GPU with a fake
// FlashInfer and DeepGEMM; a fake torch with no GPU), so that its steps,
// its verdict and its skips are tested where no GPU is.
package gpu

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
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

// frameworks: the names check.sh's table lists, in its order.
var frameworks = []string{"inductor", "jax", "cupy", "numba-cuda", "flashinfer", "deepgemm", "vllm", "miopen"}

// table: check.sh's frameworks, name to program and cap.
func table(t *testing.T) map[string][2]string {
	t.Helper()
	src, err := os.ReadFile("check.sh")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][2]string{}
	for _, m := range regexp.MustCompile(`(?m)^\t"(\S+) \S+ (\S+\.py) \S+ (\d+)"$`).FindAllStringSubmatch(string(src), -1) {
		out[m[1]] = [2]string{m[2], m[3]}
	}
	return out
}

// Every framework's program parses, and the caps add up to 4 minutes at
// most.
func TestCheckPrograms(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	tab := table(t)
	var names []string
	sum := 0
	for name, e := range tab {
		names = append(names, name)
		c, _ := strconv.Atoi(e[1])
		sum += c
		if out, err := exec.Command("python3", "-c", "import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])", e[0]).CombinedOutput(); err != nil {
			t.Errorf("%s: %s does not parse: %v\n%s", name, e[0], err, out)
		}
	}
	want := append([]string(nil), frameworks...)
	sort.Strings(names)
	sort.Strings(want)
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("check.sh lists %v, want %v", names, want)
	}
	if sum > 240 {
		t.Errorf("the frameworks' caps add up to %ds, over 4 minutes", sum)
	}
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
	for _, f := range frameworks {
		if !regexp.MustCompile(`(?m)^check: ` + regexp.QuoteMeta(f) + ` \(preset [a-z]+, \S+, cap \d+s\):\n  \(cd \S+ && timeout \d+ python3 _check.py installed \S+\)$`).MatchString(out) {
			t.Errorf("%s: not listed with its probe:\n%s", f, out)
		}
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

// withStandIns runs check.sh --only ONLY with the stand-in frameworks of
// dir on PYTHONPATH, into a fresh work folder: its output (exit 0, or the
// test fails) and the folder (OUT is its "out").
func withStandIns(t *testing.T, dir, only string) (out, work string) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	kb := testutil.Kbundle(t, testutil.NoMPI)
	work = t.TempDir()
	fake, _ := filepath.Abs(dir)
	out, code := script(t, []string{"KBUNDLE=" + kb, "WORKDIR=" + filepath.Join(work, "w"), "OUT=" + filepath.Join(work, "out"),
		"PYTHONPATH=" + fake, "PYTHONDONTWRITEBYTECODE=1", "TMPDIR=" + work}, "--only", only)
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	return out, work
}

// The JIT frameworks of issue 29 with stand-ins on a fake SM90 GPU:
// FlashInfer builds one module, DeepGEMM one kernel per shape, and after
// the load neither compiles; MIOpen (a ROCm torch) is skipped.
func TestCheckFakeJIT(t *testing.T) {
	out, _ := withStandIns(t, "testdata/fakegpu", "flashinfer,deepgemm,miopen")
	for _, want := range []string{
		`(?m)^check: flashinfer: ok: warm-up compiled 1, after the load 1 hits, 0 misses;`,
		`(?m)^check: deepgemm: ok: warm-up compiled 2, after the load 2 hits, 0 misses;`,
		`(?m)^check: miopen: torch\+hip is not installed for python3: skipped$`,
		`(?m)^check: done in \d+s: 2 ok, 0 failed, 1 skipped;`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("no %s in:\n%s", want, out)
		}
	}
}

// With a torch that sees no GPU every torch-based program says so and is
// skipped, never failed, and never imports its framework (the stand-ins
// of FlashInfer, DeepGEMM and vLLM raise on import).
func TestCheckNoGPU(t *testing.T) {
	out, work := withStandIns(t, "testdata/nogpu", "inductor,flashinfer,deepgemm,vllm,miopen")
	for _, f := range []string{"inductor", "flashinfer", "deepgemm", "vllm"} {
		if !regexp.MustCompile(`(?m)^check: ` + f + `: skipped: no GPU \(torch 0\.0\+fake: torch\.cuda\.is_available\(\) is False\) \(\d+s\)$`).MatchString(out) {
			t.Errorf("%s: not skipped for no GPU:\n%s", f, out)
		}
	}
	if !regexp.MustCompile(`(?m)^check: miopen: skipped: no GPU \(torch 0\.0\+fake, HIP 0\.0-fake\)`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^check: done in \d+s: 0 ok, 0 failed, 5 skipped;`).MatchString(out) {
		t.Errorf("output:\n%s", out)
	}
	summary, _ := os.ReadFile(filepath.Join(work, "out", "summary.txt"))
	if strings.Count(string(summary), ": skipped") != 5 {
		t.Errorf("summary:\n%s", summary)
	}
}
