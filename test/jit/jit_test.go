package jit

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/internal/testutil"
	"github.com/kbundle/kbundle/preset"
	"github.com/kbundle/kbundle/warmup"
)

// python is Debian's interpreter, where python3-numba and python3-pyopencl
// are installed (a pyenv or venv python3 on PATH would not see them).
const python = "/usr/bin/python3"

const np = 4

// fakeLauncher is what a warm-up started inside a job would inherit; the
// workloads print rank -1 only if kbundle warm removed it.
var fakeLauncher = []string{
	"OMPI_COMM_WORLD_RANK=5", "OMPI_COMM_WORLD_SIZE=8", "PMI_RANK=5", "PMI_SIZE=8",
	"SLURM_PROCID=5", "SLURM_STEP_ID=0", "SLURM_STEP_NUM_TASKS=8",
}

// needPython skips (or fails under KBUNDLE_TEST_JIT=1) unless Debian's
// python3 can import the modules.
func needPython(t *testing.T, pkgs string, modules ...string) {
	t.Helper()
	args := []string{"-c", "import " + strings.Join(modules, ", ")}
	if out, err := exec.Command(python, args...).CombinedOutput(); err != nil {
		msg := python + " cannot import " + strings.Join(modules, ", ") + " (apt-get install " + pkgs + "): " + strings.TrimSpace(string(out))
		if testutil.Required("JIT") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// workload copies a test script, with the helpers it imports
// (testdata/_common.py), to a fresh directory: its absolute path and
// mtime stay fixed from the warm-up to the production run, as Numba
// requires.
func workload(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	for _, f := range []string{"_common.py", name} {
		b, err := os.ReadFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, name)
}

// jsonLines decodes every line of out that is a JSON object.
func jsonLines[T any](t *testing.T, out string) []T {
	t.Helper()
	var res []T
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(line, "{") {
			continue
		}
		var v T
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatalf("bad result line %q: %v", line, err)
		}
		res = append(res, v)
	}
	return res
}

// warm runs `kbundle warm --preset P --pack` on script with a fake
// launcher environment and returns the bundle, the cache dir and the
// workload's output.
func warm(t *testing.T, preset, script string) (bundlePath, cacheDir, stdout string) {
	t.Helper()
	bundlePath, cacheDir, stdout, _ = warmArgs(t, preset, nil, python, script)
	return bundlePath, cacheDir, stdout
}

