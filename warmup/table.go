package warmup

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
		},
		Misses: []string{
			"__grp__*.json group files store absolute paths of the kernel files: after a move they point at the old root (kbundle rewrites them, see Relocate)",
			"GPU architecture (compute capability), Triton version (with a hash of its sources), backend and ptxas version are part of the key; the driver is not",
			"kernel source text and constexpr/specialization arguments are part of the key",
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
