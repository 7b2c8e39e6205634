package hostinfo

import (
	"archive/zip"
	"encoding/json"
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

func TestCollectHasOSAndArch(t *testing.T) {
	m := Collect()
	if m[osKey] != runtime.GOOS || m[archKey] != runtime.GOARCH {
		t.Fatalf("Collect() = %v", m)
	}
}

func TestCPUInfo(t *testing.T) {
	p := filepath.Join(t.TempDir(), "cpuinfo")
	os.WriteFile(p, []byte("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: sse2 avx2 fpu\n\nprocessor\t: 1\nmodel name\t: Other\n"), 0o644)
	model, flags := cpuinfo(p)
	if model != "Test CPU 9000" || flags != "avx2 fpu sse2" {
		t.Fatalf("cpuinfo = %q, %q", model, flags)
	}
}

// Toolchain reads versions without importing anything: a dist-info on
// PYTHONPATH, torch/version.py, $CXX --version, a CUDA toolkit's
// version.json, ROCm's .info/version; an interpreter that cannot run is
// said, the rest still read.
func TestToolchain(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	dir := t.TempDir()
	site := filepath.Join(dir, "site")
	os.MkdirAll(filepath.Join(site, "numba-0.99.1.dist-info"), 0o755)
	os.WriteFile(filepath.Join(site, "numba-0.99.1.dist-info", "METADATA"), []byte("Metadata-Version: 2.1\nName: numba\nVersion: 0.99.1\n"), 0o644)
	os.MkdirAll(filepath.Join(site, "torch"), 0o755)
	os.WriteFile(filepath.Join(site, "torch", "__init__.py"), []byte("raise ImportError('torch must not be imported')\n"), 0o644)
	os.WriteFile(filepath.Join(site, "torch", "version.py"), []byte("__version__ = '9.9.9'\ncuda: Optional[str] = '12.4'\nhip = None\n"), 0o644)
	cxx := filepath.Join(dir, "fakecc")
	os.WriteFile(cxx, []byte("#!/bin/sh\necho 'fakecc (Test) 1.2.3'\necho second line\n"), 0o755)
	cuda := filepath.Join(dir, "cuda")
	os.MkdirAll(cuda, 0o755)
	os.WriteFile(filepath.Join(cuda, "version.json"), []byte(`{"cuda": {"version": "12.4.1"}, "cuda_cudart": {"version": "12.4.127"}}`), 0o644)
	rocm := filepath.Join(dir, "rocm", ".info")
	os.MkdirAll(rocm, 0o755)
	os.WriteFile(filepath.Join(rocm, "version"), []byte("6.2.0-66\n"), 0o644)
	env := map[string]string{"PATH": os.Getenv("PATH"), "PYTHONPATH": site, "CXX": cxx, "CUDA_HOME": cuda, "ROCM_PATH": filepath.Dir(rocm)}
	getenv := func(k string) string { return env[k] }
	keys := []string{bundle.MetaPython, bundle.MetaNumba, bundle.MetaJAX, bundle.MetaTorchCUDA, bundle.MetaCXX, bundle.MetaCXXVersion, bundle.MetaCUDARuntime, bundle.MetaROCm}
	got, err := Toolchain("", getenv, keys)
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^3\.\d+\.\d+$`).MatchString(got[bundle.MetaPython]) || !filepath.IsAbs(got[bundle.MetaPythonPath]) {
		t.Errorf("python %q at %q", got[bundle.MetaPython], got[bundle.MetaPythonPath])
	}
	want := map[string]string{bundle.MetaNumba: "0.99.1", bundle.MetaTorchCUDA: "12.4", bundle.MetaCXX: cxx,
		bundle.MetaCXXVersion: "fakecc (Test) 1.2.3", bundle.MetaCUDARuntime: "12.4.127", bundle.MetaROCm: "6.2.0-66"}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %q, want %q", k, got[k], v)
		}
	}
	if _, ok := got[bundle.MetaJAX]; ok {
		t.Errorf("jax found: %q", got[bundle.MetaJAX])
	}
	got, err = Toolchain(filepath.Join(dir, "no-python"), getenv, keys)
	if !errors.Is(err, ErrNoPython) || got[bundle.MetaCXX] != cxx || got[bundle.MetaNumba] != "" {
		t.Errorf("no python: %v, %v", got, err)
	}
}

// A prefetched probe answers as Toolchain does, with only the keys
// asked; a probe no longer needed is killed by Stop, not waited out, and
// leaves no process behind.
func TestPrefetch(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	_, getenv, keys := numbaSite(t)
	want, werr := Toolchain("", getenv, keys)
	pf := StartPrefetch("", getenv)
	defer pf.Stop()
	got, err := pf.Toolchain(keys)
	if err != nil || werr != nil {
		t.Fatal(err, werr)
	}
	if !maps.Equal(got, want) {
		t.Errorf("prefetched %v, want %v", got, want)
	}
	if _, ok := got[bundle.MetaJAX]; ok {
		t.Errorf("a key not asked for: %v", got)
	}

	// A Python that hangs: Stop kills it at once.
	slow := filepath.Join(t.TempDir(), "python3")
	pidFile := filepath.Join(t.TempDir(), "pid")
	os.WriteFile(slow, []byte("#!/bin/sh\necho $$ > "+pidFile+"\nexec sleep 60\n"), 0o755)
	pf = StartPrefetch(slow, getenv)
	var pid []byte
	for i := 0; i < 500 && len(pid) == 0; i++ {
		time.Sleep(10 * time.Millisecond)
		pid, _ = os.ReadFile(pidFile)
	}
	start := time.Now()
	pf.Stop()
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if len(pid) > 0 {
		if _, err := os.Stat("/proc/" + strings.TrimSpace(string(pid))); err == nil {
			t.Errorf("probe %s still runs after Stop", strings.TrimSpace(string(pid)))
		}
	}
}

// InProcess reads what Toolchain reads, through the caller's call of
// ProbeScript's probe (here a python3 that imports the script and calls
// probe, as the Python package does in its own interpreter); a call that
// fails is ErrNoPython, with the other keys still read.
func TestInProcess(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	site, getenv, keys := numbaSite(t)
	want, err := Toolchain(py, getenv, keys)
	if err != nil {
		t.Fatal(err)
	}
	call := func(script string, arg []byte) ([]byte, error) {
		cmd := exec.Command(py, "-c", "import json, sys\nns = {'__name__': 'kbundle_probe'}\nexec(sys.argv[1], ns)\nprint(json.dumps(ns['probe'](json.loads(sys.argv[2]))))", script, string(arg))
		cmd.Env = append(os.Environ(), "PYTHONPATH="+site)
		return cmd.Output()
	}
	got, err := InProcess(call, py, getenv)(keys)
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("in process: %v, %v; want %v", got, err, want)
	}
	fail := func(string, []byte) ([]byte, error) { return nil, errors.New("boom") }
	got, err = InProcess(fail, py, getenv)(keys)
	if !errors.Is(err, ErrNoPython) || !strings.Contains(err.Error(), "boom") || got[bundle.MetaCXX] != "true" {
		t.Errorf("failing call: %v, %v", got, err)
	}
}

// numbaSite is a PYTHONPATH folder holding numba 0.99.1's dist-info, the
// environment that points at it (CXX=true), and the keys to ask.
func numbaSite(t *testing.T) (site string, getenv func(string) string, keys []string) {
	site = t.TempDir()
	os.MkdirAll(filepath.Join(site, "numba-0.99.1.dist-info"), 0o755)
	os.WriteFile(filepath.Join(site, "numba-0.99.1.dist-info", "METADATA"), []byte("Metadata-Version: 2.1\nName: numba\nVersion: 0.99.1\n"), 0o644)
	env := map[string]string{"PATH": os.Getenv("PATH"), "PYTHONPATH": site, "CXX": "true"}
	return site, func(k string) string { return env[k] }, []string{bundle.MetaPython, bundle.MetaNumba, bundle.MetaCXX}
}

// The probe reads every version importlib.metadata.version reads, on
// vectors (testdata/probe: names to normalise, a METADATA whose version
// differs from its folder's name, egg-info files and folders, a
// distribution shadowed by an earlier sys.path entry, one without a
// version, torch/version.py's cuda) and on every distribution this
// machine's python3 has; with a zip on sys.path it leaves the answer to
// importlib.metadata, which must agree too.
func TestProbeMatchesMetadata(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	abs, _ := filepath.Abs("testdata/probe")
	site1, site2 := filepath.Join(abs, "site1"), filepath.Join(abs, "site2")
	zipped := filepath.Join(t.TempDir(), "dists.zip")
	writeZip(t, zipped, map[string]string{"zipped-2.5.dist-info/METADATA": "Name: zipped\nVersion: 2.5\n"})
	script := filepath.Join(t.TempDir(), "probe.py")
	os.WriteFile(script, []byte(ProbeScript), 0o644)
	names := `["Foo.Bar", "foo-bar", "FOO_BAR", "mixed-case", "legacy", "legacydir", "only2", "noversion", "zipped", "nope", "numba"]`
	for _, tc := range []struct {
		path string
		want map[string]string // name → version; "" must be absent
	}{
		{site1 + ":" + site2, map[string]string{"Foo.Bar": "1.0", "foo-bar": "1.0", "mixed-case": "4.0.post1", "legacy": "3.1",
			"legacydir": "0.9", "only2": "5.0", "noversion": "", "nope": "", "zipped": "", "toolchain.torch_cuda": "12.4"}},
		{site2 + ":" + site1, map[string]string{"foo-bar": "9.9", "FOO_BAR": "9.9", "legacy": "7.0", "mixed-case": "4.0.post1"}},
		{site1 + ":" + filepath.Join(abs, "missing") + ":" + zipped, map[string]string{"zipped": "2.5", "Foo.Bar": "1.0", "nope": ""}},
		{"", nil}, // the machine's own distributions only
	} {
		cmd := exec.Command(py, "testdata/probe/reference.py", script, names)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+tc.path)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("PYTHONPATH=%s: %v", tc.path, err)
		}
		var res struct {
			Got  map[string]string
			Diff [][]any
		}
		if err := json.Unmarshal(out, &res); err != nil {
			t.Fatalf("PYTHONPATH=%s: %v: %s", tc.path, err, out)
		}
		for _, d := range res.Diff {
			t.Errorf("PYTHONPATH=%s: %v: the probe read %v, importlib.metadata %v", tc.path, d[0], d[1], d[2])
		}
		for n, v := range tc.want {
			if res.Got[n] != v {
				t.Errorf("PYTHONPATH=%s: %s = %q, want %q", tc.path, n, res.Got[n], v)
			}
		}
	}
}

func writeZip(t *testing.T, name string, files map[string]string) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	w := zip.NewWriter(f)
	for n, body := range files {
		fw, _ := w.Create(n)
		fw.Write([]byte(body))
	}
	if err := w.Close(); err != nil || f.Close() != nil {
		t.Fatal(err)
	}
}
