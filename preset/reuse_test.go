package preset

import (
	"encoding/binary"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kbundle/kbundle/bundle"
)

func presetsOf(t *testing.T, names ...string) []*Preset {
	t.Helper()
	var out []*Preset
	for _, n := range names {
		p, err := Lookup(n)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func TestMisses(t *testing.T) {
	for _, tc := range []struct {
		name            string
		presets         []string
		recorded, local map[string]string
		want            []string
	}{
		{"triton version", []string{"triton"},
			map[string]string{bundle.MetaTriton: "3.6.0"}, map[string]string{bundle.MetaTriton: "3.5.1"},
			[]string{"warmed with triton 3.6.0, here 3.5.1: Triton will recompile every kernel (its key starts with the Triton version and a hash of Triton's sources)"}},
		{"inductor includes triton: one line, both effects", []string{"inductor"},
			map[string]string{bundle.MetaTriton: "3.6.0"}, map[string]string{bundle.MetaTriton: "3.5.1"},
			[]string{"warmed with triton 3.6.0, here 3.5.1: Triton will recompile every kernel (its key starts with the Triton version and a hash of Triton's sources); Inductor will miss every graph (its system key holds triton_key())"}},
		{"a driver difference alone misses nothing for Triton", []string{"triton"},
			map[string]string{bundle.MetaGPUDriver: "550.54", bundle.MetaGPUCompute: "9.0"}, map[string]string{bundle.MetaGPUDriver: "560.35", bundle.MetaGPUCompute: "9.0"}, nil},
		{"but it does for the CUDA driver's cache", []string{"cuda"},
			map[string]string{bundle.MetaGPUDriver: "550.54"}, map[string]string{bundle.MetaGPUDriver: "560.35"},
			[]string{"warmed with GPU driver 550.54, here 560.35: the CUDA driver will compile every PTX kernel again (a driver upgrade invalidates its cache)"}},
		{"python patch: not Numba's", []string{"numba"},
			map[string]string{bundle.MetaPython: "3.11.2"}, map[string]string{bundle.MetaPython: "3.11.9"}, nil},
		{"python patch: PyOpenCL's", []string{"pyopencl"},
			map[string]string{bundle.MetaPython: "3.11.2"}, map[string]string{bundle.MetaPython: "3.11.9"},
			[]string{"warmed with Python 3.11.2, here 3.11.9: PyOpenCL will rebuild every program (its cache directory is named after the full Python version)"}},
		{"python minor: Numba's", []string{"numba"},
			map[string]string{bundle.MetaPython: "3.11.2"}, map[string]string{bundle.MetaPython: "3.12.1"},
			[]string{"warmed with Python 3.11.2, here 3.12.1: Numba will recompile every function (its cache files are named per Python X.Y)"}},
		{"flashinfer version names its workspace", []string{"flashinfer"},
			map[string]string{bundle.MetaFlashInfer: "0.6.1"}, map[string]string{bundle.MetaFlashInfer: "0.6.2"},
			[]string{"warmed with flashinfer 0.6.1, here 0.6.2: FlashInfer will build every module again (its version names the workspace directory)"}},
		{"a C++ extension rebuilds under another torch", []string{"torch-extensions"},
			map[string]string{bundle.MetaTorch: "2.15.0"}, map[string]string{bundle.MetaTorch: "2.16.0"},
			[]string{"warmed with torch 2.15.0, here 2.16.0: C++ extensions will rebuild (another torch's headers, listed in .ninja_deps, are newer than the objects)"}},
		{"sglang: one line for the GPU, every sub-cache", []string{"sglang"},
			map[string]string{bundle.MetaGPUCompute: "9.0"}, map[string]string{bundle.MetaGPUCompute: "10.0"},
			[]string{"warmed with GPU compute capability 9.0, here 10.0: SGLang's Triton, FlashInfer and DeepGEMM kernels will compile again (their keys hold the architecture)"}},
		{"vllm's version is recorded, not compared", []string{"vllm"},
			map[string]string{bundle.MetaVLLM: "0.11.0"}, map[string]string{bundle.MetaVLLM: "0.12.0"}, nil},
		{"llvmlite is recorded, not compared", []string{"numba"},
			map[string]string{bundle.MetaLLVMLite: "0.43.0"}, map[string]string{bundle.MetaLLVMLite: "0.44.0"}, nil},
		{"unknown here is no difference", []string{"triton"},
			map[string]string{bundle.MetaTriton: "3.6.0", bundle.MetaGPUCompute: "9.0"}, map[string]string{}, nil},
		{"cpu flags both ways for numba, mitigations ignored", []string{"numba"},
			map[string]string{bundle.MetaCPUFlags: "avx2 avx512f fma md_clear sse2"}, map[string]string{bundle.MetaCPUFlags: "amx_tile avx2 fma sse2"},
			[]string{"this node's CPU lacks avx512f and has amx_tile, unlike the warm-up's: Numba will recompile every function (its codegen tuple holds the host CPU's name and features)"}},
		{"extra cpu flags: not JAX's", []string{"jax"},
			map[string]string{bundle.MetaCPUFlags: "avx2 sse2"}, map[string]string{bundle.MetaCPUFlags: "avx2 avx512f sse2"}, nil},
		{"lacking flags on a GPU warm-up: not JAX's", []string{"jax"},
			map[string]string{bundle.MetaCPUFlags: "avx2 avx512f", bundle.MetaGPUModel: "H100"}, map[string]string{bundle.MetaCPUFlags: "avx2", bundle.MetaGPUModel: "H100"}, nil},
		{"vector ISA for inductor", []string{"inductor"},
			map[string]string{bundle.MetaCPUFlags: "avx2 avx512bw avx512dq avx512f avx512vl fma"}, map[string]string{bundle.MetaCPUFlags: "avx2 avx512f fma"},
			[]string{"warmed on a CPU with vector ISA avx512, here avx2: Inductor will recompile its C++ kernels (its keys hold the vector ISA it picks)"}},
		{"gpu model and compute capability", []string{"inductor"},
			map[string]string{bundle.MetaGPUModel: "NVIDIA A100", bundle.MetaGPUCompute: "8.0"}, map[string]string{bundle.MetaGPUModel: "NVIDIA H100", bundle.MetaGPUCompute: "9.0"},
			[]string{"warmed with GPU compute capability 8.0, here 9.0: Triton will recompile every kernel (its key holds the target architecture)",
				"warmed with GPU NVIDIA A100, here NVIDIA H100: Inductor will miss every graph (its system key holds the GPU's name)"}},
		{"no preset: any difference may miss, the driver not", nil,
			map[string]string{bundle.MetaCPUModel: "x", bundle.MetaGPUDriver: "1"}, map[string]string{bundle.MetaCPUModel: "y", bundle.MetaGPUDriver: "2"},
			[]string{"warmed with CPU x, here y: compiled kernels may miss"}},
		{"tack has no rules of its own: no preset's", []string{"tack"},
			map[string]string{bundle.MetaGPUModel: "A"}, map[string]string{bundle.MetaGPUModel: "B"},
			[]string{"warmed with GPU A, here B: compiled kernels may miss"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, m := range Misses(presetsOf(t, tc.presets...), tc.recorded, tc.local) {
				got = append(got, m.String())
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("Misses:\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}

func TestToolchainKeys(t *testing.T) {
	got := ToolchainKeys(presetsOf(t, "inductor"))
	want := []string{bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton, bundle.MetaCXX,
		bundle.MetaCXXVersion, bundle.MetaCUDARuntime, bundle.MetaROCm}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("inductor records %v, want %v", got, want)
	}
	if got := ToolchainKeys(presetsOf(t, "pocl")); len(got) != 0 {
		t.Errorf("pocl records %v", got)
	}
	if got := ToolchainKeys(nil); len(got) != len(toolchainKeys) {
		t.Errorf("no preset records %v", got)
	}
	meta := map[string]string{bundle.MetaTriton: "3", bundle.MetaLLVMLite: "1", bundle.MetaGPUModel: "A"}
	if got := CompareKeys(presetsOf(t, "triton", "numba"), meta); !reflect.DeepEqual(got, []string{bundle.MetaTriton}) {
		t.Errorf("CompareKeys = %v", got)
	}
	// Every rule's key is recorded for its preset, or is the host's.
	for _, r := range reuseRules {
		if r.Preset == "" || !IsToolchainKey(r.Key) {
			continue
		}
		if ks := ToolchainKeys(presetsOf(t, r.Preset)); !strings.Contains(strings.Join(ks, " "), r.Key) {
			t.Errorf("preset %s compares %s but does not record it", r.Preset, r.Key)
		}
	}
}

// TestReuseRulesDocumented: docs/presets.md holds the rule table as
// ReuseTable writes it (KBUNDLE_UPDATE_DOCS=1 rewrites it).
func TestReuseRulesDocumented(t *testing.T) {
	const begin, end = "<!-- reuse-rules: preset.ReuseTable, kept by TestReuseRulesDocumented -->\n", "<!-- end reuse-rules -->"
	p := filepath.Join("..", "docs", "presets.md")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	i, j := strings.Index(doc, begin), strings.Index(doc, end)
	if i < 0 || j < i {
		t.Fatalf("docs/presets.md has no %q ... %q block", begin, end)
	}
	want := doc[:i+len(begin)] + ReuseTable() + doc[j:]
	if doc == want {
		return
	}
	if os.Getenv("KBUNDLE_UPDATE_DOCS") == "1" {
		if err := os.WriteFile(p, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/presets.md's rule table differs from preset.ReuseTable(); run KBUNDLE_UPDATE_DOCS=1 go test ./preset -run TestReuseRulesDocumented")
}

func TestParseGPUArch(t *testing.T) {
	for in, want := range map[string]string{"90": "cuda:90", "sm_90": "cuda:90", "sm90": "cuda:90", "sm_90a": "cuda:90",
		"9.0": "cuda:90", "8.6": "cuda:86", "12.0": "cuda:120", "cuda:80": "cuda:80", "compute_75": "cuda:75",
		"gfx90a": "hip:gfx90a", "HIP:gfx942": "hip:gfx942", "all": "all", " ALL ": "all"} {
		if got, err := ParseGPUArch(in); err != nil || got != want {
			t.Errorf("ParseGPUArch(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"", "9", "h100", "sm_", "cuda:", "gfx"} {
		if got, err := ParseGPUArch(in); err == nil {
			t.Errorf("ParseGPUArch(%q) = %q, want an error", in, got)
		}
	}
	if GPUArchOf("9.0") != "cuda:90" || GPUArchOf("") != "" || GPUArchOf("[N/A]") != "" {
		t.Error("GPUArchOf")
	}
}

// cubin is a CuPy cache file: a hex digest, then a 64-bit CUDA ELF header
// for sm, in the layout of ABI version abi.
func cubin(sm uint32, abi byte) []byte {
	h := make([]byte, 64)
	copy(h, "\x7fELF")
	h[4], h[5], h[7], h[8] = 2, 1, 0x33, abi
	binary.LittleEndian.PutUint16(h[18:], emCUDA)
	flags := sm | 0x500 // texture and address mode bits, pre-Blackwell
	if abi >= elfABICUDAV2 {
		flags = sm<<8 | 0x04
	}
	binary.LittleEndian.PutUint32(h[48:], flags)
	return append([]byte(strings.Repeat("0123456789abcdef", 2)), append(h, "body"...)...)
}

func TestGPUTargets(t *testing.T) {
	h80, h90, hbad, hold := strings.Repeat("A", 52), strings.Repeat("B", 52), strings.Repeat("C", 52), strings.Repeat("D", 52)
	files := map[string][]byte{
		"triton/" + h80 + "/k.json":            []byte(`{"hash": "x", "target": {"backend": "cuda", "arch": 80, "warp_size": 32}, "num_warps": 4}`),
		"triton/" + h80 + "/__grp__k.json":     []byte(`{"child_paths": {}}`),
		"triton/" + h80 + "/k.cubin":           []byte("\x7fELF..."),
		"triton/" + h90 + "/__grp__k.json":     []byte(`{"child_paths": {}}`),
		"triton/" + h90 + "/k.json":            []byte(`{"target": {"backend": "cuda", "arch": 90}}`),
		"triton/" + hbad + "/k.json":           []byte(`not json`),
		"triton/" + hold + "/k.json":           []byte(`{"num_warps": 4}`),
		"inductor/triton/0/" + h80 + "/x.json": []byte(`{"target": {"backend": "hip", "arch": "gfx90a:sramecc+:xnack-"}}`),
		"cupy/0123_2.cubin":                    cubin(86, 7),
		"cupy/4567.cubin":                      cubin(100, 8),
		"cupy/junk.cubin":                      []byte("no elf here"),
		"numba/f.nbi":                          []byte("x"),
	}
	var names []string
	for n := range files {
		names = append(names, n)
	}
	read := 0
	got := GPUTargets(names, func(n string) (io.ReadCloser, error) {
		read++
		return io.NopCloser(strings.NewReader(string(files[n]))), nil
	})
	want := map[string]string{
		"triton/" + h80 + "/": "cuda:80", "triton/" + h90 + "/": "cuda:90", "inductor/triton/0/" + h80 + "/": "hip:gfx90a",
		"cupy/0123_2.cubin": "cuda:86", "cupy/4567.cubin": "cuda:100",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GPUTargets = %v\nwant %v", got, want)
	}
	if read > 8 {
		t.Errorf("read %d files: the group files, cubins of Triton and other caches need not be read", read)
	}
	if !HasGPUUnits([]string{"triton/" + h80 + "/k.json"}) || !HasGPUUnits([]string{"cuda/sm_80/x"}) || HasGPUUnits([]string{"numba/f.nbi", "triton/short/x", "torch_extensions/kb_op/kb_op.so"}) {
		t.Error("HasGPUUnits")
	}

	skip := GPUFilter(got, "cuda:90")
	for name, want := range map[string]bool{
		"triton/" + h80: true, "triton/" + h80 + "/k.cubin": true, "triton/" + h90: false, "triton/" + h90 + "/k.json": false,
		"triton/" + hbad + "/k.json": false, "cupy/0123_2.cubin": true, "cupy/junk.cubin": false, "numba/f.nbi": false,
		"cuda/sm_80": true, "cuda/sm_90/k.cubin": false, "x/k.sm_80.cubin": true, "x/k.sm_90.cubin": false,
		"x/k.sm_80.ptx": false, "triton": false,
	} {
		if skip(name) != want {
			t.Errorf("skip(%q) = %v", name, !want)
		}
	}
}
