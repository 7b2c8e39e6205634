package jit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/preset"
)

// The big frameworks (JAX, PyTorch) come from PyPI into the project's
// virtual environment (scripts/dev/venv.sh: .venv, pinned versions). Their
// tests run only with KBUNDLE_TEST_BIGFRAMEWORKS=1 (make test sets it
// unless KBUNDLE_SKIP_BIGFRAMEWORKS=1): the environment costs a 3.1 GB
// download and 5.9 GB of disk, PyPI's torch being the CUDA build.
const bigSwitch = "BIGFRAMEWORKS"

// venvPython returns the virtual environment's python, skipping the test
// unless KBUNDLE_TEST_BIGFRAMEWORKS=1 (then a missing environment fails).
func venvPython(t *testing.T, modules ...string) string {
	t.Helper()
	if !testutil.Required(bigSwitch) {
		t.Skip("JAX/PyTorch tests run with KBUNDLE_TEST_BIGFRAMEWORKS=1 (scripts/dev/venv.sh installs them: 3.1 GB download)")
	}
	py := filepath.Join(testutil.RepoRoot(), ".venv", "bin", "python")
	args := []string{"-c", "import " + strings.Join(modules, ", ")}
	if out, _, code := testutil.Run(t, nil, append([]string{py}, args...)...); code != 0 {
		t.Fatalf("%s cannot import %s (run scripts/dev/venv.sh): %s", py, strings.Join(modules, ", "), out)
	}
	return py
}

// xlaRejected is what XLA:CPU's AOT loader logs when it refuses a cached
// executable (jax-ml/jax#38445).
const xlaRejected = "Target machine feature"

type jaxResult struct {
	Rank      int      `json:"rank"`
	Functions int      `json:"functions"`
	Requests  int      `json:"requests"`
	Hits      int      `json:"hits"`
	Misses    int      `json:"misses"`
	Rejected  []string `json:"rejected"`
	CacheDir  string   `json:"cache_dir"`
	Checksum  float64  `json:"checksum"`
}

// TestJAX: warm up a JAX program with several jitted functions (--pack
// --check), load the bundle to another path under Open MPI and MPICH at np
// 2 and 4, and show with JAX's own monitoring events that every rank's
// every compilation request is a persistent-cache hit, with no write and
// no entry rejected by XLA's loader.
func TestJAX(t *testing.T) {
	py := venvPython(t, "jax")
	script := workload(t, "jax_kernels.py")
	bundlePath, _, out, stderr := warmArgs(t, "jax", []string{"--check"}, py, script)
	res := jsonLines[jaxResult](t, out)
	if len(res) != 2 {
		t.Fatalf("want the warm-up's and the check's result lines, got %+v", res)
	}
	cold, again := res[0], res[1]
	if cold.Requests < cold.Functions || cold.Misses != cold.Requests || cold.Hits != 0 {
		t.Fatalf("warm-up did not compile and store every program: %+v", cold)
	}
	if again.Hits != cold.Requests || again.Misses != 0 || len(again.Rejected) != 0 {
		t.Errorf("warm --check run: %+v, want %d hits", again, cold.Requests)
	}
	if !strings.Contains(stderr, "kbundle: check: reused") || strings.Contains(stderr, xlaRejected) {
		t.Errorf("warm --check did not report reuse:\n%s", stderr)
	}
	for _, v := range testutil.MPIVariants {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", v, n), func(t *testing.T) {
				res, stderr, dest, wrote := runLoaded[jaxResult](t, v, n, bundlePath, "jax", py, script)
				if strings.Contains(stderr, xlaRejected) {
					t.Errorf("XLA rejected cached executables (jax-ml/jax#38445):\n%s", stderr)
				}
				for _, r := range res {
					if r.Hits != cold.Requests || r.Misses != 0 || r.Requests != cold.Requests || len(r.Rejected) != 0 {
						t.Errorf("rank %d: %d requests, %d hits, %d misses, rejected %q; want %d hits",
							r.Rank, r.Requests, r.Hits, r.Misses, r.Rejected, cold.Requests)
					}
					if !strings.HasPrefix(r.CacheDir, dest) || r.Checksum != cold.Checksum {
						t.Errorf("rank %d used %q (checksum %v), not the loaded copy under %s (%v)", r.Rank, r.CacheDir, r.Checksum, dest, cold.Checksum)
					}
				}
				checkUnwritten(t, wrote)
			})
		}
	}
}

