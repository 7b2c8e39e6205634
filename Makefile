# kbundle: the two set-up commands are `make demo` and `make test`.
# Each installs what it needs when missing (scripts/dev/deps.sh).

GO ?= go
BIN := bin

.PHONY: all build demo test bench deps clean python python-lib

all: build

deps:
	scripts/dev/deps.sh demo

# bin/kbundle (no MPI), bin/kbundle-openmpi and bin/kbundle-mpich.
build: deps
	$(GO) build -o $(BIN)/kbundle ./cmd/kbundle
	CC=mpicc.openmpi $(GO) build -tags mpi -o $(BIN)/kbundle-openmpi ./cmd/kbundle
	CC=mpicc.mpich $(GO) build -tags mpi -o $(BIN)/kbundle-mpich ./cmd/kbundle

# The main job on a built-in sample cache: generate, pack, verify, extract,
# then load it under mpirun with 4 ranks.
demo: build
	scripts/dev/demo.sh

# Every test: vet, unit tests with -race, real MPI/Slurm/JIT system tests, fuzz.
test:
	scripts/dev/test.sh

# Performance against tar+zstd, per-rank reads and raw MPI_Bcast; see
# docs/PERFORMANCE.md.
bench: build
	scripts/bench/bench.sh

# The Python package (python/, docs/python.md): python-lib builds the
# c-shared libraries of kbundle's Go code it loads, one per MPI, into
# python/kbundle/lib/; python then installs the package with the pip of
# $(PYTHON) (a virtual environment's python; default: the python3 on PATH).
PYTHON ?= python3
PYLIB := python/kbundle/lib

python-lib: deps
	CC=mpicc.openmpi $(GO) build -buildmode=c-shared -tags mpi -o $(PYLIB)/libkbundle-openmpi.so ./cmd/libkbundle
	CC=mpicc.mpich $(GO) build -buildmode=c-shared -tags mpi -o $(PYLIB)/libkbundle-mpich.so ./cmd/libkbundle
	rm -f $(PYLIB)/libkbundle-*.h

python: python-lib
	$(PYTHON) -m pip install ./python

clean:
	rm -rf $(BIN) out $(PYLIB)/libkbundle-*.so python/build python/*.egg-info
