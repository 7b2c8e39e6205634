#!/usr/bin/env bash
# deps.sh: install what kbundle's demo, tests and benchmark need, when missing.
#
# Usage: scripts/dev/deps.sh [demo|test|bench]
#
# As root it installs the missing Debian packages with apt-get; otherwise it
# names them and exits 1. Go itself (1.25 or newer) must be on PATH.
set -euo pipefail

what=${1:-test}
need=()
have() { command -v "$1" >/dev/null 2>&1; }
pkg_for() { # command package
	have "$1" || need+=("$2")
}
pkg_for mpicc.openmpi libopenmpi-dev
pkg_for mpirun.openmpi openmpi-bin
pkg_for mpicc.mpich libmpich-dev
pkg_for mpiexec.hydra mpich
pkg_for zstd zstd
case $what in
test | bench)
	pkg_for srun slurm-wlm
	pkg_for slurmctld slurm-wlm
	pkg_for munged munge
	pkg_for shellcheck shellcheck
	pkg_for strace strace
	pkg_for bc bc
	pkg_for useradd passwd
	pkg_for setpriv util-linux
	pkg_for zsh zsh # the generated zsh completion is loaded by the CLI tests
	pkg_for ip iproute2 # the multi-node test cluster (scripts/ci/nscluster-up.sh)
	pkg_for tc iproute2
	pkg_for nsenter util-linux
	pkg_for unshare util-linux
	pkg_for mountpoint util-linux
	[ -x /usr/bin/python3 ] || need+=(python3)
	/usr/bin/python3 -c 'import numba' 2>/dev/null || need+=(python3-numba)
	/usr/bin/python3 -c 'import pyopencl' 2>/dev/null || need+=(python3-pyopencl)
	[ -e /etc/OpenCL/vendors/pocl.icd ] || need+=(pocl-opencl-icd)
	;;
esac

if ! have go; then
	for g in /usr/local/go/bin/go /usr/lib/go/bin/go; do
		[ -x "$g" ] && { echo "kbundle: go is at $g: add $(dirname "$g") to PATH" >&2; exit 1; }
	done
	echo "kbundle: Go 1.25 or newer is required (https://go.dev/doc/install)" >&2
	exit 1
fi

if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
# de-duplicate
mapfile -t need < <(printf '%s\n' "${need[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
	echo "kbundle: missing packages: ${need[*]}" >&2
	echo "kbundle: hint: sudo apt-get install -y ${need[*]}" >&2
	exit 1
fi
echo "kbundle: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${need[@]}" >/dev/null
