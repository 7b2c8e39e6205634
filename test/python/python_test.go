package pythontest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
	"github.com/kbundle/kbundle/internal/testutil"
)

// python returns the python of v's test environment, or skips (fails
// when KBUNDLE_TEST_PYTHON=1).
func python(t *testing.T, v testutil.Variant) string {
	t.Helper()
	testutil.NeedMPI(t, v)
	py := os.Getenv("KBUNDLE_PYTHON_" + strings.ToUpper(string(v)))
	if py == "" {
		py = filepath.Join(testutil.RepoRoot(), ".venv-mpi", string(v), "bin", "python-mpi")
	}
	if _, err := os.Stat(py); err != nil {
		msg := fmt.Sprintf("no Python environment for %s (%v): make it with `scripts/dev/pyenv-mpi.sh %s`", v, err, v)
		if testutil.Required("PYTHON") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return py
}

var (
	installOnce sync.Once
	installDir  string
	installErr  error
)

// install builds libkbundle for both MPI builds into a copy of python/
// and installs that with pip (the real `pip install ./python`, without
// network: --no-build-isolation uses the environment's pinned
// setuptools) into a temporary directory; it returns the directory for
// PYTHONPATH. Once per test process.
func install(t *testing.T, py string) string {
	t.Helper()
	installOnce.Do(func() {
		installDir, installErr = doInstall(py)
	})
	if installErr != nil {
		t.Fatal(installErr)
	}
	return installDir
}

func doInstall(py string) (string, error) {
	root := testutil.RepoRoot()
	dir, err := os.MkdirTemp("", "kbundle-pytest-")
	if err != nil {
		return "", err
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	for _, rel := range []string{"pyproject.toml", "setup.py", "README.md", "kbundle"} {
		if out, err := exec.Command("cp", "-r", filepath.Join(root, "python", rel), src).CombinedOutput(); err != nil {
			return "", fmt.Errorf("copy python/%s: %v\n%s", rel, err, out)
		}
	}
	// Whatever `make python` may have left in the source tree is not used.
	libs, _ := filepath.Glob(filepath.Join(src, "kbundle", "lib", "libkbundle-*"))
	for _, l := range libs {
		os.Remove(l)
	}
	os.RemoveAll(filepath.Join(src, "kbundle", "bin"))
	version, err := exec.Command(filepath.Join(root, "scripts", "dev", "version.sh")).Output()
	if err != nil {
		return "", fmt.Errorf("scripts/dev/version.sh: %v", err)
	}
	if err := os.WriteFile(filepath.Join(src, "kbundle", "_version.py"),
		fmt.Appendf(nil, "__version__ = %q\n", strings.TrimSpace(string(version))), 0o644); err != nil {
		return "", err
	}
	for _, v := range testutil.MPIVariants {
		out := filepath.Join(src, "kbundle", "lib", "libkbundle-"+string(v)+".so")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-tags", "mpi", "-o", out, "./cmd/libkbundle")
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CC=mpicc."+string(v), "CGO_ENABLED=1")
		if b, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("build libkbundle for %s: %v\n%s", v, err, b)
		}
	}
	site := filepath.Join(dir, "site")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
		"--no-cache-dir", "--disable-pip-version-check", "--target", site, src)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("pip install ./python: %v\n%s", err, b)
	}
	for _, v := range testutil.MPIVariants {
		if _, err := os.Stat(filepath.Join(site, "kbundle", "lib", "libkbundle-"+string(v)+".so")); err != nil {
			return "", fmt.Errorf("pip did not install the library: %v", err)
		}
	}
	for _, f := range []string{"py.typed", "__init__.py", "_load.py", "_harvest.py"} {
		if _, err := os.Stat(filepath.Join(site, "kbundle", f)); err != nil {
			return "", fmt.Errorf("pip did not install kbundle/%s: %v", f, err)
		}
	}
	return site, nil
}