// TestJAXPathInKey measures why the jax preset sets
// JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none: without it, JAX puts the
// cache directory's absolute path (XLA's autotune cache dir) into the
// hashed compile options, every key changes with the move, and warm
// --check says so with status 4, naming the new entries.
func TestJAXPathInKey(t *testing.T) {
	py := venvPython(t, "jax")
	script := workload(t, "jax_kernels.py")
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := filepath.Join(t.TempDir(), "cache")
	_, stderr, code := testutil.Run(t, nil, kb, "warm", "--dir", dir, "--preset", "jax", "--check", "--",
		"env", "-u", "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES", py, script)
	if code != 4 || !strings.Contains(stderr, "kbundle: check: NOT reused") || !strings.Contains(stderr, "added jax/jit_kernel") {
		t.Fatalf("exit %d, want 4 naming new jax/ entries:\n%s", code, stderr)
	}
}

// TestJAXEviction: with eviction on (JAX_COMPILATION_CACHE_MAX_SIZE), JAX
// rewrites an -atime stamp per hit; warm --check counts those as
// bookkeeping and still proves reuse.
func TestJAXEviction(t *testing.T) {
	py := venvPython(t, "jax")
	t.Setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "100000000")
	_, _, out, stderr := warmArgs(t, "jax", []string{"--check"}, py, workload(t, "jax_kernels.py"))
	res := jsonLines[jaxResult](t, out)
	if len(res) != 2 || res[1].Hits != res[0].Requests || res[1].Misses != 0 {
		t.Fatalf("results %+v", res)
	}
	if !strings.Contains(stderr, "kbundle: check: reused") || !strings.Contains(stderr, "bookkeeping files ignored") {
		t.Errorf("warm --check:\n%s", stderr)
	}
}

func (r jaxResult) rank() int { return r.Rank }

type inductorResult struct {
	Rank      int     `json:"rank"`
	Functions int     `json:"functions"`
	FXHits    int     `json:"fx_hits"`
	FXMisses  int     `json:"fx_misses"`
	FXBypass  int     `json:"fx_bypass"`
	AOTHits   int     `json:"aot_hits"`
	AOTMisses int     `json:"aot_misses"`
	CacheDir  string  `json:"cache_dir"`
	Checksum  float64 `json:"checksum"`
}

func (r inductorResult) rank() int { return r.Rank }

