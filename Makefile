# kbundle: the two set-up commands are `make demo` and `make test`.
# Each installs what it needs when missing (scripts/dev/deps.sh).

GO ?= go
BIN := bin

.PHONY: all build install demo test bench deps clean python python-lib wheel bench-nodes bench-harvest bench-start bench-mdlat bench-torch bench-triton

all: build

deps:
	scripts/dev/deps.sh demo

# One version string for the CLI (kbundle version), make install and the
# Python package: scripts/dev/version.sh (the file VERSION, plus the commit
# outside a release tag). `make VERSION=1.2.3 ...` overrides it; the
# environment does not.
VERSION := $(shell scripts/dev/version.sh)
ifeq ($(VERSION),)
$(error scripts/dev/version.sh gave no version)
endif
LDFLAGS := -ldflags "-X github.com/kbundle/kbundle/internal/version.linked=$(VERSION)"

# bin/kbundle: the front (cmd/kbundle-front) that runs the build matching
# the MPI it runs under, from the launcher's variables: bin/kbundle-openmpi
# under Open MPI, bin/kbundle-mpich under MPICH or Intel MPI, and
# bin/kbundle-nompi (no MPI) without a launcher.
build: deps
	$(GO) build $(LDFLAGS) -o $(BIN)/kbundle-nompi ./cmd/kbundle
	CC=mpicc.openmpi $(GO) build -tags mpi $(LDFLAGS) -o $(BIN)/kbundle-openmpi ./cmd/kbundle
	CC=mpicc.mpich $(GO) build -tags mpi $(LDFLAGS) -o $(BIN)/kbundle-mpich ./cmd/kbundle
	CGO_ENABLED=0 $(GO) build $(LDFLAGS) -o $(BIN)/kbundle ./cmd/kbundle-front

# make install PREFIX=$HOME/.local [MPICC="mpicc ..."]: as make build, the
# front kbundle with kbundle-nompi and one MPI build per compiler wrapper
# (default: mpicc.openmpi and mpicc.mpich where found, else mpicc;
# MPICC=none: the no-MPI build alone), each named for its ABI, with the man
# page and bash/zsh completion, under PREFIX (default /usr/local; DESTDIR
# for packaging). Needs only Go and the wrappers, not `make deps`
# (scripts/install.sh).
PREFIX ?= /usr/local
MPICC ?=
install:
	PREFIX='$(PREFIX)' DESTDIR='$(DESTDIR)' MPICC='$(MPICC)' GO='$(GO)' VERSION='$(VERSION)' scripts/install.sh

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
# python/kbundle/lib/ and writes its version (python/kbundle/_version.py);
# python adds the CLI (make build's bin/kbundle*) as python/kbundle/bin/
# and installs the package with the pip of $(PYTHON) (a virtual
# environment's python; default: the python3 on PATH).
PYTHON ?= python3
PYLIB := python/kbundle/lib
PYBIN := python/kbundle/bin

python-lib: deps
	CC=mpicc.openmpi $(GO) build -buildmode=c-shared -tags mpi $(LDFLAGS) -o $(PYLIB)/libkbundle-openmpi.so ./cmd/libkbundle
	CC=mpicc.mpich $(GO) build -buildmode=c-shared -tags mpi $(LDFLAGS) -o $(PYLIB)/libkbundle-mpich.so ./cmd/libkbundle
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared $(LDFLAGS) -o $(PYLIB)/libkbundle-nompi.so ./cmd/libkbundle
	rm -f $(PYLIB)/libkbundle-*.h
	printf '# Written by make (scripts/dev/version.sh): not in git.\n__version__ = "%s"\n' '$(VERSION)' > python/kbundle/_version.py

python: python-lib build
	install -d $(PYBIN)
	install -m 0755 $(BIN)/kbundle $(BIN)/kbundle-nompi $(BIN)/kbundle-openmpi $(BIN)/kbundle-mpich $(PYBIN)/
	$(PYTHON) -m pip install ./python

# dist/kbundle-VERSION-py3-none-manylinux_2_28_x86_64.whl: the package
# with its libraries and the CLI, built for glibc 2.28 (RHEL 8, Rocky 8)
# with the zig toolchain from PyPI and checked by auditwheel; installs
# with pip where no Go is (scripts/dev/wheel.sh, docs/python.md).
wheel: deps
	VERSION='$(VERSION)' GO='$(GO)' scripts/dev/wheel.sh

# kbundle load (under mpirun, and under srun in an allocation taken before
# the clock, beside sbcast+extract in it) against per-rank reads, the
# sequential MPI_Bcast-then-extract, C broadcasts in one call and in 8 MiB
# calls, and iperf3 per link, on a 4-node namespace cluster with 1 Gbit/s
# links (as root); see docs/SCALE.md.
bench-nodes: build
	scripts/bench/nodes.sh

# Harvest against the launch alone, pack of its delta (a floor), per-node
# pack + merge and per-node layers of new files, and the time to a warm
# first step (cold, warm on the network FS, warm on every node, kbundle
# load; interleaved, every run printed) for Numba, JAX and Inductor, on a
# 3-node namespace cluster with sshfs as the shared file system (as root;
# about 20 min); see docs/PERFORMANCE.md, "Harvest".
bench-harvest: build
	scripts/bench/harvest.sh

# Issue 28: load_bundle over gloo (torchrun) against MPI (mpirun), timed
# in-process, at 1 and 2 ranks per node; and `kbundle load --per-node`
# against the collective load from sshfs with every cache dropped, with the
# bytes the file server sent; 3-node namespace cluster, 1 Gbit/s links (as
# root; about 5 min); see docs/PERFORMANCE.md, "No MPI".
bench-torch: build
	scripts/bench/torch.sh

# B1, the fixed cost of a load against MPI's own start, on 3 nodes at 1
# and 4 ranks per node (docs/PERFORMANCE.md, "The fixed cost of a load").
bench-start: build
	scripts/bench/start.sh

# B2, the metadata-latency sweep: the Numba first step against a warm
# cache on the network FS, with D ms added to each of its round trips
# (docs/PERFORMANCE.md, "Where kbundle wins: metadata latency").
bench-mdlat: build
	scripts/bench/mdlat.sh

# B3, a 10,000-file Triton-shaped cache read by 3 nodes x 4 ranks through
# one shaped link to the file server: direct, kbundle (CLI, srun, in
# process), every node reads, sbcast, rclone read-through, local
# (docs/PERFORMANCE.md, "A Triton-shaped cache through one link").
bench-triton: build
	scripts/bench/triton.sh

clean:
	rm -rf $(BIN) out dist $(PYLIB)/libkbundle-*.so $(PYBIN) python/kbundle/_version.py python/build python/*.egg-info