func TestMain(m *testing.M) {
	code := m.Run()
	if installDir != "" {
		os.RemoveAll(filepath.Dir(installDir))
	}
	os.Exit(code)
}

// fixtureMap is fixtures' NAME=VALUE list as a map.
func fixtureMap(env []string) map[string]string {
	m := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		m[k] = v
	}
	return m
}

// fixtures makes the cache tree and its bundles (good, damaged,
// untrusted) and returns the KBUNDLE_PYTEST_* variables naming them.
func fixtures(t *testing.T) []string {
	t.Helper()
	base := t.TempDir()
	tree := filepath.Join(base, "cache")
	files := []struct {
		name string
		body string
		mode os.FileMode
	}{
		{"triton/abc123/kernel.cubin", strings.Repeat("cubin\x00\x01", 20000), 0o644},
		{"triton/abc123/kernel.json", `{"name":"k"}`, 0o600},
		{"numba/mod.nbi", strings.Repeat("index", 300), 0o640},
		{"numba/mod.1.nbc", "", 0o644},
		{"bin/tool", "#!/bin/sh\n", 0o755},
		{"top.txt", "top", 0o444},
	}
	for i, f := range files {
		p := filepath.Join(tree, f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.body), 0o600); err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, f.mode)
		mt := time.Unix(1700000000+int64(i), int64(123456789+i))
		os.Chtimes(p, mt, mt)
	}
	os.MkdirAll(filepath.Join(tree, "empty", "dir"), 0o750)
	for i, d := range []string{"empty/dir", "empty", "bin", "numba", "triton/abc123", "triton"} {
		mt := time.Unix(1600000000+int64(i), 987654321)
		os.Chtimes(filepath.Join(tree, d), mt, mt)
	}
	store := filepath.Join(base, "store")
	if err := os.Mkdir(store, 0o700); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(store, "cache.kbundle")
	if _, err := bundle.Pack(context.Background(), tree, good, &bundle.PackOptions{Preset: "triton", SegmentSize: bundle.MinSegmentSize}); err != nil {
		t.Fatal(err)
	}
	// Warmed on another machine: every node differs from it.
	foreign := filepath.Join(store, "foreign.kbundle")
	if _, err := bundle.Pack(context.Background(), tree, foreign, &bundle.PackOptions{
		Host: map[string]string{"host.os": "linux", "host.cpu_model": "Imaginary CPU 9000"}}); err != nil {
		t.Fatal(err)
	}
	// Warmed with another Python: the Numba preset's rule compares it
	// with this interpreter's, which load_bundle reads in process.
	oldPython := filepath.Join(store, "oldpython.kbundle")
	if _, err := bundle.Pack(context.Background(), tree, oldPython, &bundle.PackOptions{Preset: "numba",
		Host: map[string]string{bundle.MetaPython: "2.7.18"}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x01
	damaged := filepath.Join(store, "damaged.kbundle")
	if err := os.WriteFile(damaged, b, 0o600); err != nil {
		t.Fatal(err)
	}
	open := filepath.Join(base, "open")
	if err := os.Mkdir(open, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(open, 0o777) // anyone may replace the file: untrusted
	untrusted := filepath.Join(open, "cache.kbundle")
	if err := os.Link(good, untrusted); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(base, "work")
	if err := os.Mkdir(work, 0o700); err != nil {
		t.Fatal(err)
	}
	return []string{
		"KBUNDLE_PYTEST_TREE=" + tree, "KBUNDLE_PYTEST_BUNDLE=" + good, "KBUNDLE_PYTEST_DAMAGED=" + damaged,
		"KBUNDLE_PYTEST_UNTRUSTED=" + untrusted, "KBUNDLE_PYTEST_WORK=" + work, "KBUNDLE_PYTEST_FOREIGN=" + foreign,
		"KBUNDLE_PYTEST_OLDPYTHON=" + oldPython,
	}
}

// rankTask runs pytest as one rank, its report in OUT/rank.<rank>; sh
// stays the parent so the launcher's variables reach Python unchanged.
// Use as: sh -c rankTask PYTHON TESTFILE OUT.
const rankTask = `r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-x}}}
"$0" -m pytest -q -p no:cacheprovider -W error::pytest.PytestUnraisableExceptionWarning "$1" > "$2/rank.$r" 2>&1
rc=$?
echo $rc > "$2/rc.$r"
exit $rc`

var rePassed = regexp.MustCompile(`(?m)^(\d+) passed in [0-9.]+s`)

// checkRanks fails unless each of np ranks ran every test and passed.
func checkRanks(t *testing.T, out string, np int, launch string) {
	t.Helper()
	var want string
	for r := range np {
		b, err := os.ReadFile(filepath.Join(out, "rank."+strconv.Itoa(r)))
		if err != nil {
			t.Errorf("rank %d left no pytest report: %v\n%s", r, err, launch)
			continue
		}
		rc, _ := os.ReadFile(filepath.Join(out, "rc."+strconv.Itoa(r)))
		m := rePassed.FindStringSubmatch(string(b))
		if strings.TrimSpace(string(rc)) != "0" || m == nil || strings.Contains(string(b), "failed") {
			t.Errorf("rank %d: pytest exit %q\n%s\n%s", r, strings.TrimSpace(string(rc)), b, launch)
			continue
		}
		if want == "" {
			want = m[1]
		} else if m[1] != want {
			t.Errorf("rank %d passed %s tests, rank 0 %s", r, m[1], want)
		}
		if r == 0 {
			t.Logf("rank 0: %s", strings.TrimSpace(m[0]))
		}
	}
}

// TestPytestUnderMPI runs test_load.py on every rank under mpirun (Open
// MPI) and mpiexec.hydra (MPICH) at 1, 2 and 4 ranks.
func TestPytestUnderMPI(t *testing.T) {
	testfile := filepath.Join(testutil.RepoRoot(), "test", "python", "test_load.py")
	for _, v := range testutil.MPIVariants {
		for _, np := range []int{1, 2, 4} {
			t.Run(testutil.Describe(v, np), func(t *testing.T) {
				pytestUnderMPI(t, v, np, testfile)
			})
		}
	}
}

// pytestUnderMPI runs pytest on testfile on np ranks of v's launcher,
// with the fixtures, and checks every rank's report.
func pytestUnderMPI(t *testing.T, v testutil.Variant, np int, testfile string) {
	t.Helper()
	py := python(t, v)
	site := install(t, py)
	out := t.TempDir()
	env := append(fixtures(t), "KBUNDLE_PYTEST_VARIANT="+string(v), "PYTHONPATH="+site,
		"PYTHONDONTWRITEBYTECODE=1", "KBUNDLE_LIBRARY=", "KBUNDLE_CACHE_DIR=", "KBUNDLE_LOCAL_DIR=", "KBUNDLE_BUNDLE=")
	start := time.Now()
	so, se, code := testutil.RunMPI(t, v, np, env, "sh", "-c", rankTask, py, testfile, out)
	launch := fmt.Sprintf("launcher exit %d\nstdout:\n%s\nstderr:\n%s", code, so, se)
	checkRanks(t, out, np, launch)
	if code != 0 && !t.Failed() {
		t.Errorf("%s", launch)
	}
	t.Logf("%s at np %d: %v", filepath.Base(testfile), np, time.Since(start).Round(time.Millisecond))
}

// TestHarvestUnderMPI runs test_harvest.py (kbundle.harvest: load on two
// fake nodes, one compiles, harvest writes one layer, the same result on
// both ranks; again: no layer; a failure: the same exception on both)
// under mpirun (Open MPI) and mpiexec.hydra (MPICH) at 2 ranks.
func TestHarvestUnderMPI(t *testing.T) {
	testfile := filepath.Join(testutil.RepoRoot(), "test", "python", "test_harvest.py")
	for _, v := range testutil.MPIVariants {
		t.Run(testutil.Describe(v, 2), func(t *testing.T) { pytestUnderMPI(t, v, 2, testfile) })
	}
}

// srunMPI is srun's --mpi plugin for each MPI build (as test/slurm).
var srunMPI = map[testutil.Variant]string{testutil.OpenMPI: "pmix", testutil.MPICH: "pmi2"}

// TestPytestUnderSrun runs test_load.py on 2 tasks of `srun` in the test
// Slurm (scripts/ci/slurm-up.sh), for each MPI build.
func TestPytestUnderSrun(t *testing.T) {
	conf := os.Getenv("SLURM_CONF")
	if _, err := exec.LookPath("srun"); conf == "" || err != nil {
		msg := "no test Slurm: start one with `eval \"$(scripts/ci/slurm-up.sh)\"`"
		if testutil.Required("SLURM") {
			t.Fatalf("KBUNDLE_TEST_SLURM=1 but SLURM_CONF=%q: %s", conf, msg)
		}
		t.Skip(msg)
	}
	testfile := filepath.Join(testutil.RepoRoot(), "test", "python", "test_load.py")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			py := python(t, v)
			site := install(t, py)
			out := t.TempDir()
			const np = 2
			env := append(fixtures(t), "KBUNDLE_PYTEST_VARIANT="+string(v), "PYTHONPATH="+site, "PYTHONDONTWRITEBYTECODE=1")
			env = append(env, testutil.MPIEnv...)
			ctx, cancel := context.WithTimeout(context.Background(), testutil.LaunchTimeout)
			defer cancel()
			cmd := exec.CommandContext(ctx, "srun", "--mpi="+srunMPI[v], "-n", strconv.Itoa(np), "-O",
				"sh", "-c", rankTask, py, testfile, out)
			cmd.Env = append(slurmEnv(), env...)
			cmd.Dir = out
			cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
			cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
			cmd.WaitDelay = 5 * time.Second
			b, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("srun timed out after %v (a hang is a failure)\n%s", testutil.LaunchTimeout, b)
			}
			launch := fmt.Sprintf("srun: %v\n%s", err, b)
			checkRanks(t, out, np, launch)
			if err != nil && !t.Failed() {
				t.Error(launch)
			}
		})
	}
}

