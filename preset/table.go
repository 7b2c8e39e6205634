package preset

import (
	"path"
	"strings"
)

// Subdirectories of DIR, one per framework, so that several presets share
// one DIR (e.g. --preset numba --preset pyopencl): see docs/presets.md.
var table = []*Preset{
	{
		Name:      "tack",
		hidden:    true, // the test suite's stand-in framework
		Framework: "Tack-like application",
		Subdir:    "tack",
		Vars: []Var{
			{Name: "TACK_CACHE_DIR", Value: "tack", Dir: true,
				Source: "kbundle convention for Tack-like applications (docs/presets.md); no upstream framework",
				Doc:    "directory holding the compiled kernels"},
			{Name: "TACK_CACHE", Value: "write",
				Source: "kbundle convention for Tack-like applications (docs/presets.md); no upstream framework",
				Doc:    "cache mode: write during warm-up (read-write), read when loading"},
		},
		Misses: []string{"whatever the application puts in its cache key (typically compiler version and target architecture)"},
		Notes:  []string{"the reference shape for an application with an explicit cache mode: warm-up sets TACK_CACHE=write"},
	},
	{
		Name:      "triton",
		Framework: "Triton",
		Subdir:    "triton",
		Vars: []Var{
			{Name: "TRITON_CACHE_DIR", Value: "triton", Dir: true,
				Source: "triton-lang/triton python/triton/runtime/cache.py, FileCacheManager (default $TRITON_HOME/.triton/cache)",
				Doc:    "directory of Triton's file cache manager (compiled kernels and __grp__*.json groups)"},
			{Name: "TRITON_CACHE_AUTOTUNING", Value: "1",
				Source: "triton-lang/triton python/triton/knobs.py, autotuning.cache (env TRITON_CACHE_AUTOTUNING); python/triton/runtime/autotuner.py, Autotuner.check_disk_cache",
				Doc:    "keep @triton.autotune results in the cache (a JSON file per tuning key), so the job does not benchmark every config again"},
		},
		Misses: []string{
			"__grp__*.json group files store absolute paths of the kernel files: after a move they point at the old root (kbundle rewrites them, see Relocate)",
			"GPU architecture (compute capability), Triton version (with a hash of its sources), backend and ptxas version are part of the key; the driver is not",
			"kernel source text and constexpr/specialization arguments are part of the key",
			"autotune results are keyed on the tuning key, the configs and the kernel's source; configs with a pre_hook never use the disk cache",
		},
		relocate: relocateTriton,
	},
	{
		Name:      "inductor",
		Aliases:   []string{"torch", "pytorch", "torchinductor"},
		Framework: "PyTorch Inductor (torch.compile)",
		Subdir:    "inductor",
		Includes:  []string{"triton"},
		Vars: []Var{
			{Name: "TORCHINDUCTOR_CACHE_DIR", Value: "inductor", Dir: true,
				Source: "PyTorch tutorial \"Compile Time Caching Configuration\" (docs.pytorch.org/tutorials/recipes/torch_compile_caching_configuration_tutorial.html)",
				Doc:    "Inductor's local on-disk caches (FX graph cache, autotuning cache, compiled modules)"},
		},
		Misses: []string{
			"PyTorch version, Python version, GPU model and Triton version are part of the keys",
			"the C++ compiler Inductor runs on CPUs, by name: measured, the same GCC called through CXX=c++ instead of the default g++ misses every graph (warm up with the job's CXX and modules)",
			"Triton's group files need relocation (included triton preset)",
		},
		Notes: []string{"includes the triton preset: TRITON_CACHE_DIR points at DIR/triton (Inductor would otherwise put it under its own cache dir)"},
	},
	{
		Name:      "mega-cache",
		Aliases:   []string{"megacache", "torch-mega-cache"},
		Framework: "PyTorch Mega-Cache (torch.compiler.save_cache_artifacts)",
		Subdir:    "mega-cache",
		Vars: []Var{
			{Name: "KBUNDLE_MEGA_CACHE_DIR", Value: "mega-cache", Dir: true,
				Source: "PyTorch tutorial \"Compile Time Caching in torch.compile\", Mega-Cache (docs.pytorch.org/tutorials/recipes/torch_compile_caching_tutorial.html); the variable is kbundle's own",
				Doc:    "the folder of torch.compiler.save_cache_artifacts() blobs (one file per blob, named by its SHA-256): load_bundle hot-loads them, harvest() writes the job's"},
		},
		Misses: []string{
			"a blob holds the caches' entries with their own keys (FX graph, AOTAutograd, autotuning): PyTorch version, Python version, GPU model and Triton version are part of them",
			"torch.compiler.load_cache_artifacts fills the caches; the job still needs the same code, shapes and configuration to hit them",
		},
		Notes: []string{
			"only the Python API uses the blobs: load_bundle calls torch.compiler.load_cache_artifacts on each blob after the load, and harvest() first writes the job's torch.compiler.save_cache_artifacts() into DEST (docs/python.md, Mega-Cache)",
			"portable: the blobs name no path, so the Inductor directory may be empty, anywhere",
		},
	},
	{
		Name:      "jax",
		Framework: "JAX",
		Subdir:    "jax",
		Vars: []Var{
			{Name: "JAX_COMPILATION_CACHE_DIR", Value: "jax", Dir: true,
				Source: "JAX docs \"Persistent compilation cache\" (docs.jax.dev/en/latest/persistent_compilation_cache.html)",
				Doc:    "enables the persistent compilation cache in this directory"},
			{Name: "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", Value: "0",
				Source: "JAX docs \"Persistent compilation cache\" (jax_persistent_cache_min_compile_time_secs)",
				Doc:    "cache every compiled program, not only those that took over 1 s (the default)"},
			{Name: "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", Value: "-1",
				Source: "JAX docs \"Persistent compilation cache\" (jax_persistent_cache_min_entry_size_bytes)",
				Doc:    "cache entries of any size (-1 disables the size restriction)"},
			{Name: "JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES", Value: "none",
				Source: "jax/_src/config.py jax_persistent_cache_enable_xla_caches (default xla_gpu_per_fusion_autotune_cache_dir); jax/_src/compiler.py, cache_key.py",
				Doc:    "do not put XLA's autotune cache path (an absolute path under the cache) into the compile options: JAX hashes it into every cache key, so a moved cache would never hit"},
		},
		Misses: []string{
			"jax/jaxlib version, XLA flags, backend (CPU/GPU/TPU) and device kind are part of the key",
			"the number of devices and the distributed topology change the compiled program",
			"by default the cache key contains the cache directory's absolute path (XLA's per-fusion autotune cache dir, put into the hashed compile options): kbundle sets JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none so entries are path-independent",
			"CPU backend: the XLA:CPU AOT loader may reject every entry on some CPUs (+prefer-no-gather, jax-ml/jax#38445); kbundle warm --check shows it",
		},
		hitWrite: jaxHitWrite,
		// JAX keeps a refused entry's file (LRUCache.put skips an existing
		// key), so only its messages tell: the XLA:CPU AOT loader's E-level
		// log line and JAX's own warning for an unreadable entry.
		refusals: []string{
			"Machine type used for XLA:CPU compilation doesn't match",
			"Target machine feature",
			"Error reading persistent compilation cache entry",
		},
	},
	{
		Name:      "numba",
		Framework: "Numba",
		Subdir:    "numba",
		Vars: []Var{
			{Name: "NUMBA_CACHE_DIR", Value: "numba", Dir: true,
				Source: "Numba docs \"Environment variables\" (numba.readthedocs.io/en/stable/reference/envvars.html#envvar-NUMBA_CACHE_DIR)",
				Doc:    "directory for cache=True functions instead of __pycache__ next to the source"},
		},
		Misses: []string{
			"the SOURCE file's absolute directory: the cache subdirectory and index are named after it",
			"the source file's modification time (to the nanosecond) and size, stored in each index",
			"Numba version, Python version and CPU name/features (the host CPU is the default target)",
		},
		Notes: []string{
			"the cache directory itself may move and get new mtimes; the source tree may not: keep it at the same absolute path with the same mtimes on every node",
			"a read-only cache is silently ignored: Numba recompiles",
		},
		Writable: true,
	},
	{
		Name:      "cupy",
		Framework: "CuPy",
		Subdir:    "cupy",
		Vars: []Var{
			{Name: "CUPY_CACHE_DIR", Value: "cupy", Dir: true,
				Source: "CuPy docs \"Environment variables\" (docs.cupy.dev/en/stable/reference/environment.html#envvar-CUPY_CACHE_DIR)",
				Doc:    "directory of the kernel cache (default ~/.cupy/kernel_cache)"},
		},
		Misses: []string{
			"CUDA/NVRTC version, GPU architecture (compute capability) and CuPy version are part of the key",
		},
	},
	{
		Name:      "pocl",
		Framework: "pocl (Portable Computing Language)",
		Subdir:    "pocl",
		Vars: []Var{
			{Name: "POCL_CACHE_DIR", Value: "pocl", Dir: true,
				Source: "pocl docs \"Tuning pocl behavior with ENV variables\" (portablecl.org/docs/html/env_variables.html)",
				Doc:    "directory of pocl's kernel compiler cache (must exist: kbundle warm creates it)"},
			{Name: "POCL_KERNEL_CACHE", Value: "1",
				Source: "pocl docs \"Tuning pocl behavior with ENV variables\" (portablecl.org/docs/html/env_variables.html)",
				Doc:    "turn the kernel compiler cache on (on by default; set explicitly so a site default cannot turn it off)"},
		},
		Misses: []string{
			"program source/binary, build options, device (CPU model and features) and pocl/LLVM version are part of the key",
		},
		Notes: []string{
			"a read-only cache fails builds with CL_BUILD_PROGRAM_FAILURE",
			"PyOpenCL users need the pyopencl preset, which includes this one",
		},
		Writable: true,
		hitWrite: poclHitWrite,
	},
	{
		Name:      "pyopencl",
		Framework: "PyOpenCL (on pocl)",
		Subdir:    "xdg",
		Includes:  []string{"pocl"},
		Vars: []Var{
			{Name: "XDG_CACHE_HOME", Value: "xdg", Dir: true,
				Source: "PyOpenCL source pyopencl/cache.py (cache under platformdirs/appdirs user_cache_dir(\"pyopencl\") = $XDG_CACHE_HOME/pyopencl); XDG Base Directory Specification",
				Doc:    "PyOpenCL keeps its binary cache in $XDG_CACHE_HOME/pyopencl"},
		},
		Misses: []string{
			"without pocl's own cache PyOpenCL's cached binaries still make pocl rebuild every kernel: ship both (this preset includes pocl)",
			"kernel source, build options, device and PyOpenCL version are part of the key",
		},
		Notes: []string{
			"XDG_CACHE_HOME also moves other programs' caches into DIR/xdg for the warm-up run",
			"a read-only cache makes PyOpenCL wait on its lock (about 60 s per program)",
		},
		Writable: true,
	},
	{
		Name:      "cuda",
		Framework: "CUDA driver JIT (PTX to cubin)",
		Subdir:    "cuda",
		Vars: []Var{
			{Name: "CUDA_CACHE_PATH", Value: "cuda", Dir: true,
				Source: "CUDA Programming Guide, \"CUDA Environment Variables\", JIT compilation (docs.nvidia.com/cuda/cuda-programming-guide/05-appendices/environment-variables.html)",
				Doc:    "directory of the driver's compute cache (default ~/.nv/ComputeCache)"},
		},
		Misses: []string{
			"driver version and GPU architecture: a driver upgrade invalidates the cache",
		},
		Notes: []string{"the cache is size-limited by CUDA_CACHE_MAXSIZE; raise it for large warm-ups"},
	},
	{
		Name:      "julia",
		Framework: "Julia",
		Subdir:    "julia",
		Vars: []Var{
			{Name: "JULIA_DEPOT_PATH", Value: "julia", Dir: true,
				Source: "Julia manual \"Environment Variables\" (docs.julialang.org/en/v1/manual/environment-variables/#JULIA_DEPOT_PATH)",
				Doc:    "first depot: precompiled caches go to DEPOT/compiled"},
		},
		Misses: []string{
			"Julia version, CPU target (JULIA_CPU_TARGET) and package/source versions; precompile caches record source paths and mtimes",
		},
		Notes: []string{
			"the depot also holds packages and registries: a depot warmed here is self-contained",
		},
	},
	{
		Name:      "torch-extensions",
		Aliases:   []string{"torch_extensions", "cpp-extensions", "cpp_extension"},
		Framework: "PyTorch C++/CUDA extensions (torch.utils.cpp_extension.load)",
		Subdir:    "torch_extensions",
		Vars: []Var{
			{Name: "TORCH_EXTENSIONS_DIR", Value: "torch_extensions", Dir: true,
				Source: "pytorch/pytorch torch/utils/cpp_extension.py, _get_build_directory (default user_cache_dir(\"torch_extensions\")/pyXY_cuXYZ)",
				Doc:    "root of the extensions' build directories: DIR/torch_extensions/NAME holds build.ninja, the objects, NAME.so and ninja's .ninja_log/.ninja_deps"},
		},
		Misses: []string{
			"ninja decides: an object older than any of its inputs is rebuilt, and the inputs are the extension's sources, named by absolute path, and every header .ninja_deps lists (torch's, under site-packages): keep the sources and the Python environment at the same paths with the same mtimes between warm-up and job (no reinstall)",
			"the compile and link commands are hashed into .ninja_log: another compiler ($CXX), other flags, include paths, Python or TORCH_CUDA_ARCH_LIST rebuild",
			"with TORCH_EXTENSIONS_DIR set torch adds no pyXY_cuXYZ level: one DIR holds one build per extension name",
		},
		Notes: []string{
			"a load keeps every file's mtime to the nanosecond, which is what ninja compares; build.ninja, .ninja_log and .ninja_deps are relocated where they name the warm-up directory",
		},
		relocate: relocateNinja("torch_extensions"),
	},
	{
		Name:      "flashinfer",
		Framework: "FlashInfer JIT (ninja-built modules)",
		Subdir:    "flashinfer",
		Vars: []Var{
			{Name: "FLASHINFER_WORKSPACE_BASE", Value: "flashinfer", Dir: true,
				Source: "flashinfer-ai/flashinfer flashinfer/jit/env.py, FLASHINFER_BASE_DIR (default the home directory) and _get_workspace_dir_name",
				Doc:    "base of FlashInfer's cache: DIR/flashinfer/.cache/flashinfer/VERSION/ARCHS/cached_ops/NAME (build.ninja, objects, NAME.so) and generated/"},
		},
		Misses: []string{
			"the FlashInfer version and the sorted list of target CUDA architectures name two directory levels: another version or architecture list compiles in a new directory",
			"build.ninja names every output by absolute path under the cache and cuda_home as an absolute path (flashinfer/jit/cpp_ext.py, generate_ninja_build_for_op): kbundle relocates build.ninja, .ninja_log and .ninja_deps; CUDA_HOME (or the nvcc found on PATH) must be the same path",
			"ninja compares mtimes: the sources under site-packages (flashinfer/data/csrc, include) must keep their mtimes: a reinstall of the same version rebuilds every module",
		},
		Notes: []string{
			"FlashInfer reads FLASHINFER_WORKSPACE_BASE when it is imported: set it before import flashinfer",
		},
		relocate: relocateNinja("flashinfer"),
	},
	{
		Name:      "deepgemm",
		Aliases:   []string{"deep_gemm", "deep-gemm"},
		Framework: "DeepGEMM JIT",
		Subdir:    "deep_gemm",
		Vars: []Var{
			{Name: "DG_JIT_CACHE_DIR", Value: "deep_gemm", Dir: true,
				Source: "deepseek-ai/DeepGEMM csrc/jit/compiler.hpp, Compiler::Compiler (default $HOME/.deep_gemm)",
				Doc:    "DeepGEMM's kernel cache: DIR/deep_gemm/cache/kernel.NAME.HASH/{kernel.cu,kernel.cubin}"},
		},
		Misses: []string{
			"the directory name is a hash of the kernel's name, the compiler's signature (NVCC or NVRTC major.minor), the flags and the code; the flags hold -I with the absolute path of deep_gemm's include directory (in site-packages) and, with NVRTC, of CUDA_HOME/include, and --gpu-architecture=sm_XX: install deep_gemm at the same absolute path and use the same CUDA_HOME in warm-up and job (kbundle cannot rewrite a hash)",
		},
		Notes: []string{
			"vLLM and SGLang point DG_JIT_CACHE_DIR into their own roots when it is unset: with their presets this one is not needed",
		},
	},
	{
		Name:      "tilelang",
		Framework: "TileLang",
		Subdir:    "tilelang",
		Vars: []Var{
			{Name: "TILELANG_CACHE_DIR", Value: "tilelang", Dir: true,
				Source: "tile-ai/tilelang tilelang/env.py, Environment.TILELANG_CACHE_DIR (default ~/.tilelang/cache)",
				Doc:    "TileLang's kernel cache: DIR/tilelang/VERSION/PLATFORM-MACHINE/kernels/KEY/ (kernel sources, kernel_lib.so, params.pkl)"},
		},
		Misses: []string{
			"the TileLang version names a directory level; the key (a SHA-256) holds the kernel's TIR script, its arguments, the target (the GPU architecture), pass configs and compile flags: entries are path-independent",
		},
	},
	{
		Name:      "miopen",
		Framework: "MIOpen (ROCm)",
		Subdir:    "miopen",
		Vars: []Var{
			{Name: "MIOPEN_USER_DB_PATH", Value: "miopen/db", Dir: true,
				Source: "ROCm/MIOpen src/db_path.cpp.in, PrepareUserDbPath (default ~/.config/miopen; a network file system falls back to the temporary directory)",
				Doc:    "user find-db and perf-db (ARCH+CUs.HIP.X_Y_Z.ufdb.txt, .udb)"},
			{Name: "MIOPEN_CUSTOM_CACHE_DIR", Value: "miopen/cache", Dir: true,
				Source: "ROCm/MIOpen src/binary_cache.cpp, ComputeUserCachePath (default ~/.cache/miopen/VERSION)",
				Doc:    "compiled-kernel cache: one SQLite database per GPU, ARCH_CUs.ukdb (table kern_db)"},
		},
		Misses: []string{
			"the GPU architecture and its compute-unit count name every database file (Handle::GetDbBasename): another GPU model starts empty databases",
			"the MIOpen version is in the find-db's name (MIOPEN_USER_DB_SUFFIX) and in the default cache path",
		},
		Notes: []string{
			"one SQLite file holds every kernel and every node writes it in place: a harvest merges the nodes' copies of each database record by record (the SQLite .ukdb and .udb by table rows, the text .ufdb.txt and .udb.txt by KEY and ID), the lowest rank's record winning a conflict",
		},
		mergeDB: miopenDB,
	},
	{
		Name:      "vllm",
		Framework: "vLLM (VLLM_CACHE_ROOT umbrella)",
		Subdir:    "vllm",
		Vars: []Var{
			{Name: "VLLM_CACHE_ROOT", Value: "vllm", Dir: true,
				Source: "vllm-project/vllm vllm/envs.py, VLLM_CACHE_ROOT (default $XDG_CACHE_HOME/vllm, else ~/.cache/vllm)",
				Doc:    "vLLM's root: torch_compile_cache/HASH/rank_R_D/ (with inductor_cache/ and triton_cache/), torch_aot_compile/HASH/rank_R_D/, deep_gemm/"},
		},
		Misses: []string{
			"HASH covers vLLM's configuration, PyTorch's compile configuration and the model's forward code: another model, dtype, max length or parallel configuration compiles in a new HASH directory",
			"each rank compiles into its own rank_R_D (tensor-parallel rank R, data-parallel rank D): a job with another tensor-parallel size has another HASH and compiles; a load keeps every rank's directory, whatever node it lands on",
			"Inductor's and Triton's keys inside (torch, Triton, GPU model); Triton's group files in triton_cache/ and the artifact handles in each vllm_compile_cache.py hold absolute paths (kbundle relocates them)",
		},
		Notes: []string{
			"vLLM sets TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR itself, under rank_R_D: do not combine with the inductor preset for a vLLM job",
		},
		relocate: relocateAll(relocateTriton, relocateHandles("vllm")),
	},
	{
		Name:      "sglang",
		Framework: "SGLang (SGLANG_CACHE_DIR umbrella)",
		Subdir:    "sglang",
		Vars: []Var{
			{Name: "SGLANG_CACHE_DIR", Value: "sglang", Dir: true,
				Source: "sgl-project/sglang python/sglang/srt/environ.py, third_party_cache_defaults and redirect_third_party_caches (default ~/.cache/sglang)",
				Doc:    "SGLang's root: triton/, inductor/, nv/ (CUDA_CACHE_PATH), tilelang/, .cache/flashinfer/ (FLASHINFER_WORKSPACE_BASE), deep_gemm/, torch_compile_cache/HASH/rank_0_0/"},
		},
		Misses: []string{
			"SGLang only sets the sub-caches' variables that are unset (os.environ.setdefault): a TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, CUDA_CACHE_PATH, TILELANG_CACHE_DIR or FLASHINFER_WORKSPACE_BASE already in the environment takes that cache out of DIR",
			"each sub-cache misses as its own preset says (Triton, Inductor, FlashInfer, DeepGEMM, TileLang, the CUDA driver): Triton's group files and FlashInfer's build.ninja are relocated",
		},
		Notes: []string{
			"FlashInfer must not be imported before sglang redirects the caches: it reads its workspace at import",
		},
		relocate: relocateAll(relocateTriton, relocateNinja("sglang"), relocateHandles("sglang")),
	},
}

