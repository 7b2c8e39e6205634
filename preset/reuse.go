package preset

import (
	"fmt"
	"slices"
	"strings"

	"github.com/kbundle/kbundle/bundle"
)

// A Comparison is how a rule compares a recorded value with this node's.
type Comparison int

const (
	// Exact: any difference.
	Exact Comparison = iota
	// MajorMinor: the first two dot-separated parts differ (Python 3.11
	// and 3.12, not 3.11.2 and 3.11.9).
	MajorMinor
	// ISA: the CPU's instruction-set flags differ, either way (a cache
	// keyed on the host's feature string misses on a newer CPU too).
	ISA
	// ISALacking: the warm-up's CPU had instruction-set flags this one
	// lacks.
	ISALacking
	// VecISA: the vector instruction set Inductor picks (amx, avx512,
	// avx2, sve, neon) differs.
	VecISA
)

// A ReuseRule says that a difference in one recorded key between the
// warm-up machine and the node a load runs on makes one preset's cache
// miss: the framework's own cache key holds it (Source says where). The
// rules are data: see ReuseRules and docs/presets.md, "What a load
// compares".
type ReuseRule struct {
	// Key is the bundle metadata key (bundle.Meta*).
	Key string
	// Preset is the preset whose cache misses; "" for the rules used when
	// no preset says which framework the cache is for.
	Preset  string
	Compare Comparison
	// CPUBackend: the rule holds only for a cache warmed without a GPU
	// (JAX's CPU backend).
	CPUBackend bool
	// Effect is what the framework does, after "warmed with X, here Y: ".
	Effect string
	// Source names the framework's code (or kbundle's measurement) that
	// puts the key in its cache key.
	Source string
}