// slurmEnv is the environment without launcher, MPI or kbundle variables
// (in case the tests run inside an allocation), keeping SLURM_CONF.
func slurmEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if name != "SLURM_CONF" {
			for _, p := range []string{"SLURM_", "OMPI_", "PMI_", "PMIX_", "HYDRA_", "KBUNDLE_"} {
				if strings.HasPrefix(name, p) {
					name = ""
					break
				}
			}
			if name == "" {
				continue
			}
		}
		env = append(env, kv)
	}
	return env
}

// TestTimeoutAborts: when a rank never calls load_bundle, the others end
// the job with MPI_Abort once the timeout runs out, saying so, instead of
// hanging; nothing is left in the destination's directory.
func TestTimeoutAborts(t *testing.T) {
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "hang_prog.py")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			py := python(t, v)
			site := install(t, py)
			fx := fixtureMap(fixtures(t))
			file, work := fx["KBUNDLE_PYTEST_BUNDLE"], fx["KBUNDLE_PYTEST_WORK"]
			dest := filepath.Join(work, "dest")
			start := time.Now()
			so, se, code := testutil.RunMPI(t, v, 2, []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"},
				py, prog, file, dest, "2")
			took := time.Since(start)
			out := fmt.Sprintf("exit %d after %v\nstdout:\n%s\nstderr:\n%s", code, took, so, se)
			if code == 0 || strings.Contains(so, "returned") {
				t.Fatalf("the job did not abort: %s", out)
			}
			if !strings.Contains(se, "kbundle: rank 0 (") || !strings.Contains(se, "load_bundle did not finish within 2s") {
				t.Errorf("no timeout message: %s", out)
			}
			if took > 60*time.Second {
				t.Errorf("took %v to abort after a 2 s timeout", took)
			}
			if ents, _ := os.ReadDir(work); len(ents) != 0 {
				t.Errorf("left behind in %s: %v", work, ents)
			}
			t.Logf("aborted after %v", took.Round(time.Millisecond))
		})
	}
}