// warmArgs runs `kbundle warm --preset P --pack FLAGS -- ARGV...` with a
// fake launcher environment; it fails the test unless kbundle exits 0.
func warmArgs(t *testing.T, preset string, flags []string, argv ...string) (bundlePath, cacheDir, stdout, stderr string) {
	t.Helper()
	kb := testutil.Kbundle(t, testutil.NoMPI)
	cacheDir = filepath.Join(t.TempDir(), "warm-cache")
	args := append([]string{kb, "warm", "--dir", cacheDir, "--preset", preset, "--pack"}, flags...)
	stdout, stderr, code := testutil.Run(t, fakeLauncher, append(append(args, "--"), argv...)...)
	if code != 0 {
		t.Fatalf("kbundle warm: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	if strings.Contains(stderr, "added nothing") {
		t.Fatalf("warm-up added nothing:\n%s", stderr)
	}
	t.Logf("warm-up report:\n%s", stderr)
	return filepath.Join(cacheDir, "cache.kbundle"), cacheDir, stdout, stderr
}

// load runs `mpirun -np 4 kbundle load --preset P` and returns the
// destination and the variables it printed (parsed from export lines).
func load(t *testing.T, v testutil.Variant, bundlePath, preset string) (dest string, env []string) {
	t.Helper()
	return loadN(t, v, np, bundlePath, preset)
}

// loadN is load with n ranks.
func loadN(t *testing.T, v testutil.Variant, np int, bundlePath, name string) (dest string, env []string) {
	t.Helper()
	kb := testutil.Kbundle(t, v)
	if _, _, code := testutil.Run(t, nil, kb, "load", "--help"); code != 0 {
		msg := "kbundle load is not available in this build (issue 4)"
		if testutil.Required("JIT") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dest = filepath.Join(t.TempDir(), "loaded")
	stdout, stderr, code := testutil.RunMPI(t, v, np, nil,
		kb, "load", "--bundle", bundlePath, "--to", dest, "--preset", name)
	if code != 0 {
		t.Fatalf("%s kbundle load: exit %d\nstdout:\n%s\nstderr:\n%s", testutil.Describe(v, np), code, stdout, stderr)
	}
	t.Logf("load (%s):\n%s%s", testutil.Describe(v, np), stdout, stderr)
	env = parseExports(stdout)
	p, err := preset.Lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	want := p.Env(dest)
	if len(env) == 0 {
		t.Errorf("kbundle load --preset %s printed no export lines; want %q", name, want)
		env = want
	}
	for _, kv := range want {
		if !slices.Contains(env, kv) {
			t.Errorf("kbundle load --preset %s did not print %s (printed %q)", name, kv, env)
		}
	}
	return dest, env
}

// parseExports reads `export NAME=VALUE` lines (VALUE bare or single
// quoted, as a POSIX shell reads them).
func parseExports(out string) []string {
	var env []string
	for _, line := range strings.Split(out, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "export ")
		if !ok {
			continue
		}
		name, val, ok := strings.Cut(rest, "=")
		if !ok {
			continue
		}
		env = append(env, name+"="+unquote(val))
	}
	return env
}

func unquote(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		if s[0] == '\'' {
			end := strings.IndexByte(s[1:], '\'')
			if end < 0 {
				b.WriteString(s[1:])
				break
			}
			b.WriteString(s[1 : 1+end])
			s = s[end+2:]
			continue
		}
		if s[0] == '\\' && len(s) > 1 {
			b.WriteByte(s[1])
			s = s[2:]
			continue
		}
		b.WriteByte(s[0])
		s = s[1:]
	}
	return b.String()
}

// checkRanksN checks that exactly ranks 0..n-1 reported.
func checkRanksN(t *testing.T, ranks []int, n int) {
	t.Helper()
	slices.Sort(ranks)
	want := make([]int, n)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(ranks, want) {
		t.Errorf("ranks that reported: %v, want 0..%d", ranks, n-1)
	}
}

// ranked is a workload's result line, which names its rank.
type ranked interface{ rank() int }

// runLoaded loads bundlePath with the preset under v at n ranks, runs the
// workload (py script) on every rank with the variables the load printed,
// checks that it exits 0 and that exactly ranks 0..n-1 report, and returns
// the result lines, the workload's stderr, the destination and what the
// run changed in the loaded copy.
func runLoaded[T ranked](t *testing.T, v testutil.Variant, n int, bundlePath, preset, py, script string) (res []T, stderr, dest string, wrote *warmup.Delta) {
	t.Helper()
	dest, env := loadN(t, v, n, bundlePath, preset)
	before := snapshot(t, dest)
	stdout, stderr, code := testutil.RunMPI(t, v, n, env, py, script)
	if code != 0 {
		t.Fatalf("%s workload: exit %d\n%s\n%s", testutil.Describe(v, n), code, stdout, stderr)
	}
	res = jsonLines[T](t, stdout)
	var ranks []int
	for _, r := range res {
		ranks = append(ranks, r.rank())
	}
	checkRanksN(t, ranks, n)
	return res, stderr, dest, warmup.Diff(before, snapshot(t, dest))
}

// checkUnwritten fails the test when the run changed the loaded copy.
func checkUnwritten(t *testing.T, d *warmup.Delta) {
	t.Helper()
	if !d.Empty() {
		t.Errorf("the run wrote to the loaded cache: added %v changed %v", d.Added, d.Changed)
	}
}