// TestInductor: torch.compile on the CPU (Inductor builds C++ kernels);
// warm up (--pack --check), load to another path, and every rank of
// Open MPI and MPICH at np 2 and 4 finds every graph in the FX graph cache
// and the AOTAutograd cache (torch's counters), with nothing written.
// The warm-up directory is removed before the runs: nothing may still
// point into it.
func TestInductor(t *testing.T) {
	py := venvPython(t, "torch")
	// Inductor keeps its precompiled headers in
	// $TMPDIR/torchinductor_$USER whatever TORCHINDUCTOR_CACHE_DIR says:
	// keep them in the test's own directory, not the user's /tmp.
	t.Setenv("TMPDIR", t.TempDir())
	script := workload(t, "inductor_kernels.py")
	bundlePath := filepath.Join(t.TempDir(), "inductor.kbundle")
	_, cacheDir, out, stderr := warmArgs(t, "inductor", []string{"--check", "-o", bundlePath}, py, script)
	res := jsonLines[inductorResult](t, out)
	if len(res) != 2 {
		t.Fatalf("want the warm-up's and the check's result lines, got %+v", res)
	}
	cold, again := res[0], res[1]
	if cold.FXMisses != cold.Functions || cold.FXHits != 0 || cold.AOTMisses != cold.Functions {
		t.Fatalf("warm-up did not compile every graph: %+v", cold)
	}
	if again.FXHits != cold.Functions || again.FXMisses != 0 || again.AOTHits != cold.Functions || again.AOTMisses != 0 {
		t.Errorf("warm --check run: %+v", again)
	}
	if !strings.Contains(stderr, "kbundle: check: reused") {
		t.Errorf("warm --check did not report reuse:\n%s", stderr)
	}
	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	t.Run("another compiler name", func(t *testing.T) { inductorOtherCompiler(t, py, script, bundlePath, cold.Functions) })
	for _, v := range testutil.MPIVariants {
		for _, n := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", v, n), func(t *testing.T) {
				res, _, dest, wrote := runLoaded[inductorResult](t, v, n, bundlePath, "inductor", py, script)
				for _, r := range res {
					if r.FXHits != cold.Functions || r.FXMisses != 0 || r.FXBypass != 0 || r.AOTHits != cold.Functions || r.AOTMisses != 0 {
						t.Errorf("rank %d: FX graph cache %d hits %d misses %d bypasses, AOTAutograd %d hits %d misses; want %d hits each",
							r.Rank, r.FXHits, r.FXMisses, r.FXBypass, r.AOTHits, r.AOTMisses, cold.Functions)
					}
					if !strings.HasPrefix(r.CacheDir, dest) || r.Checksum != cold.Checksum {
						t.Errorf("rank %d used %q (checksum %v), not the loaded copy under %s (%v)", r.Rank, r.CacheDir, r.Checksum, dest, cold.Checksum)
					}
				}
				checkUnwritten(t, wrote)
			})
		}
	}
}

// warm --check on the Debian frameworks: Numba and PyOpenCL on pocl reuse
// a moved cache (pocl's empty last_accessed stamps are bookkeeping).
func TestCheckNumba(t *testing.T) {
	needPython(t, "python3-numba", "numba")
	_, _, _, stderr := warmArgs(t, "numba", []string{"--check"}, python, workload(t, "numba_kernels.py"))
	if !strings.Contains(stderr, "kbundle: check: reused") {
		t.Errorf("warm --check:\n%s", stderr)
	}
}

func TestCheckPyOpenCL(t *testing.T) {
	needPython(t, "python3-pyopencl pocl-opencl-icd", "pyopencl", "numpy")
	_, _, _, stderr := warmArgs(t, "pyopencl", []string{"--check"}, python, workload(t, "opencl_kernels.py"))
	if !strings.Contains(stderr, "kbundle: check: reused") {
		t.Errorf("warm --check:\n%s", stderr)
	}
}

// pathKeyed is a deliberately broken toy framework: it keys its one cache
// entry on the cache directory's own absolute path, so a moved copy never
// hits and the check run writes a new entry.
const pathKeyed = `key=$(printf %s "$TACK_CACHE_DIR" | cksum | cut -d" " -f1)
k="$TACK_CACHE_DIR/kernel-$key.bin"
if [ -f "$k" ]; then echo hit; else echo compiled >"$k"; echo miss; fi`