// TestThreadLevel: mpi4py initialised with MPI_THREAD_SERIALIZED loads;
// with MPI_THREAD_FUNNELED every rank raises KbundleMPIError naming the
// level and the fix (kbundle calls MPI from a thread of its own), and
// nothing hangs.
func TestThreadLevel(t *testing.T) {
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "thread_prog.py")
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			py := python(t, v)
			site := install(t, py)
			fx := fixtureMap(fixtures(t))
			file, work := fx["KBUNDLE_PYTEST_BUNDLE"], fx["KBUNDLE_PYTEST_WORK"]
			env := []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"}
			for _, c := range []struct{ level, want string }{
				{"serialized", "loaded"},
				{"funneled", "mpi: kbundle: mpi: adopt: MPI was initialised with thread level MPI_THREAD_FUNNELED"},
			} {
				so, se, code := testutil.RunMPI(t, v, 2, env, py, prog, c.level, file, filepath.Join(work, c.level))
				out := fmt.Sprintf("%s: exit %d\nstdout:\n%s\nstderr:\n%s", c.level, code, so, se)
				for r := range 2 {
					if !strings.Contains(so, fmt.Sprintf("rank %d: %s", r, c.want)) {
						t.Errorf("rank %d: want %q\n%s", r, c.want, out)
					}
				}
				if c.level == "funneled" && !strings.Contains(so, `mpi4py.rc.thread_level`) {
					t.Errorf("no hint naming mpi4py.rc.thread_level\n%s", out)
				}
			}
		})
	}
}