// poclHitWrite: on a cache hit pocl writes an empty last_accessed stamp in
// each kernel directory it uses and an empty tempfile_* per process
// (measured with pocl 3.1, test/jit). Anything else, or anything with
// content, is a rebuild.
func poclHitWrite(c Change) bool {
	base := path.Base(c.Path)
	return c.Size == 0 && strings.HasPrefix(c.Path, "pocl/") &&
		(base == "last_accessed" || strings.HasPrefix(base, "tempfile_"))
}

// jaxHitWrite: with eviction on (JAX_COMPILATION_CACHE_MAX_SIZE set) JAX's
// LRU cache rewrites an 8-byte KEY-atime stamp on every hit, under the
// .lockfile of its file lock (jax/_src/lru_cache.py; measured, JAX 0.10.2).
func jaxHitWrite(c Change) bool {
	if !strings.HasPrefix(c.Path, "jax/") {
		return false
	}
	base := path.Base(c.Path)
	return (strings.HasSuffix(base, "-atime") && c.Size == 8) || (base == ".lockfile" && c.Size == 0)
}

// miopenDB says how MIOpen's databases merge (preset.MergeDB): the kernel
// cache ARCH_CUs.ukdb (ROCm/MIOpen src/binary_cache.cpp) and the SQLite
// perf-db ARCH_CUs_1.1.0.udb (src/include/miopen/execution_context.hpp,
// GetUserPerfDbPath) by rows, the text find-db ARCH_CUs.HIP.X_Y_Z.ufdb.txt
// (src/find_db.cpp) and text perf-db .udb.txt (PlainTextDb, src/db.cpp) by
// lines.
func miopenDB(rel string) string {
	switch {
	case strings.HasSuffix(rel, ".ukdb"), strings.HasSuffix(rel, ".udb"):
		return MergeSQLite
	case strings.HasSuffix(rel, ".ufdb.txt"), strings.HasSuffix(rel, ".udb.txt"):
		return MergeLines
	}
	return ""
}
