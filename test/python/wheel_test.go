package pythontest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/internal/testutil"
)

// wheelRuntimes are the MPIs the installed wheel runs under: Debian's
// Open MPI 4.1, PyPI's MPICH 5.0.2 and PyPI's Intel MPI 2021.19.0
// (.venv-mpirt/mpich5 and impi, used as a site's MPI module would be:
// their lib first on LD_LIBRARY_PATH, with mpi4py pointed at its
// libmpi.so.12), with the wheel's library and build for each ABI: Intel
// MPI's is MPICH's.
var wheelRuntimes = []struct {
	name, family string
	env          []string
}{
	{"openmpi4", "openmpi", nil},
	{"mpich5", "mpich", []string{"MPI4PY_LIBMPI=libmpi.so.12"}},
	{"impi", "mpich", []string{"MPI4PY_LIBMPI=libmpi.so.12"}},
}

// TestWheel: the wheel of `make wheel` installs with pip into a fresh
// virtual environment of Debian's python3 on a PATH without Go, offline
// (its dependency mpi4py from .venv-wheel/wheelhouse, which `make test`
// fills with scripts/dev/wheel.sh deps), and works there: `python -m
// kbundle version`, the `kbundle` console script and kbundle.__version__
// give the wheel's version; under each of wheelRuntimes, 2 ranks of
// load_bundle load a bundle with the wheel's library for that MPI's ABI
// (as mpi4py reports it: kbundle._lib.abi), and
// the console script's front runs the wheel's build for it (`kbundle
// version`, `kbundle load`). KBUNDLE_TEST_WHEEL_FILE names a wheel built
// before instead of running `make wheel`.
func TestWheel(t *testing.T) {
	root := testutil.RepoRoot()
	house := filepath.Join(root, ".venv-wheel", "wheelhouse")
	if m, _ := filepath.Glob(filepath.Join(house, "mpi4py-*.whl")); len(m) == 0 {
		msg := "no mpi4py wheel in .venv-wheel/wheelhouse: run scripts/dev/wheel.sh deps"
		if testutil.Required("WHEEL") {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	for _, w := range wheelRuntimes {
		testutil.NeedRuntime(t, testutil.RuntimeByName(w.name))
	}
	whl := builtWheel(t)
	version, _, _ := strings.Cut(strings.TrimPrefix(filepath.Base(whl), "kbundle-"), "-py3-none-")
	if !strings.HasSuffix(whl, "-py3-none-manylinux_2_28_x86_64.whl") || version == "" {
		t.Fatalf("%s: not kbundle-VERSION-py3-none-manylinux_2_28_x86_64.whl", whl)
	}

	// A PATH without Go: every folder that holds a go program is left out.
	var dirs []string
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "go")); err != nil {
			dirs = append(dirs, d)
		}
	}
	env := []string{"PATH=" + strings.Join(dirs, string(os.PathListSeparator)), "PYTHONPATH=", "VIRTUAL_ENV=",
		"PYTHONDONTWRITEBYTECODE=1", "KBUNDLE_LIBRARY="}
	if _, _, code := testutil.Run(t, env, "sh", "-c", "command -v go"); code == 0 {
		t.Fatal("go is still on the stripped PATH")
	}
	venv := filepath.Join(t.TempDir(), "venv")
	py := filepath.Join(venv, "bin", "python")
	step := func(what string, argv ...string) string {
		t.Helper()
		start := time.Now()
		so, se, code := testutil.Run(t, env, argv...)
		if code != 0 {
			t.Fatalf("%s: %v: exit %d\n%s%s", what, argv, code, so, se)
		}
		t.Logf("%s: %v", what, time.Since(start).Round(time.Millisecond))
		return so
	}
	step("venv", "/usr/bin/python3", "-m", "venv", venv)
	step("pip install", py, "-m", "pip", "install", "--quiet", "--no-index", "--find-links", house,
		"--no-cache-dir", "--disable-pip-version-check", whl)

	want := "kbundle " + version + " ("
	for _, argv := range [][]string{{py, "-m", "kbundle", "version"}, {filepath.Join(venv, "bin", "kbundle"), "version"}} {
		out := step("version", argv...)
		if !strings.HasPrefix(out, want) || !strings.Contains(out, "\nabi: none ") {
			t.Errorf("%v without a launcher:\n%s\nwant %q… and the no-MPI build", argv, out, want)
		}
	}
	if got := strings.TrimSpace(step("__version__", py, "-c", "import kbundle; print(kbundle.__version__)")); got != version {
		t.Errorf("kbundle.__version__ = %q, the wheel's version %q", got, version)
	}

	fx := fixtureMap(fixtures(t))
	bundle, work := fx["KBUNDLE_PYTEST_BUNDLE"], fx["KBUNDLE_PYTEST_WORK"]
	prog := filepath.Join(root, "test", "python", "wheel_prog.py")
	for _, w := range wheelRuntimes {
		t.Run(w.name, func(t *testing.T) {
			rt := testutil.RuntimeByName(w.name)
			env := append(append([]string{}, env...), w.env...)
			launch := func(argv ...string) string {
				t.Helper()
				start := time.Now()
				so, se, code := testutil.RunRuntime(t, rt, 2, env, argv...)
				if code != 0 {
					t.Fatalf("%s -np 2 %v: exit %d\nstdout:\n%s\nstderr:\n%s", rt.Launcher(), argv, code, so, se)
				}
				t.Logf("-np 2 %s: %v", filepath.Base(argv[len(argv)-1]), time.Since(start).Round(time.Millisecond))
				return so
			}

			// load_bundle with the wheel's library for this MPI.
			lib := filepath.Join("kbundle", "lib", "libkbundle-"+w.family+".so")
			out := launch(py, prog, bundle, filepath.Join(work, w.name+"-py"))
			ranks := map[int]bool{}
			for _, r := range progLines(t, out) {
				ranks[r.Rank] = true
				switch {
				case !r.OK || r.Size != 2 || r.Top != "top":
					t.Errorf("rank %d: ok %v, size %d, top.txt %q", r.Rank, r.OK, r.Size, r.Top)
				case !strings.HasPrefix(r.Library, venv+"/") || !strings.HasSuffix(r.Library, lib) || r.ABI != w.family:
					t.Errorf("rank %d loaded %s for ABI %q, not the wheel's %s", r.Rank, r.Library, r.ABI, lib)
				case !strings.HasPrefix(r.Package, venv+"/") || r.Version != version:
					t.Errorf("rank %d: package %s version %s, not the wheel's", r.Rank, r.Package, r.Version)
				case !strings.HasPrefix(strings.Join(strings.Fields(r.MPI), " "), rt.Library):
					t.Errorf("rank %d: mpi4py runs on %q, not %s", r.Rank, r.MPI, rt.Library)
				}
			}
			if len(ranks) != 2 {
				t.Errorf("ranks %v reported, want 0 and 1:\n%s", ranks, out)
			}

			// The CLI: the front runs the wheel's build for this MPI.
			kb := filepath.Join(venv, "bin", "kbundle")
			out = launch(kb, "version")
			if n := strings.Count(out, "abi: "+w.family+" "); n != 2 || strings.Count(out, "mpi: "+rt.Library) != 2 ||
				strings.Count(out, want) != 2 {
				t.Errorf("kbundle version on 2 ranks: want %q, mpi: %s and abi: %s twice:\n%s", want, rt.Library, w.family, out)
			}
			dest := filepath.Join(work, w.name+"-cli")
			launch(kb, "load", "--bundle", bundle, "--to", dest)
			if b, err := os.ReadFile(filepath.Join(dest, "top.txt")); err != nil || string(b) != "top" {
				t.Errorf("kbundle load: top.txt %q, %v", b, err)
			}
		})
	}
}