// TestUnit runs test_unit.py, the package's tests that need neither MPI
// nor mpi4py (how it finds and checks libkbundle, what it does about
// frameworks imported before the load), with the python3 on PATH: it
// needs no test environment.
func TestUnit(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if testutil.Required("PYTHON") {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	root := testutil.RepoRoot()
	so, se, code := testutil.Run(t, []string{"PYTHONPATH=" + filepath.Join(root, "python"), "PYTHONDONTWRITEBYTECODE=1"},
		py, filepath.Join(root, "test", "python", "test_unit.py"), "-v")
	if code != 0 {
		t.Fatalf("%s test_unit.py: exit %d\n%s%s", py, code, so, se)
	}
	t.Logf("%s", strings.TrimSpace(se))
}

// TestTypes: the package (py.typed), its example and these tests pass
// mypy --strict, against mpi4py's own stubs.
func TestTypes(t *testing.T) {
	py := python(t, testutil.OpenMPI)
	root := testutil.RepoRoot()
	files, _ := filepath.Glob(filepath.Join(root, "test", "python", "*.py"))
	args := append([]string{"-m", "mypy", "--strict", "--no-incremental", "--cache-dir", os.DevNull,
		filepath.Join(root, "python", "kbundle"), filepath.Join(root, "python", "examples")}, files...)
	so, se, code := testutil.Run(t, []string{"MYPYPATH=" + filepath.Join(root, "python")}, append([]string{py}, args...)...)
	if code != 0 {
		t.Fatalf("mypy --strict: exit %d\n%s%s", code, so, se)
	}
	t.Logf("%s", strings.TrimSpace(so))
}

// TestWrongLibrary: a libkbundle built for another MPI than mpi4py's
// (KBUNDLE_LIBRARY) is refused with both MPIs named, before any MPI call
// (its MPI calls would bind to mpi4py's libmpi, of another ABI, and
// crash); a missing one is named with the fix. The Go side refuses it
// too, when called directly.
func TestWrongLibrary(t *testing.T) {
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) { wrongLibrary(t, v) })
	}
}