func snapshot(t *testing.T, dir string) warmup.Snapshot {
	t.Helper()
	s, err := warmup.TakeSnapshot(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(s) == 0 {
		t.Fatalf("%s is empty", dir)
	}
	return s
}

type numbaResult struct {
	Rank      int      `json:"rank"`
	Overloads int      `json:"overloads"`
	Hits      int      `json:"hits"`
	Misses    int      `json:"misses"`
	Missed    []string `json:"missed"`
	CacheDir  string   `json:"cache_dir"`
}

// TestNumba: warm up once, then under each MPI every rank loads every
// overload of every function from the loaded copy (Numba's dispatcher
// stats: cache_hits for all, no cache_misses) and writes nothing.
func TestNumba(t *testing.T) {
	needPython(t, "python3-numba", "numba")
	script := workload(t, "numba_kernels.py")
	bundlePath, cacheDir, out := warm(t, "numba", script)
	cold := jsonLines[numbaResult](t, out)
	if len(cold) != 1 || cold[0].Misses != cold[0].Overloads || cold[0].Hits != 0 {
		t.Fatalf("warm-up did not compile every overload cold: %+v", cold)
	}
	if cold[0].Rank != -1 {
		t.Errorf("warm-up child saw a launcher rank %d: launcher variables were not removed", cold[0].Rank)
	}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			res, _, dest, wrote := runLoaded[numbaResult](t, v, np, bundlePath, "numba", python, script)
			for _, r := range res {
				if r.Hits != r.Overloads || r.Misses != 0 || r.Overloads != cold[0].Overloads {
					t.Errorf("rank %d: %d cache hits, %d misses (compiled: %v) of %d overloads; want all hits",
						r.Rank, r.Hits, r.Misses, r.Missed, r.Overloads)
				}
				if !strings.HasPrefix(r.CacheDir, dest) || strings.HasPrefix(r.CacheDir, cacheDir) {
					t.Errorf("rank %d used %q, not the loaded copy under %s", r.Rank, r.CacheDir, dest)
				}
			}
			checkUnwritten(t, wrote)
		})
	}
}

func (r numbaResult) rank() int { return r.Rank }

type openclResult struct {
	Rank            int    `json:"rank"`
	Programs        int    `json:"programs"`
	Hits            int    `json:"hits"`
	Misses          int    `json:"misses"`
	BuiltFromSource int    `json:"built_from_source"`
	Wrong           []int  `json:"wrong"`
	Error           string `json:"error"`
}

func (r openclResult) rank() int { return r.Rank }

// pocl bookkeeping that a cache hit legitimately writes: an empty
// last_accessed stamp per kernel directory and an empty temporary file per
// process. Anything else (or anything with content) is a rebuild.
func poclBookkeeping(c preset.Change) bool {
	base := filepath.Base(c.Path)
	return c.Size == 0 && strings.HasPrefix(c.Path, "pocl/") &&
		(base == "last_accessed" || strings.HasPrefix(base, "tempfile_"))
}

func checkNoRebuild(t *testing.T, d *warmup.Delta) {
	t.Helper()
	for _, c := range append(append([]preset.Change{}, d.Added...), d.Changed...) {
		if !poclBookkeeping(c) {
			t.Errorf("new cache content written (a kernel was rebuilt): %s (%d bytes)", c.Path, c.Size)
		}
	}
}

// TestPyOpenCL: the same with PyOpenCL on pocl: every rank finds every
// program in PyOpenCL's cache, none is built from source, and pocl writes
// no new compiled kernel into its cache.
func TestPyOpenCL(t *testing.T) {
	needPython(t, "python3-pyopencl pocl-opencl-icd", "pyopencl", "numpy")
	script := workload(t, "opencl_kernels.py")
	bundlePath, cacheDir, out := warm(t, "pyopencl", script)
	cold := jsonLines[openclResult](t, out)
	if len(cold) != 1 || cold[0].BuiltFromSource != cold[0].Programs || cold[0].Programs == 0 {
		t.Fatalf("warm-up did not build every program from source: %+v", cold)
	}
	if cold[0].Rank != -1 {
		t.Errorf("warm-up child saw a launcher rank %d: launcher variables were not removed", cold[0].Rank)
	}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			res, _, _, wrote := runLoaded[openclResult](t, v, np, bundlePath, "pyopencl", python, script)
			for _, r := range res {
				if r.Error != "" || len(r.Wrong) > 0 {
					t.Errorf("rank %d: error %q, wrong results for programs %v", r.Rank, r.Error, r.Wrong)
				}
				if r.Hits != r.Programs || r.Misses != 0 || r.BuiltFromSource != 0 {
					t.Errorf("rank %d: %d hits, %d misses, %d of %d programs built from source; want all from cache",
						r.Rank, r.Hits, r.Misses, r.BuiltFromSource, r.Programs)
				}
			}
			checkNoRebuild(t, wrote)
		})
	}
	t.Run("pyopencl cache alone", func(t *testing.T) { pyopenclCacheAlone(t, script, cacheDir) })
}