// progLine is what wheel_prog.py prints on each rank.
type progLine struct {
	Rank, Size            int
	OK                    bool
	Top, Library, Package string
	Version, MPI, ABI     string
}

// progLines decodes wheel_prog.py's output: one JSON object per rank (the
// launcher may join two ranks' lines).
func progLines(t *testing.T, out string) []progLine {
	t.Helper()
	var lines []progLine
	dec := json.NewDecoder(strings.NewReader(out))
	for dec.More() {
		var r progLine
		if err := dec.Decode(&r); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		lines = append(lines, r)
	}
	return lines
}

// builtWheel is $KBUNDLE_TEST_WHEEL_FILE, or the wheel `make wheel` builds
// (its last line of output).
func builtWheel(t *testing.T) string {
	t.Helper()
	if w := os.Getenv("KBUNDLE_TEST_WHEEL_FILE"); w != "" {
		return w
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "make", "--no-print-directory", "wheel")
	cmd.Dir = testutil.RepoRoot()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("make wheel: %v\n%s%s", err, out, stderr.String())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	whl := lines[len(lines)-1]
	if _, err := os.Stat(whl); err != nil {
		t.Fatalf("make wheel: its last line %q is not the wheel: %v\n%s", whl, err, out)
	}
	t.Logf("make wheel: %s in %v", filepath.Base(whl), time.Since(start).Round(time.Millisecond))
	return whl
}