func wrongLibrary(t *testing.T, v testutil.Variant) {
	py := python(t, v)
	site := install(t, py)
	other, built, runs := testutil.MPICH, "MPICH (or an MPI of its ABI)", "Open MPI"
	if v == testutil.MPICH {
		other, built, runs = testutil.OpenMPI, "Open MPI", "MPICH"
	}
	lib := filepath.Join(site, "kbundle", "lib", "libkbundle-"+string(other)+".so")
	const prog = `import kbundle
from mpi4py import MPI
try:
    kbundle.load_bundle(MPI.COMM_WORLD, bundle="/nonexistent.kbundle")
except kbundle.KbundleMPIError as e:
    print("raised:", e)
`
	for _, c := range []struct{ lib, want string }{
		{lib, "libkbundle-" + string(other) + ".so is built for " + built + ", but mpi4py runs on " + runs},
		{filepath.Join(site, "nonexistent.so"), "nonexistent.so: no such library"},
	} {
		so, se, code := testutil.RunMPI(t, v, 1, []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1", "KBUNDLE_LIBRARY=" + c.lib},
			py, "-c", prog)
		if code != 0 || !strings.Contains(so, "raised: kbundle: ") || !strings.Contains(so, c.want) {
			t.Errorf("KBUNDLE_LIBRARY=%s: exit %d, want %q\nstdout:\n%s\nstderr:\n%s", c.lib, code, c.want, so, se)
		}
	}
	// The C entry itself, past the Python check: no crash, an answer. Its
	// MPI calls bind to mpi4py's libmpi when that was loaded globally
	// (Open MPI: then the ABI check refuses), else to its own, second and
	// uninitialised libmpi (MPICH: then adopting finds no MPI to adopt).
	const direct = `import ctypes, sys
from mpi4py import MPI
lib = ctypes.CDLL(sys.argv[1])
lib.kbundle_load.argtypes = [ctypes.c_longlong, ctypes.c_char_p]
lib.kbundle_load.restype = ctypes.c_char_p
print(lib.kbundle_load(MPI.COMM_WORLD.py2f(), b'{"bundle": "/nonexistent.kbundle"}').decode())
`
	so, se, code := testutil.RunMPI(t, v, 1, nil, py, "-c", direct, lib)
	want := `"kind":"mpi","reason":"mpi: adopt: this code was built for ` + built + `, but the process runs ` + runs
	if v == testutil.MPICH {
		want = `"kind":"mpi","reason":"mpi: adopt: `
	}
	if code != 0 || !strings.Contains(so, want) {
		t.Errorf("kbundle_load of the %s build in a %s process: exit %d, want %s\nstdout:\n%s\nstderr:\n%s", other, v, code, want, so, se)
	}
}