// reuseRules, in the order a load reports its differences: the software
// first, then the GPU, then the CPU.
var reuseRules = []ReuseRule{
	{Key: bundle.MetaPython, Preset: "numba", Compare: MajorMinor,
		Effect: "Numba will recompile every function (its cache files are named per Python X.Y)",
		Source: "numba/core/caching.py, CacheImpl.get_filename_base (`%s-%s.py%d%d%s`)"},
	{Key: bundle.MetaPython, Preset: "pyopencl", Compare: Exact,
		Effect: "PyOpenCL will rebuild every program (its cache directory is named after the full Python version)",
		Source: "pyopencl/cache.py, `pyopencl-compiler-cache-v2-py` + sys.version_info"},
	{Key: bundle.MetaNumba, Preset: "numba", Compare: Exact,
		Effect: "Numba will recompile every function (each index starts with the Numba version)",
		Source: "numba/core/caching.py, IndexDataCacheFile._load_index (`version != self._version`, numba.__version__)"},
	{Key: bundle.MetaNumbaCUDA, Preset: "numba", Compare: Exact,
		Effect: "Numba's CUDA kernels will recompile (numba-cuda puts its version in every index key)",
		Source: "numba-cuda, numba/cuda/core/caching.py Cache._index_key (its test_cache_key_includes_numba_cuda)"},
	{Key: bundle.MetaJAXLib, Preset: "jax", Compare: Exact,
		Effect: "JAX will recompile every program (its cache key holds the jaxlib version)",
		Source: "jax/_src/cache_key.py, get(): \"jax_lib version\""},
	{Key: bundle.MetaTorch, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will miss every graph (its key holds torch_key(), a hash of torch's own sources)",
		Source: "torch/_inductor/codecache.py, FxGraphHashDetails.torch_version = torch_key()"},
	{Key: bundle.MetaTorch, Preset: "mega-cache", Compare: Exact,
		Effect: "the Mega-Cache blobs' FX graph entries will miss (their key holds torch_key(), a hash of torch's own sources)",
		Source: "torch/compiler/__init__.py, load_cache_artifacts → torch/_inductor/codecache.py, FxGraphHashDetails.torch_version"},
	{Key: bundle.MetaTorchCUDA, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will miss every graph (its system key holds torch.version.cuda)",
		Source: "torch/_inductor/codecache.py, CacheBase.get_system()"},
	{Key: bundle.MetaTriton, Preset: "triton", Compare: Exact,
		Effect: "Triton will recompile every kernel (its key starts with the Triton version and a hash of Triton's sources)",
		Source: "triton python/triton/compiler/compiler.py, compile(): key = f\"{triton_key()}-...\""},
	{Key: bundle.MetaTriton, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will miss every graph (its system key holds triton_key())",
		Source: "torch/_inductor/codecache.py, CacheBase.get_system()"},
	{Key: bundle.MetaPyOpenCL, Preset: "pyopencl", Compare: Exact,
		Effect: "PyOpenCL will rebuild every program (its key holds the PyOpenCL version)",
		Source: "pyopencl/cache.py, get_device_cache_id (pyopencl.version.VERSION)"},
	{Key: bundle.MetaCuPy, Preset: "cupy", Compare: Exact,
		Effect: "CuPy will recompile every kernel (its key holds a hash of CuPy's own headers)",
		Source: "cupy/cuda/compiler.py, _get_cupy_cache_key()"},
	{Key: bundle.MetaFlashInfer, Preset: "flashinfer", Compare: Exact,
		Effect: "FlashInfer will build every module again (its version names the workspace directory)",
		Source: "flashinfer/jit/env.py, _get_workspace_dir_name (FLASHINFER_CACHE_DIR/flashinfer_version/ARCHS)"},
	{Key: bundle.MetaFlashInfer, Preset: "sglang", Compare: Exact,
		Effect: "SGLang's FlashInfer modules will build again (FlashInfer's version names its workspace directory)",
		Source: "flashinfer/jit/env.py, _get_workspace_dir_name"},
	{Key: bundle.MetaTileLang, Preset: "tilelang", Compare: Exact,
		Effect: "TileLang will compile every kernel again (its version names the cache namespace and is in every key)",
		Source: "tilelang/cache/kernel_cache.py, KernelCache._get_cache_namespace and _get_base_key"},
	{Key: bundle.MetaTileLang, Preset: "sglang", Compare: Exact,
		Effect: "SGLang's TileLang kernels will compile again (TileLang's version is in every key)",
		Source: "tilelang/cache/kernel_cache.py, KernelCache._get_base_key"},
	{Key: bundle.MetaCXX, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will recompile its C++ kernels and miss their graphs (the compile command in its keys names the compiler; measured: CXX=c++ for g++ misses every graph)",
		Source: "torch/_inductor/codecache.py, CppCodeCache (the command line); measured in test/jit"},
	{Key: bundle.MetaCXXVersion, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will recompile its C++ kernels (its keys hold the compiler's version output)",
		Source: "torch/_inductor/cpp_builder.py, get_compiler_version_info()"},
	{Key: bundle.MetaTorch, Preset: "torch-extensions", Compare: Exact,
		Effect: "C++ extensions will rebuild (another torch's headers, listed in .ninja_deps, are newer than the objects)",
		Source: "torch/utils/cpp_extension.py, _write_ninja_file_to_build_library (torch's include paths in cflags; deps = gcc)"},
	{Key: bundle.MetaPython, Preset: "torch-extensions", Compare: MajorMinor,
		Effect: "C++ extensions will rebuild (the compile command holds Python's include directory, and .ninja_log hashes the command)",
		Source: "torch/utils/cpp_extension.py, include_paths() and _write_ninja_file_to_build_library; ninja's .ninja_log command hash"},
	{Key: bundle.MetaCXX, Preset: "torch-extensions", Compare: Exact,
		Effect: "C++ extensions will rebuild (the compile command names the compiler, and .ninja_log hashes the command)",
		Source: "torch/utils/cpp_extension.py, _write_ninja_file (cxx = $CXX, else c++)"},
	{Key: bundle.MetaTorch, Preset: "vllm", Compare: Exact,
		Effect: "vLLM will compile again (its compile-cache hash holds PyTorch's configuration, and Inductor's keys torch_key())",
		Source: "vllm/compilation/backends.py, VllmBackend.__call__ (hash factors); torch/_inductor/codecache.py, FxGraphHashDetails"},
	{Key: bundle.MetaTriton, Preset: "vllm", Compare: Exact,
		Effect: "vLLM's Inductor graphs will miss (Inductor's system key holds triton_key())",
		Source: "vllm/compilation/compiler_interface.py, InductorAdaptor (Inductor's cache under rank_R_D); torch/_inductor/codecache.py, CacheBase.get_system()"},
	{Key: bundle.MetaTorch, Preset: "sglang", Compare: Exact,
		Effect: "SGLang's torch.compile graphs will miss (Inductor's key holds torch_key())",
		Source: "python/sglang/srt/environ.py, third_party_cache_defaults (inductor/ under SGLANG_CACHE_DIR); torch/_inductor/codecache.py, FxGraphHashDetails"},
	{Key: bundle.MetaTriton, Preset: "sglang", Compare: Exact,
		Effect: "SGLang's Triton kernels will recompile (Triton's key starts with triton_key())",
		Source: "python/sglang/srt/environ.py, third_party_cache_defaults (triton/); triton python/triton/compiler/compiler.py, compile()"},
	{Key: bundle.MetaCUDARuntime, Preset: "deepgemm", Compare: MajorMinor,
		Effect: "DeepGEMM will compile every kernel again (its key holds the NVCC or NVRTC major.minor)",
		Source: "deepseek-ai/DeepGEMM csrc/jit/compiler.hpp, NVCCCompiler/NVRTCCompiler signature and Compiler::build (name$$signature$$flags$$code)"},
	{Key: bundle.MetaROCm, Preset: "miopen", Compare: Exact,
		Effect: "MIOpen will start new find databases and may rebuild kernels (the MIOpen version, ROCm's, names its user find-db files)",
		Source: "ROCm/MIOpen src/find_db.cpp, FindDbRecord path (GetUserDbSuffix: HIP.X_Y_Z); CMakeLists.txt MIOPEN_USER_DB_SUFFIX"},
	{Key: bundle.MetaCUDARuntime, Preset: "cupy", Compare: MajorMinor,
		Effect: "CuPy will recompile every kernel (its key holds the NVRTC version, the CUDA toolkit's)",
		Source: "cupy/cuda/compiler.py, _compile_with_cache_cuda: env = (arch, options, _get_nvrtc_version(), backend)"},
	{Key: bundle.MetaCUDARuntime, Preset: "numba", Compare: MajorMinor,
		Effect: "Numba's CUDA kernels will recompile (their codegen tuple holds the CUDA runtime version)",
		Source: "numba-cuda, JITCUDACodegen.magic_tuple() = (runtime.get_version(), compute capability)"},

	{Key: bundle.MetaGPUCompute, Preset: "triton", Compare: Exact,
		Effect: "Triton will recompile every kernel (its key holds the target architecture)",
		Source: "triton third_party/nvidia/backend/compiler.py, CUDABackend.hash() = ptxas version and target arch"},
	{Key: bundle.MetaGPUCompute, Preset: "cupy", Compare: Exact,
		Effect: "CuPy will recompile every kernel (its key holds the architecture)",
		Source: "cupy/cuda/compiler.py, _compile_with_cache_cuda: env = (arch, ...)"},
	{Key: bundle.MetaGPUCompute, Preset: "numba", Compare: Exact,
		Effect: "Numba's CUDA kernels will recompile (their codegen tuple holds the compute capability)",
		Source: "numba-cuda, JITCUDACodegen.magic_tuple()"},
	{Key: bundle.MetaGPUCompute, Preset: "cuda", Compare: Exact,
		Effect: "the CUDA driver will compile every PTX kernel again (its cache holds code for one architecture)",
		Source: "CUDA Programming Guide, \"Just-in-Time Compilation\""},
	{Key: bundle.MetaGPUCompute, Preset: "flashinfer", Compare: Exact,
		Effect: "FlashInfer will build every module again (the target architectures name its workspace directory)",
		Source: "flashinfer/jit/env.py, _get_workspace_dir_name (VERSION/ARCHS)"},
	{Key: bundle.MetaGPUCompute, Preset: "deepgemm", Compare: Exact,
		Effect: "DeepGEMM will compile every kernel again (its flags, in the key, hold --gpu-architecture=sm_XX)",
		Source: "deepseek-ai/DeepGEMM csrc/jit/compiler.hpp, NVCCCompiler/NVRTCCompiler flags"},
	{Key: bundle.MetaGPUCompute, Preset: "tilelang", Compare: Exact,
		Effect: "TileLang will compile every kernel again (its key holds the target)",
		Source: "tile-ai/tilelang tilelang/cache/kernel_cache.py, KernelCache._generate_key (\"target\")"},
	{Key: bundle.MetaGPUCompute, Preset: "miopen", Compare: Exact,
		Effect: "MIOpen will start empty databases (the GPU architecture names every database file)",
		Source: "ROCm/MIOpen src/include/miopen/handle.hpp, Handle::GetDbBasename (DbId and CU count); src/binary_cache.cpp, GetDb"},
	{Key: bundle.MetaGPUModel, Preset: "vllm", Compare: Exact,
		Effect: "vLLM's Inductor graphs will miss (Inductor's system key holds the GPU's name)",
		Source: "torch/_inductor/codecache.py, CacheBase.get_system(): device_properties.name"},
	{Key: bundle.MetaGPUCompute, Preset: "sglang", Compare: Exact,
		Effect: "SGLang's Triton, FlashInfer and DeepGEMM kernels will compile again (their keys hold the architecture)",
		Source: "triton third_party/nvidia/backend/compiler.py, CUDABackend.hash(); flashinfer/jit/env.py, _get_workspace_dir_name"},
	{Key: bundle.MetaGPUModel, Preset: "inductor", Compare: Exact,
		Effect: "Inductor will miss every graph (its system key holds the GPU's name)",
		Source: "torch/_inductor/codecache.py, CacheBase.get_system(): device_properties.name"},
	{Key: bundle.MetaGPUModel, Preset: "jax", Compare: Exact,
		Effect: "JAX will recompile every GPU program (its key holds the device kind)",
		Source: "jax/_src/cache_key.py, _hash_accelerator_config (topology, else device_kind)"},
	{Key: bundle.MetaGPUDriver, Preset: "cuda", Compare: Exact,
		Effect: "the CUDA driver will compile every PTX kernel again (a driver upgrade invalidates its cache)",
		Source: "CUDA Programming Guide, \"Just-in-Time Compilation\" (the compute cache is invalidated when the driver is upgraded)"},

	{Key: bundle.MetaCPUFlags, Preset: "numba", Compare: ISA,
		Effect: "Numba will recompile every function (its codegen tuple holds the host CPU's name and features)",
		Source: "numba/core/codegen.py, CPUCodegen.magic_tuple() = (triple, host CPU name, features)"},
	{Key: bundle.MetaCPUFlags, Preset: "pocl", Compare: ISA,
		Effect: "pocl will rebuild every kernel (its key holds the device's LLVM CPU)",
		Source: "pocl lib/CL/pocl_cache.c, build_program_compute_hash (pocl and LLVM versions, the device's build_hash)"},
	{Key: bundle.MetaCPUFlags, Preset: "jax", Compare: ISALacking, CPUBackend: true,
		Effect: "JAX on CPUs will recompile (the XLA:CPU loader refuses entries that use features this CPU lacks)",
		Source: "jax-ml/jax#38445, the XLA:CPU AOT loader's compatibility check"},
	{Key: bundle.MetaCPUFlags, Preset: "inductor", Compare: VecISA,
		Effect: "Inductor will recompile its C++ kernels (its keys hold the vector ISA it picks)",
		Source: "torch/_inductor/cpu_vec_isa.py, pick_vec_isa(); the ISA is in the C++ compile command"},
	{Key: bundle.MetaCPUFlags, Preset: "julia", Compare: ISA,
		Effect: "Julia will recompile its package images (with the default JULIA_CPU_TARGET, native, they target this CPU's features)",
		Source: "Julia manual, \"Package Images\" and JULIA_CPU_TARGET"},

	// No preset: which framework is unknown, so any difference is said.
	{Key: bundle.MetaCPUModel, Compare: Exact, Effect: "compiled kernels may miss", Source: "(no preset)"},
	{Key: bundle.MetaCPUFlags, Compare: ISALacking, Effect: "compiled kernels may miss", Source: "(no preset)"},
	{Key: bundle.MetaGPUModel, Compare: Exact, Effect: "compiled kernels may miss", Source: "(no preset)"},
	{Key: bundle.MetaGPUCompute, Compare: Exact, Effect: "compiled kernels may miss", Source: "(no preset)"},
}

// ReuseRules returns the rule table. The returned rules are shared:
// callers must not modify them.
func ReuseRules() []ReuseRule { return reuseRules }

// nouns name the keys in messages.
var nouns = map[string]string{
	bundle.MetaPython: "Python", bundle.MetaNumba: "numba", bundle.MetaLLVMLite: "llvmlite",
	bundle.MetaNumbaCUDA: "numba-cuda", bundle.MetaJAX: "jax", bundle.MetaJAXLib: "jaxlib",
	bundle.MetaTorch: "torch", bundle.MetaTorchCUDA: "torch built for CUDA", bundle.MetaTriton: "triton",
	bundle.MetaPyOpenCL: "pyopencl", bundle.MetaCuPy: "cupy", bundle.MetaCXX: "C++ compiler",
	bundle.MetaFlashInfer: "flashinfer", bundle.MetaDeepGEMM: "deep_gemm", bundle.MetaTileLang: "tilelang",
	bundle.MetaVLLM: "vllm", bundle.MetaSGLang: "sglang",
	bundle.MetaCXXVersion: "C++ compiler", bundle.MetaCUDARuntime: "CUDA runtime", bundle.MetaROCm: "ROCm",
	bundle.MetaGPUModel: "GPU", bundle.MetaGPUCompute: "GPU compute capability", bundle.MetaGPUDriver: "GPU driver",
	bundle.MetaCPUModel: "CPU", bundle.MetaCPUFlags: "CPU features",
}

// Noun is how messages name key ("triton", "GPU driver"); the key itself
// for one that has no name.
func Noun(key string) string {
	if n, ok := nouns[key]; ok {
		return n
	}
	return key
}

// A Miss is one difference between the warm-up and this node that makes
// caches miss: the key, both values, the presets whose caches miss and
// what each framework does. For the CPU's features, Warmed lists the
// flags this node lacks and Here those it has beyond the warm-up's.
type Miss struct {
	Key string `json:"key"`
	// Compare is how the values were compared: "exact", "major_minor",
	// "isa" (instruction sets, either way), "isa_lacking", "vector_isa".
	Compare string   `json:"compare"`
	Warmed  string   `json:"warmed"`
	Here    string   `json:"here"`
	Presets []string `json:"presets"`
	Effects []string `json:"effects"`
}

var compareNames = [...]string{"exact", "major_minor", "isa", "isa_lacking", "vector_isa"}

// String is the miss as load warns: "warmed with triton 3.6.0, here
// 3.5.1: Triton will recompile every kernel".
func (m Miss) String() string {
	what := ""
	switch m.Compare {
	case "isa", "isa_lacking":
		var parts []string
		if m.Warmed != "" {
			parts = append(parts, "lacks "+m.Warmed)
		}
		if m.Here != "" {
			parts = append(parts, "has "+m.Here)
		}
		what = "this node's CPU " + strings.Join(parts, " and ") + ", unlike the warm-up's"
	case "vector_isa":
		what = fmt.Sprintf("warmed on a CPU with vector ISA %s, here %s", m.Warmed, m.Here)
	default:
		what = fmt.Sprintf("warmed with %s %s, here %s", Noun(m.Key), m.Warmed, m.Here)
	}
	return what + ": " + strings.Join(m.Effects, "; ")
}

// Misses compares a bundle's recorded metadata with this node's
// (hostinfo's description and toolchain, the same keys) by the rules of
// presets and the presets they include; with no rule of its own among
// them (no preset, or a preset the table has none for), by the rules of
// no preset. One Miss a key, in the table's order. A key missing on either
// side is not known, not a difference: a node that cannot see its GPUs,
// an older bundle.
func Misses(presets []*Preset, recorded, local map[string]string) []Miss {
	rules := rulesFor(presets)
	var out []Miss
	at := map[[2]string]int{}
	for _, r := range rules {
		rv, ok := recorded[r.Key]
		lv, lok := local[r.Key]
		if !ok || !lok || rv == lv {
			continue
		}
		if r.CPUBackend && recorded[bundle.MetaGPUModel] != "" {
			continue
		}
		warmed, here, differ := compare(r.Compare, rv, lv)
		if !differ {
			continue
		}
		id := [2]string{r.Key, compareNames[r.Compare]}
		i, seen := at[id]
		if !seen {
			at[id] = len(out)
			out = append(out, Miss{Key: r.Key, Compare: id[1], Warmed: warmed, Here: here})
			i = len(out) - 1
		}
		m := &out[i]
		if r.Preset != "" && !slices.Contains(m.Presets, r.Preset) {
			m.Presets = append(m.Presets, r.Preset)
		}
		if !slices.Contains(m.Effects, r.Effect) {
			m.Effects = append(m.Effects, r.Effect)
		}
	}
	return out
}

// rulesFor is the rules of presets' closures, in table order; the rules
// of no preset when none of them has a rule.
func rulesFor(presets []*Preset) []ReuseRule {
	names := map[string]bool{}
	for _, p := range presets {
		for _, q := range p.closure() {
			names[q.Name] = true
		}
	}
	var out []ReuseRule
	for _, r := range reuseRules {
		if r.Preset != "" && names[r.Preset] {
			out = append(out, r)
		}
	}
	if len(out) > 0 {
		return out
	}
	for _, r := range reuseRules {
		if r.Preset == "" {
			out = append(out, r)
		}
	}
	return out
}

// compare applies c to a recorded value and this node's: what to show of
// each, and whether they differ in a way c counts.
func compare(c Comparison, rv, lv string) (warmed, here string, differ bool) {
	switch c {
	case MajorMinor:
		return rv, lv, majorMinor(rv) != majorMinor(lv)
	case ISA, ISALacking:
		lacks, extra := isaDiff(rv, lv)
		if c == ISALacking {
			extra = nil
		}
		return words(lacks), words(extra), len(lacks)+len(extra) > 0
	case VecISA:
		a, b := vecISA(rv), vecISA(lv)
		return a, b, a != b
	}
	return rv, lv, rv != lv
}

func majorMinor(v string) string {
	parts := strings.SplitN(v, ".", 3)
	if len(parts) > 2 {
		parts = parts[:2]
	}
	return strings.Join(parts, ".")
}

// words joins at most 8 flags, then how many more.
func words(fs []string) string {
	if len(fs) > 8 {
		return strings.Join(fs[:8], " ") + fmt.Sprintf(" and %d more", len(fs)-8)
	}
	return strings.Join(fs, " ")
}

// isaDiff lists the instruction-set flags of want that have lacks, and
// those have has beyond want (sorted, each once). Flags that are not
// instruction sets (the kernel's bug and mitigation flags, power
// management) are not compared: a newer kernel or microcode changes them,
// the compilers do not see them.
func isaDiff(want, have string) (lacks, extra []string) {
	w, h := isaSet(want), isaSet(have)
	for f := range w {
		if !h[f] {
			lacks = append(lacks, f)
		}
	}
	for f := range h {
		if !w[f] {
			extra = append(extra, f)
		}
	}
	slices.Sort(lacks)
	slices.Sort(extra)
	return lacks, extra
}

// isaPrefixes are /proc/cpuinfo's x86 flags that name instruction sets
// (what LLVM's host features are made of).
var isaPrefixes = []string{"sse", "ssse3", "avx", "fma", "f16c", "bmi", "adx", "aes", "vaes", "pclmulqdq", "vpclmulqdq",
	"sha_ni", "gfni", "amx", "movbe", "popcnt", "abm", "lzcnt", "rdrand", "rdseed", "cx16", "xsave", "fsgsbase",
	"clflushopt", "clwb", "3dnowprefetch", "lahf_lm", "xop", "fma4", "tbm", "clzero", "rdpid", "movdir", "serialize",
	"waitpkg", "cldemote", "enqcmd", "avx_vnni", "wbnoinvd", "pku", "sgx", "ptwrite", "uintr", "hreset", "tsxldtrk"}

// isaSet is the instruction-set flags of a /proc/cpuinfo flags line: on
// aarch64 (a Features line: asimd, fp) every flag is one.
func isaSet(flags string) map[string]bool {
	fs := strings.Fields(flags)
	arm := slices.Contains(fs, "asimd") || slices.Contains(fs, "fp") && !slices.Contains(fs, "fpu")
	out := map[string]bool{}
	for _, f := range fs {
		if arm {
			out[f] = true
			continue
		}
		for _, p := range isaPrefixes {
			if strings.HasPrefix(f, p) {
				out[f] = true
				break
			}
		}
	}
	return out
}

// vecISA is the vector instruction set Inductor would pick on a CPU of
// these flags, best first, as torch/_inductor/cpu_vec_isa.py's
// supported ISAs: amx (with AVX-512), avx512, avx2; on Arm sve, neon.
func vecISA(flags string) string {
	s := map[string]bool{}
	for _, f := range strings.Fields(flags) {
		s[f] = true
	}
	avx512 := s["avx512f"] && s["avx512bw"] && s["avx512vl"] && s["avx512dq"]
	switch {
	case avx512 && s["amx_tile"]:
		return "amx"
	case avx512:
		return "avx512"
	case s["avx2"] && s["fma"]:
		return "avx2"
	case s["sve"]:
		return "sve"
	case s["asimd"]:
		return "neon"
	}
	return "none"
}

// toolchainKeys are the toolchain keys, in the order they are probed.
var toolchainKeys = []string{bundle.MetaPython, bundle.MetaNumba, bundle.MetaLLVMLite, bundle.MetaNumbaCUDA,
	bundle.MetaJAX, bundle.MetaJAXLib, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton,
	bundle.MetaPyOpenCL, bundle.MetaCuPy, bundle.MetaFlashInfer, bundle.MetaDeepGEMM, bundle.MetaTileLang, bundle.MetaVLLM,
	bundle.MetaSGLang, bundle.MetaCXX, bundle.MetaCXXVersion, bundle.MetaCUDARuntime, bundle.MetaROCm}

// recorded are the toolchain keys each preset records at warm-up: the
// keys its rules compare and, for a person reading kbundle info, the
// versions beside them (llvmlite, jax, ROCm).
var recorded = map[string][]string{
	"numba":            {bundle.MetaPython, bundle.MetaNumba, bundle.MetaLLVMLite, bundle.MetaNumbaCUDA, bundle.MetaCUDARuntime},
	"triton":           {bundle.MetaPython, bundle.MetaTriton, bundle.MetaCUDARuntime, bundle.MetaROCm},
	"inductor":         {bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton, bundle.MetaCXX, bundle.MetaCXXVersion},
	"mega-cache":       {bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton},
	"jax":              {bundle.MetaPython, bundle.MetaJAX, bundle.MetaJAXLib, bundle.MetaCUDARuntime},
	"cupy":             {bundle.MetaPython, bundle.MetaCuPy, bundle.MetaCUDARuntime, bundle.MetaROCm},
	"pyopencl":         {bundle.MetaPython, bundle.MetaPyOpenCL},
	"cuda":             {bundle.MetaCUDARuntime},
	"torch-extensions": {bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaCXX, bundle.MetaCXXVersion},
	"flashinfer":       {bundle.MetaPython, bundle.MetaTorch, bundle.MetaFlashInfer, bundle.MetaCUDARuntime},
	"deepgemm":         {bundle.MetaPython, bundle.MetaTorch, bundle.MetaDeepGEMM, bundle.MetaCUDARuntime},
	"tilelang":         {bundle.MetaPython, bundle.MetaTileLang, bundle.MetaCUDARuntime, bundle.MetaROCm},
	"miopen":           {bundle.MetaROCm},
	"vllm": {bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton, bundle.MetaVLLM,
		bundle.MetaDeepGEMM, bundle.MetaCUDARuntime},
	"sglang": {bundle.MetaPython, bundle.MetaTorch, bundle.MetaTorchCUDA, bundle.MetaTriton, bundle.MetaSGLang,
		bundle.MetaFlashInfer, bundle.MetaTileLang, bundle.MetaDeepGEMM, bundle.MetaCUDARuntime},
}

// ToolchainKeys are the toolchain keys to record for presets (and the
// presets they include), in probing order; with no preset, every one
// (a later load may name the presets).
func ToolchainKeys(presets []*Preset) []string {
	if len(presets) == 0 {
		return toolchainKeys
	}
	want := map[string]bool{}
	for _, p := range presets {
		for _, q := range p.closure() {
			for _, k := range recorded[q.Name] {
				want[k] = true
			}
		}
	}
	var out []string
	for _, k := range toolchainKeys {
		if want[k] {
			out = append(out, k)
		}
	}
	return out
}

// CompareKeys are the toolchain keys a load must read on its node to
// apply presets' rules to a bundle recording meta: those of the rules
// that meta records.
func CompareKeys(presets []*Preset, meta map[string]string) []string {
	want := map[string]bool{}
	for _, r := range rulesFor(presets) {
		if _, ok := meta[r.Key]; ok && slices.Contains(toolchainKeys, r.Key) {
			want[r.Key] = true
		}
	}
	var out []string
	for _, k := range toolchainKeys {
		if want[k] {
			out = append(out, k)
		}
	}
	return out
}

// IsToolchainKey reports whether key is one of the toolchain keys.
func IsToolchainKey(key string) bool { return slices.Contains(toolchainKeys, key) }

// ReuseTable is the rule table as docs/presets.md shows it (a test keeps
// the two the same).
func ReuseTable() string {
	var b strings.Builder
	b.WriteString("| key | preset | compared | effect of a difference | where the framework keys on it |\n|---|---|---|---|---|\n")
	for _, r := range reuseRules {
		preset := "`" + r.Preset + "`"
		if r.Preset == "" {
			preset = "(none)"
		}
		cmp := [...]string{"exact", "major.minor", "instruction sets, either way", "instruction sets this node lacks", "vector ISA"}[r.Compare]
		if r.CPUBackend {
			cmp += ", cache warmed without a GPU"
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.Key, preset, cmp, strings.ReplaceAll(r.Effect, "|", "\\|"),
			strings.ReplaceAll(r.Source, "|", "\\|"))
	}
	return b.String()
}
