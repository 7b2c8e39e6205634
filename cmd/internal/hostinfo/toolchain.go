package hostinfo

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/kbundle/kbundle/bundle"
)

// ErrNoPython says the interpreter asked for could not be run: Toolchain
// then says nothing of Python's packages.
var ErrNoPython = errors.New("cannot ask Python")

// distributions are the package names a Python key is read from, first
// found first used (importlib.metadata.version, which reads the
// dist-info's METADATA without importing the package).
var distributions = map[string][]string{
	bundle.MetaNumba:       {"numba"},
	bundle.MetaLLVMLite:    {"llvmlite"},
	bundle.MetaNumbaCUDA:   {"numba-cuda", "numba_cuda"},
	bundle.MetaJAX:         {"jax"},
	bundle.MetaJAXLib:      {"jaxlib"},
	bundle.MetaTorch:       {"torch"},
	bundle.MetaTriton:      {"triton", "pytorch-triton", "pytorch-triton-rocm", "triton-rocm"},
	bundle.MetaPyOpenCL:    {"pyopencl"},
	bundle.MetaCuPy:        {"cupy", "cupy-cuda13x", "cupy-cuda12x", "cupy-cuda11x", "cupy-rocm-6-0", "cupy-rocm-5-0"},
	bundle.MetaFlashInfer:  {"flashinfer-python", "flashinfer"},
	bundle.MetaDeepGEMM:    {"deep-gemm", "deep_gemm"},
	bundle.MetaTileLang:    {"tilelang"},
	bundle.MetaVLLM:        {"vllm"},
	bundle.MetaSGLang:      {"sglang"},
	bundle.MetaCUDARuntime: {"nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime"},
}

// ProbeScript defines probe(want): the Python version and the versions of
// the distributions named in want (key → names), and torch.version.cuda
// read from torch/version.py, all without importing a framework. Run as
// a program, it prints probe(json.loads(sys.argv[1])) as one JSON object;
// the Python package runs probe in its own interpreter instead (InProcess).
// It reads the versions as importlib.metadata.version does on Python 3.10
// and later, without importing it where sys.path holds only folders.
//
//go:embed probe.py
var ProbeScript string

// Timeouts of the probes: a Python on a cold network file system takes a
// while to start.
var (
	pythonTimeout   = 20 * time.Second
	compilerTimeout = 5 * time.Second
)

// Toolchain reads the toolchain keys asked (bundle.MetaPython and the
// others) on this machine: Python's with python (a path, or a name looked
// up in getenv's PATH; "" is python3) in one run that imports no
// framework, the C++ compiler Inductor runs ($CXX, else g++) with its
// --version, the CUDA runtime from the pip wheel Python finds, else a CUDA
// toolkit's version.json or libcudart's file name ($CUDA_HOME,
// $CUDA_PATH, /usr/local/cuda), ROCm from its .info/version ($ROCM_PATH,
// /opt/rocm). A key it cannot read is left out. The error, wrapping
// ErrNoPython, says why Python could not be asked; what else was read is
// returned with it. MetaPythonPath is the interpreter asked, absolute.
func Toolchain(python string, getenv func(string) string, keys []string) (map[string]string, error) {
	return toolchain(keys, func(py []string, out map[string]string) error {
		return askPython(context.Background(), python, getenv, py, out)
	}, getenv)
}

// toolchain is Toolchain with Python's keys read by ask.
func toolchain(keys []string, ask func(py []string, out map[string]string) error, getenv func(string) string) (map[string]string, error) {
	out := map[string]string{}
	var perr error
	var py []string
	for _, k := range keys {
		if pythonKey(k) {
			py = append(py, k)
		}
	}
	if len(py) > 0 {
		perr = ask(py, out)
	}
	for _, k := range keys {
		if _, done := out[k]; done {
			continue
		}
		switch k {
		case bundle.MetaCXX, bundle.MetaCXXVersion:
			name := strings.TrimSpace(getenv("CXX"))
			if name == "" {
				name = "g++"
			}
			if k == bundle.MetaCXX {
				out[k] = name
			} else if v := compilerVersion(name, getenv); v != "" {
				out[k] = v
			}
		case bundle.MetaCUDARuntime:
			if v := cudaRuntime(getenv); v != "" {
				out[k] = v
			}
		case bundle.MetaROCm:
			if v := rocmVersion(getenv); v != "" {
				out[k] = v
			}
		}
	}
	return out, perr
}

// pythonKey: a key the probe reads by asking Python.
func pythonKey(k string) bool {
	return k == bundle.MetaPython || k == bundle.MetaTorchCUDA || distributions[k] != nil
}

// askPython runs the probe with python for keys, into out; ctx ends it.
func askPython(ctx context.Context, python string, getenv func(string) string, keys []string, out map[string]string) error {
	if python == "" {
		python = "python3"
	}
	path, err := lookPath(python, getenv("PATH"))
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrNoPython, python, err)
	}
	arg := probeWant(keys)
	ctx, cancel := context.WithTimeout(ctx, pythonTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "-c", ProbeScript, string(arg))
	cmd.Env = environ(getenv)
	cmd.SysProcAttr = dieWithParent()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String())
		if i := strings.LastIndexByte(msg, '\n'); i >= 0 {
			msg = msg[i+1:]
		}
		if msg != "" {
			err = fmt.Errorf("%v: %s", err, msg)
		}
		return fmt.Errorf("%w: %s: %v", ErrNoPython, path, err)
	}
	if err := probeAnswer(b, keys, out); err != nil {
		return fmt.Errorf("%w: %s printed no versions: %v", ErrNoPython, path, err)
	}
	out[bundle.MetaPythonPath] = path
	return nil
}