// TestSingletonRefused: an mpi4py of Open MPI under MPICH's Hydra starts
// every task as a singleton; load_bundle and harvest refuse on every task
// in mpi4py's words (issue 20 part 3; U40: the fix is mpi4py's), rather than each task loading
// the bundle alone.
func TestSingletonRefused(t *testing.T) {
	py := python(t, testutil.OpenMPI)
	site := install(t, py)
	const prog = `import kbundle
from mpi4py import MPI
for call in (lambda: kbundle.load_bundle(MPI.COMM_WORLD, bundle="/nonexistent.kbundle", dest="/nonexistent/d"),
             lambda: kbundle.harvest(MPI.COMM_WORLD, bundle="/nonexistent.kbundle", dest="/nonexistent/d")):
    try:
        call()
        print("not refused")
    except kbundle.KbundleUsageError as e:
        print("raised:", str(e).splitlines()[0])
`
	so, se, code := testutil.Run(t, append([]string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"}, testutil.MPIEnv...),
		"mpiexec.hydra", "-n", "2", py, "-c", prog)
	// In mpi4py's terms (U40): the library is the one mpi4py opened, and
	// the fix is mpi4py's (MPI4PY_LIBMPI), not another kbundle build.
	want := "raised: kbundle: mpi4py runs on Open MPI (libmpi.so.40), but this job runs under Hydra (MPICH) (2 tasks)"
	if code != 0 || strings.Count(so, want) != 4 || strings.Contains(so, "not refused") {
		t.Errorf("exit %d, want 4 times %q\nstdout:\n%s\nstderr:\n%s", code, want, so, se)
	}
}

// TestMegaCache: PyTorch's Mega-Cache through the mega-cache preset, on
// CPU Inductor under mpirun -np 2 (megacache_prog.py). The first job has
// no set: it compiles cold, and harvest() writes each rank's
// torch.compiler.save_cache_artifacts() blob into DEST and the set. The
// second job loads the set into another DEST with an empty Inductor
// directory of its own: load_bundle hot-loads the blobs
// (torch.compiler.load_cache_artifacts), and every graph is an FX graph
// cache hit.
func TestMegaCache(t *testing.T) {
	py := filepath.Join(testutil.RepoRoot(), ".venv", "bin", "python")
	if !testutil.Required("BIGFRAMEWORKS") {
		t.Skip("PyTorch tests run with KBUNDLE_TEST_BIGFRAMEWORKS=1 (scripts/dev/venv.sh)")
	}
	if out, _, code := testutil.Run(t, nil, py, "-c", "import torch, mpi4py"); code != 0 {
		t.Fatalf("%s cannot import torch and mpi4py (run scripts/dev/venv.sh): %s", py, out)
	}
	testutil.NeedMPI(t, testutil.OpenMPI)
	site := install(t, py)
	base := t.TempDir()
	set := filepath.Join(base, "store", "cache.kbundle")
	os.Mkdir(filepath.Dir(set), 0o700)
	prog := filepath.Join(testutil.RepoRoot(), "test", "python", "megacache_prog.py")
	type result struct {
		Rank      int      `json:"rank"`
		Blobs     int      `json:"blobs"`
		Presets   []string `json:"presets"`
		FXHits    int      `json:"fx_hits"`
		FXMisses  int      `json:"fx_misses"`
		Harvested int      `json:"harvested_units"`
	}
	job := func(mode string, n int) []result {
		dest := filepath.Join(base, "dest-"+mode)
		env := []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1", "KBUNDLE_LIBRARY=",
			"TORCHINDUCTOR_CACHE_DIR=" + filepath.Join(base, "inductor-"+mode), // empty: every job's own
			"TMPDIR=" + t.TempDir()}
		so, se, code := testutil.RunMPI(t, testutil.OpenMPI, n, env, py, prog, mode, set, dest)
		if code != 0 {
			t.Fatalf("%s job: exit %d\n%s\n%s", mode, code, so, se)
		}
		var out []result
		for _, l := range strings.Split(strings.TrimSpace(so), "\n") {
			var r result
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("%s job: line %q: %v\n%s", mode, l, err, se)
			}
			out = append(out, r)
		}
		if len(out) != n {
			t.Fatalf("%s job: %d lines from %d ranks:\n%s\n%s", mode, len(out), n, so, se)
		}
		return out
	}
	first := job("first", 2)
	for _, r := range first {
		if r.FXHits != 0 || r.FXMisses == 0 || r.Harvested == 0 {
			t.Errorf("first job, rank %d: %+v; want cold compiles and a harvested blob", r.Rank, r)
		}
	}
	blobs, _ := filepath.Glob(filepath.Join(base, "dest-first", "mega-cache", "*.bin"))
	if len(blobs) == 0 {
		t.Fatal("the first job wrote no blob into DEST/mega-cache")
	}
	again := job("again", 2)
	for _, r := range again {
		if r.Blobs != len(blobs) || !slices.Contains(r.Presets, "mega-cache") || r.FXHits == 0 || r.FXMisses != 0 {
			t.Errorf("second job, rank %d: %+v; want %d blobs hot-loaded and only FX graph cache hits", r.Rank, r, len(blobs))
		}
	}
}