// TestCheckBroken: warm --check exits 4 on the path-keyed toy, names the
// entry the check run wrote, and still leaves the bundle and nothing else.
func TestCheckBroken(t *testing.T) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dir := filepath.Join(t.TempDir(), "cache")
	tmp := t.TempDir()
	stdout, stderr, code := testutil.Run(t, []string{"TMPDIR=" + tmp}, kb, "warm", "--dir", dir, "--preset", "tack", "--pack", "--check", "--", "sh", "-c", pathKeyed)
	if code != 4 {
		t.Fatalf("exit %d, want 4\n%s%s", code, stdout, stderr)
	}
	if stdout != "miss\nmiss\n" {
		t.Errorf("stdout %q: want the warm-up's and the check's misses", stdout)
	}
	for _, want := range []string{"kbundle: check: NOT reused", "added tack/kernel-", "kbundle: hint: ", "kbundle: the cache was not reused"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "cache.kbundle")); err != nil {
		t.Errorf("the bundle was not kept: %v", err)
	}
	if left, _ := os.ReadDir(tmp); len(left) != 0 {
		t.Errorf("warm --check left %d entries in TMPDIR", len(left))
	}
	// The path-independent version of the same toy passes.
	good := strings.ReplaceAll(pathKeyed, `key=$(printf %s "$TACK_CACHE_DIR" | cksum | cut -d" " -f1)`, "key=0")
	_, stderr, code = testutil.Run(t, nil, kb, "warm", "--dir", filepath.Join(t.TempDir(), "c2"), "--preset", "tack", "--check", "--", "sh", "-c", good)
	if code != 0 || !strings.Contains(stderr, "kbundle: check: reused") {
		t.Errorf("exit %d:\n%s", code, stderr)
	}
}

// inductorOtherCompiler measures what docs/presets.md says: the C++
// compiler Inductor runs is part of the FX graph cache key, by name: the
// same GCC called c++ instead of g++ (the default) misses every graph.
// (One process, no MPI, on its own extracted copy.)
func inductorOtherCompiler(t *testing.T, py, script, bundlePath string, functions int) {
	kb := testutil.Kbundle(t, testutil.NoMPI)
	dest := filepath.Join(t.TempDir(), "copy")
	if _, stderr, code := testutil.Run(t, nil, kb, "extract", bundlePath, dest); code != 0 {
		t.Fatalf("extract: %s", stderr)
	}
	p, _ := preset.Lookup("inductor")
	stdout, stderr, code := testutil.Run(t, append(p.Env(dest), "CXX=c++"), py, script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	r := jsonLines[inductorResult](t, stdout)
	if len(r) != 1 || r[0].FXMisses != functions || r[0].FXHits != 0 {
		t.Errorf("with CXX=c++: %+v; docs/presets.md says every graph misses", r)
	}
}

// TestMPI4Py: the virtual environment's mpi4py (PyPI's binary wheel)
// works under Open MPI as installed and under Debian's MPICH with the
// library link venv.sh makes (LD_LIBRARY_PATH=.venv/mpich-lib
// MPI4PY_LIBMPI=libmpi.so.12), at np 1, 2 and 4: every rank sees the
// launcher's size and an allreduce of the ranks agrees.
func TestMPI4Py(t *testing.T) {
	py := venvPython(t, "mpi4py")
	prog := `from mpi4py import MPI
c = MPI.COMM_WORLD
import sys
sys.stdout.write("%d %d %d %s\n" % (c.Get_rank(), c.Get_size(), c.allreduce(c.Get_rank()), MPI.Get_library_version().split()[0]))`
	for _, v := range testutil.MPIVariants {
		var env []string
		lib := "Open"
		if v == testutil.MPICH {
			env = []string{"LD_LIBRARY_PATH=" + filepath.Join(filepath.Dir(filepath.Dir(py)), "mpich-lib"), "MPI4PY_LIBMPI=libmpi.so.12"}
			lib = "MPICH"
		}
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("%s/np%d", v, n), func(t *testing.T) {
				stdout, stderr, code := testutil.RunMPI(t, v, n, env, py, "-c", prog)
				if code != 0 {
					t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
				}
				lines := strings.Split(strings.TrimSpace(stdout), "\n")
				if len(lines) != n {
					t.Fatalf("%d lines from %d ranks:\n%s", len(lines), n, stdout)
				}
				for _, l := range lines {
					var rank, size, sum int
					var name string
					if _, err := fmt.Sscanf(l, "%d %d %d %s", &rank, &size, &sum, &name); err != nil {
						t.Fatalf("line %q: %v", l, err)
					}
					if size != n || sum != n*(n-1)/2 || name != lib {
						t.Errorf("rank %d: size %d, allreduce %d, library %s; want %d, %d, %s", rank, size, sum, name, n, n*(n-1)/2, lib)
					}
				}
			})
		}
	}
}

