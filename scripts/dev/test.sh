#!/usr/bin/env bash
# test.sh: run every kbundle test, as `make test` and CI do.
#
# Installs what is missing (scripts/dev/deps.sh), vets, runs the unit tests
# with the race detector, starts a one-machine Slurm (scripts/ci/slurm-up.sh)
# and runs the system tests against real Open MPI, MPICH, Slurm, Numba and
# pocl, one package at a time, then short fuzz runs of every parser. The
# Slurm daemons are stopped on exit, also when a test fails.
#
# Environment: KBUNDLE_FUZZTIME (default 10s a target), KBUNDLE_SKIP_SLURM=1
# to run without Slurm (its tests then skip).
set -euo pipefail
cd "$(dirname "$0")/../.."

scripts/dev/deps.sh test
export KBUNDLE_TEST_MPI=1 KBUNDLE_TEST_JIT=1 KBUNDLE_TEST_BIG=1
fuzztime=${KBUNDLE_FUZZTIME:-10s}

echo "== go vet"
go vet ./...
CC=mpicc.openmpi go vet -tags mpi ./...
CC=mpicc.mpich go vet -tags mpi ./...

echo "== unit tests (-race)"
mapfile -t unit < <(go list ./... | grep -v '/test/')
go test -race -timeout 15m "${unit[@]}"

echo "== system tests: real MPI, Slurm, JIT caches"
if [ "${KBUNDLE_SKIP_SLURM:-}" != 1 ]; then
	export KBUNDLE_TEST_SLURM=1
	state=$(mktemp -d /tmp/kbundle-slurm.XXXXXX)
	trap 'scripts/ci/slurm-down.sh "$state" || true' EXIT
	eval "$(scripts/ci/slurm-up.sh "$state")"
fi
mapfile -t system < <(go list ./test/...)
go test -p 1 -timeout 25m "${system[@]}"

echo "== fuzz (${fuzztime} a target)"
while read -r pkg target; do
	go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x "$pkg"
done < <(grep -rl --include='*_test.go' '^func Fuzz' . | while read -r f; do
	pkg="./$(dirname "${f#./}")"
	grep -o '^func Fuzz[A-Za-z0-9_]*' "$f" | sed 's/^func //' | sed "s|^|$pkg |"
done)
echo "== all tests passed"
