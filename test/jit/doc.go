// Package jit holds kbundle's end-to-end tests with real JIT
// frameworks from Debian (python3-numba, python3-pyopencl on
// pocl-opencl-icd, run with /usr/bin/python3): a warm-up fills a cache,
// the bundle is loaded under real Open MPI and MPICH launchers, and every
// rank of the application is shown, by the framework's own counters, to
// have compiled nothing.
//
// The tests skip when a framework is missing unless KBUNDLE_TEST_JIT=1
// (set by `make test`), in which case they fail. They must never touch
// the user's own caches (every cache variable points into the test's
// temporary directories) and never leave processes behind (launches go
// through internal/testutil, which kills the process group on timeout).
package jit