// probeWant is the probe's argument for keys: key → distribution names.
func probeWant(keys []string) []byte {
	want := map[string][]string{}
	for _, k := range keys {
		if names := distributions[k]; names != nil {
			want[k] = names
		} else if k == bundle.MetaTorchCUDA {
			want[k] = []string{}
		}
	}
	arg, _ := json.Marshal(want)
	return arg
}

// probeAnswer copies the probe's answer b, for the keys asked, into out.
func probeAnswer(b []byte, keys []string, out map[string]string) error {
	var got map[string]string
	if err := json.Unmarshal(bytes.TrimSpace(b), &got); err != nil {
		return err
	}
	for k, v := range got {
		if slices.Contains(keys, k) && v != "" {
			out[k] = v
		}
	}
	return nil
}

// InProcess is Toolchain with Python's keys read by call, which runs
// ProbeScript's probe on want in the caller's own interpreter (python,
// its sys.executable): no child is started, so the Python front end's
// load pays no interpreter start (issue 31). call's error, or an answer
// that is not the probe's, is said as Toolchain says a Python it cannot
// run.
func InProcess(call func(script string, want []byte) ([]byte, error), python string, getenv func(string) string) func(keys []string) (map[string]string, error) {
	return func(keys []string) (map[string]string, error) {
		return toolchain(keys, func(py []string, out map[string]string) error {
			b, err := call(ProbeScript, probeWant(py))
			if err == nil {
				err = probeAnswer(b, py, out)
			}
			if err != nil {
				return fmt.Errorf("%w: %s (in process): %v", ErrNoPython, python, err)
			}
			out[bundle.MetaPythonPath] = python
			return nil
		}, getenv)
	}
}

// environ is the environment of a probe: getenv's PATH, HOME,
// PYTHONPATH and the virtual environment's variables over this
// process's own (the Python front end's getenv is the caller's
// os.environ).
func environ(getenv func(string) string) []string {
	env := os.Environ()
	for _, k := range []string{"PATH", "HOME", "PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "CONDA_PREFIX", "LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"} {
		if v := getenv(k); v != "" {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// lookPath finds name (a path, or a command name) in pathVar, as the
// shell would, skipping relative entries.
func lookPath(name, pathVar string) (string, error) {
	if strings.Contains(name, "/") {
		abs, err := filepath.Abs(name)
		if err != nil {
			return "", err
		}
		if fi, err := os.Stat(abs); err != nil {
			return "", err
		} else if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
			return "", fmt.Errorf("not an executable file")
		}
		return abs, nil
	}
	for _, dir := range filepath.SplitList(pathVar) {
		if !filepath.IsAbs(dir) {
			continue
		}
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode().Perm()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("not found in PATH")
}

// compilerVersion is the first line of name --version (name may hold
// arguments: "ccache g++").
func compilerVersion(name string, getenv func(string) string) string {
	argv := strings.Fields(name)
	path, err := lookPath(argv[0], getenv("PATH"))
	if err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), compilerTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, append(argv[1:], "--version")...)
	cmd.Env = append(environ(getenv), "LC_ALL=C")
	b, err := cmd.Output()
	if err != nil {
		return ""
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return strings.TrimSpace(line)
}

// cudaHomes are where a CUDA toolkit may be.
func cudaHomes(getenv func(string) string) []string {
	var out []string
	for _, d := range []string{getenv("CUDA_HOME"), getenv("CUDA_PATH"), "/usr/local/cuda"} {
		if d != "" && !slices.Contains(out, d) {
			out = append(out, d)
		}
	}
	return out
}

// cudaRuntime is the CUDA runtime's version from a toolkit: its
// version.json (cuda_cudart's, else the toolkit's) or the full name of
// libcudart.so.X.Y.Z.
func cudaRuntime(getenv func(string) string) string {
	for _, home := range cudaHomes(getenv) {
		if b, err := os.ReadFile(filepath.Join(home, "version.json")); err == nil {
			var v map[string]struct {
				Version string `json:"version"`
			}
			if json.Unmarshal(b, &v) == nil {
				for _, k := range []string{"cuda_cudart", "cuda"} {
					if s := v[k].Version; s != "" {
						return s
					}
				}
			}
		}
		for _, lib := range []string{"lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"} {
			ms, _ := filepath.Glob(filepath.Join(home, lib, "libcudart.so.*.*"))
			slices.Sort(ms)
			if len(ms) > 0 {
				return strings.TrimPrefix(filepath.Base(ms[len(ms)-1]), "libcudart.so.")
			}
		}
	}
	return ""
}

// rocmVersion is the first line of ROCm's .info/version.
func rocmVersion(getenv func(string) string) string {
	for _, d := range []string{getenv("ROCM_PATH"), "/opt/rocm"} {
		if d == "" {
			continue
		}
		f, err := os.Open(filepath.Join(d, ".info", "version"))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		line := ""
		if sc.Scan() {
			line = strings.TrimSpace(sc.Text())
		}
		f.Close()
		if line != "" {
			return line
		}
	}
	return ""
}