type extensionResult struct {
	Rank        int       `json:"rank"`
	Result      []float64 `json:"result"`
	BuildDir    string    `json:"build_dir"`
	SO          string    `json:"so"`
	SOMtimeNS   int64     `json:"so_mtime_ns"`
	ModuleFile  string    `json:"module_file"`
	RanCommands []string  `json:"ran_commands"`
	NoWork      bool      `json:"no_work"`
}

func (r extensionResult) rank() int { return r.Rank }

// TestTorchExtension: a real C++ extension built by
// torch.utils.cpp_extension.load (ninja, g++) is warmed with --preset
// torch-extensions (--check: reused), packed, loaded to another path under Open MPI and
// MPICH, and imported by new processes: the op gives the same result,
// ninja has nothing to do (torch's verbose output: no command run, "no
// work to do"), the .so keeps its mtime to the nanosecond and nothing in
// the loaded copy is written. The warm-up directory is removed first.
func TestTorchExtension(t *testing.T) {
	py := venvPython(t, "torch")
	for _, tool := range []string{"ninja", "g++"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("torch.utils.cpp_extension needs %s on PATH: %v", tool, err)
		}
	}
	script := workload(t, "torch_extension_kernels.py")
	bundlePath := filepath.Join(t.TempDir(), "ext.kbundle")
	_, cacheDir, out, stderr := warmArgs(t, "torch-extensions", []string{"--check", "-o", bundlePath}, py, script)
	res := jsonLines[extensionResult](t, out)
	if len(res) != 2 {
		t.Fatalf("want the warm-up's and the check's result lines, got %+v", res)
	}
	cold, again := res[0], res[1]
	if len(again.RanCommands) > 0 || !again.NoWork || !strings.Contains(stderr, "kbundle: check: reused") {
		t.Errorf("warm --check: ninja ran %q (no work to do: %v)\n%s", again.RanCommands, again.NoWork, stderr)
	}
	if len(cold.RanCommands) == 0 || cold.NoWork {
		t.Fatalf("the warm-up did not build the extension: %+v", cold)
	}
	want := []float64{1, 3, 5, 7}
	if !slices.Equal(cold.Result, want) {
		t.Fatalf("op result %v, want %v", cold.Result, want)
	}
	if err := os.RemoveAll(cacheDir); err != nil {
		t.Fatal(err)
	}
	for _, v := range testutil.MPIVariants {
		t.Run(fmt.Sprintf("%s/np2", v), func(t *testing.T) {
			res, _, dest, wrote := runLoaded[extensionResult](t, v, 2, bundlePath, "torch-extensions", py, script)
			for _, r := range res {
				if !slices.Equal(r.Result, want) {
					t.Errorf("rank %d: op result %v, want %v", r.Rank, r.Result, want)
				}
				if len(r.RanCommands) > 0 || !r.NoWork {
					t.Errorf("rank %d: ninja rebuilt (%q, no work to do: %v)", r.Rank, r.RanCommands, r.NoWork)
				}
				if !strings.HasPrefix(r.SO, dest) || !strings.HasPrefix(r.ModuleFile, dest) {
					t.Errorf("rank %d imported %s (%s), not the loaded copy under %s", r.Rank, r.ModuleFile, r.SO, dest)
				}
				if r.SOMtimeNS != cold.SOMtimeNS {
					t.Errorf("rank %d: the .so's mtime is %d, warmed %d", r.Rank, r.SOMtimeNS, cold.SOMtimeNS)
				}
			}
			checkUnwritten(t, wrote)
		})
	}
}
