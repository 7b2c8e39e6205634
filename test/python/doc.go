// Package pythontest runs the Python package's tests (python/, the
// kbundle module with load_bundle) under real MPI launchers: pytest on
// every rank of `mpirun` (Open MPI build of mpi4py and libkbundle) and
// `mpiexec.hydra` (MPICH) at 1, 2 and 4 ranks, and under `srun` when the
// test Slurm is up. The pytest file is test_load.py; this package builds
// the libraries, installs the package with pip into a temporary directory,
// makes the fixtures and checks every rank's pytest report. TestUnit runs
// test_unit.py, the tests that need neither MPI nor mpi4py, with the
// python3 on PATH, environment or not. TestWheel runs `make wheel` and
// installs the wheel with pip into a fresh virtual environment on a PATH
// without Go, then runs it under Debian's Open MPI, PyPI's MPICH and
// PyPI's Intel MPI (wheel_prog.py); it needs .venv-wheel
// (scripts/dev/wheel.sh deps) and skips without it, unless
// KBUNDLE_TEST_WHEEL=1, which makes it fail. TestMPIABI runs load_bundle
// with mpi4py on the MPI-5 standard ABI (built from source with mpicc_abi:
// scripts/dev/pyenv-mpi.sh mpiabi, which `make test` does not run) and a
// libkbundle of that ABI under PyPI's MPICH 5 and Intel MPI; it skips
// without that environment, unless KBUNDLE_TEST_MPIABI=1.
//
// Gating: the tests need the Python environments that
// scripts/dev/pyenv-mpi.sh makes (.venv-mpi/openmpi, .venv-mpi/mpich and
// .venv-mpi/mpiabi, or KBUNDLE_PYTHON_OPENMPI, KBUNDLE_PYTHON_MPICH and
// KBUNDLE_PYTHON_MPIABI naming their python: bin/python-mpi, which points
// mpi4py at that MPI). Without them they skip, unless KBUNDLE_TEST_PYTHON=1, which
// makes them fail instead. It is test-only and must never be imported.
package pythontest
