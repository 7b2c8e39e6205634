// Package preset knows how compiled-kernel (JIT) frameworks find their
// caches: a table of presets (which environment variables point Triton,
// Inductor, JAX, Numba, CuPy, pocl, PyOpenCL, CUDA, Julia or a Tack-like
// application at a directory, with the documentation source of each), the
// fix-ups a cache needs after it moved (Relocate, RelocateStaged), the
// environment a loaded or warmed cache is used with (EnvFor, ChildEnv,
// Exports), and what decides reuse: the rule table of which recorded
// toolchain, GPU or CPU difference makes which preset's cache miss
// (ReuseRules, Misses; docs/presets.md), and the GPU architecture of cache
// entries as the frameworks write them (GPUTargets, GPUFilter). The table
// also holds what a warm-up check must know of each framework (HitWrite,
// Refusals), so that package warmup, which runs and checks, imports this
// one and never the other way round.
//
// It must never guess a variable that the framework's own documentation
// or source does not name, never let a warm-up child believe it is one
// rank of an MPI job (ChildEnv removes launcher variables through the
// launcher package, the one source of truth), and never touch files
// outside the cache directory it was given.
package preset
