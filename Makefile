# kbundle: the two set-up commands are `make demo` and `make test`.
# Each installs what it needs when missing (scripts/dev/deps.sh).

GO ?= go
BIN := bin

.PHONY: all build install demo test bench deps clean python python-lib bench-nodes

all: build

deps:
	scripts/dev/deps.sh demo

# bin/kbundle (no MPI), bin/kbundle-openmpi and bin/kbundle-mpich.
build: deps
	$(GO) build -o $(BIN)/kbundle ./cmd/kbundle
	CC=mpicc.openmpi $(GO) build -tags mpi -o $(BIN)/kbundle-openmpi ./cmd/kbundle
	CC=mpicc.mpich $(GO) build -tags mpi -o $(BIN)/kbundle-mpich ./cmd/kbundle

# make install PREFIX=$HOME/.local [MPICC=mpicc]: bin/kbundle, its man page
# and bash/zsh completion (generated from the command definitions) under
# PREFIX (default /usr/local; DESTDIR for packaging). With MPICC (e.g. the
# mpicc of `module load openmpi`) kbundle is built with MPI; without it, it
# loads as a job of one rank. Needs only Go, not `make deps`.
PREFIX ?= /usr/local
MPICC ?=
VERSION ?= $(shell git describe --always --dirty 2>/dev/null)
LDFLAGS := $(if $(VERSION),-ldflags "-X main.buildVersion=$(VERSION)")
install:
ifeq ($(MPICC),)
	$(GO) build $(LDFLAGS) -o $(BIN)/kbundle-install ./cmd/kbundle
else
	CC=$(MPICC) $(GO) build -tags mpi $(LDFLAGS) -o $(BIN)/kbundle-install ./cmd/kbundle
endif
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/share/man/man1 \
		$(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions
	install -m 0755 $(BIN)/kbundle-install $(DESTDIR)$(PREFIX)/bin/kbundle
	$(BIN)/kbundle-install man > $(DESTDIR)$(PREFIX)/share/man/man1/kbundle.1
	$(BIN)/kbundle-install completion bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/kbundle
	$(BIN)/kbundle-install completion zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_kbundle
	rm -f $(BIN)/kbundle-install

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

# kbundle load against per-rank reads, sbcast+extract and a raw MPI_Bcast on
# a 4-node namespace cluster with 1 Gbit/s links (as root); see docs/SCALE.md.
bench-nodes: build
	scripts/bench/nodes.sh

clean:
	rm -rf $(BIN) out $(PYLIB)/libkbundle-*.so python/build python/*.egg-info