// pyopenclCacheAlone measures why the pyopencl preset includes pocl: with
// PyOpenCL's cache alone, PyOpenCL reports hits but pocl rebuilds every
// kernel into its own cache. (One process, no MPI.)
func pyopenclCacheAlone(t *testing.T, script, cacheDir string) {
	// A copy with PyOpenCL's cache only, pocl's left empty.
	dest := filepath.Join(t.TempDir(), "xdg-only")
	if err := os.CopyFS(filepath.Join(dest, "xdg"), os.DirFS(filepath.Join(cacheDir, "xdg"))); err != nil {
		t.Fatal(err)
	}
	p, _ := preset.Lookup("pyopencl")
	if err := preset.Prepare(dest, p); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := testutil.Run(t, p.Env(dest), python, script)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	r := jsonLines[openclResult](t, stdout)
	if len(r) != 1 || r[0].Hits != r[0].Programs {
		t.Fatalf("PyOpenCL's own cache should hit: %+v", r)
	}
	after, _ := warmup.TakeSnapshot(filepath.Join(dest, "pocl"))
	var content int
	for _, f := range after {
		if f.Size > 0 {
			content++
		}
	}
	if content == 0 {
		t.Errorf("pocl wrote no compiled kernels with an empty pocl cache: the claim that both caches must ship together no longer holds here")
	}
	t.Logf("with PyOpenCL's cache alone, pocl wrote %d compiled files", content)
}

// TestTritonRelocatedByLoad: a Triton-style cache (group files with
// absolute paths under the warm-up directory) packed and loaded under MPI
// with --preset triton comes out with every group path under DEST.
func TestTritonRelocatedByLoad(t *testing.T) {
	warmDir := filepath.Join(t.TempDir(), "warm")
	key := filepath.Join(warmDir, "triton", "KEY0")
	if err := os.MkdirAll(key, 0o700); err != nil {
		t.Fatal(err)
	}
	children := map[string]string{}
	for _, f := range []string{"k.cubin", "k.json", "k.ttir"} {
		os.WriteFile(filepath.Join(key, f), []byte("content of "+f), 0o600)
		children[f] = filepath.Join(key, f)
	}
	grp, _ := json.Marshal(map[string]any{"child_paths": children})
	os.WriteFile(filepath.Join(key, "__grp__k.json"), grp, 0o600)
	kb := testutil.Kbundle(t, testutil.NoMPI)
	bundlePath := filepath.Join(t.TempDir(), "triton.kbundle")
	if _, stderr, code := testutil.Run(t, nil, kb, "pack", "--dir", warmDir, "-o", bundlePath); code != 0 {
		t.Fatalf("pack: %s", stderr)
	}
	for _, v := range testutil.MPIVariants {
		t.Run(string(v), func(t *testing.T) {
			dest, env := load(t, v, bundlePath, "triton")
			if !slices.Contains(env, "TRITON_CACHE_DIR="+filepath.Join(dest, "triton")) {
				t.Errorf("env %q", env)
			}
			b, err := os.ReadFile(filepath.Join(dest, "triton", "KEY0", "__grp__k.json"))
			if err != nil {
				t.Fatal(err)
			}
			var doc struct {
				ChildPaths map[string]string `json:"child_paths"`
			}
			if err := json.Unmarshal(b, &doc); err != nil {
				t.Fatal(err)
			}
			if len(doc.ChildPaths) != 3 {
				t.Fatalf("group %s", b)
			}
			for name, p := range doc.ChildPaths {
				if want := filepath.Join(dest, "triton", "KEY0", name); p != want {
					t.Errorf("%s -> %s, want %s", name, p, want)
				}
			}
		})
	}
}
