#!/usr/bin/env bash
# pyenv-mpi.sh: create or update the project-local Python environments of
# kbundle's Python package tests, one per MPI library.
#
# Usage: scripts/dev/pyenv-mpi.sh openmpi|mpich|mpiabi
#        scripts/dev/pyenv-mpi.sh deps   (only the Debian packages it needs)
#
# Makes .venv-mpi/VARIANT with Debian's /usr/bin/python3 and installs the
# pinned packages of python/requirements-test.txt from PyPI (never pip's
# cache): mpi4py as PyPI's binary wheel, which opens the MPI library at run
# time (no compiler, no source build), pytest and mypy. Does nothing when
# the environment already holds exactly that list for that MPI (a stamp
# file records it). Prints the environment's python on stdout: VENV/bin/
# python-mpi, a wrapper that points mpi4py at that MPI's library (Debian's
# MPICH is libmpich.so.12, the wheel's MPICH module wants libmpi.so.12:
# VENV/mpich-lib holds that name as a link, as in scripts/dev/venv.sh) and
# runs VENV/bin/python; launchers run it on every rank.
#
# mpiabi: mpi4py on the MPI-5 standard ABI (libmpi_abi.so.1), which PyPI's
# mpi4py 4.1.2 wheel has no build for (docs/python.md): the same pinned
# mpi4py built from source with MPICH 5's mpicc_abi
# (.venv-mpirt/mpich5, scripts/dev/mpi-runtimes.sh): 6 min on 2 cores.
# Its MPI module records mpich5's lib folder as RUNPATH; LD_LIBRARY_PATH
# (Intel MPI's lib first) overrides it.
#
# Separate from scripts/dev/venv.sh (JAX, PyTorch): these environments are
# small, made in seconds; the source builds of mpi4py they replace took
# 441 s wall for both on a 2-core machine.
set -euo pipefail
cd "$(dirname "$0")/../.."

variant=${1:-}
case $variant in
openmpi | mpich | mpiabi | deps) ;;
*)
	echo "usage: scripts/dev/pyenv-mpi.sh openmpi|mpich|mpiabi|deps" >&2
	exit 2
	;;
esac

# python3-dev: Python's headers, for packages that pip builds.
has_headers() {
	/usr/bin/python3 -c 'import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'
}
if ! /usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || ! has_headers; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "kbundle: python3-venv or python3-dev is missing" >&2
		echo "kbundle: hint: sudo apt-get install -y python3-venv python3-dev" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq python3-venv python3-dev >/dev/null
fi
[ "$variant" = deps ] && exit 0
venv=.venv-mpi/$variant
req=python/requirements-test.txt
stamp=$venv/.kbundle-requirements

binary=(--only-binary mpi4py) how=wheel
if [ "$variant" = mpiabi ]; then
	mpicc_abi=$PWD/.venv-mpirt/mpich5/bin/mpicc_abi
	[ -x "$mpicc_abi" ] || { echo "kbundle: $mpicc_abi is missing (run scripts/dev/mpi-runtimes.sh mpich5)" >&2; exit 1; }
	binary=(--no-binary mpi4py) how="source, MPICC=mpicc_abi"
fi
want() {
	cat "$req"
	echo "mpi4py=$how MPI=$variant"
}
if [ -x "$venv/bin/python-mpi" ] && [ -f "$stamp" ] && cmp -s <(want) "$stamp"; then
	echo "$PWD/$venv/bin/python-mpi"
	exit 0
fi

echo "kbundle: installing $req into $venv (mpi4py: $how, on $variant)" >&2
start=$SECONDS
rm -f "$stamp"
# An existing environment is updated in place (pip keeps what already
# matches); a broken one is made anew.
if ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
	rm -rf "$venv"
	/usr/bin/python3 -m venv "$venv"
fi
if [ "$variant" = mpiabi ]; then
	MPICC=$mpicc_abi "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check "${binary[@]}" -r "$req" >&2
else
	"$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check "${binary[@]}" -r "$req" >&2
fi
env=''
if [ "$variant" = mpich ]; then
	lib=''
	for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
		if [ -e "$d/libmpich.so.12" ]; then
			lib=$d/libmpich.so.12
			break
		fi
	done
	[ -n "$lib" ] || { echo "kbundle: libmpich.so.12 not found (run scripts/dev/deps.sh)" >&2; exit 1; }
	mkdir -p "$venv/mpich-lib"
	ln -sfn "$lib" "$venv/mpich-lib/libmpi.so.12"
	env="LD_LIBRARY_PATH=\"$PWD/$venv/mpich-lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}\" MPI4PY_LIBMPI=libmpi.so.12; export LD_LIBRARY_PATH MPI4PY_LIBMPI"
fi
{
	echo '#!/bin/sh'
	echo "# Made by scripts/dev/pyenv-mpi.sh: this environment's python, with mpi4py on $variant."
	[ -z "$env" ] || echo "$env"
	echo "exec \"$PWD/$venv/bin/python\" \"\$@\""
} >"$venv/bin/python-mpi"
chmod 755 "$venv/bin/python-mpi"
# mpi4py must run on this MPI (mpi4py 4's get_config() is empty: ask the
# library it runs on).
got=$("$venv/bin/python-mpi" -c 'from mpi4py import MPI; print(("MPI-ABI " if MPI.Get_abi_version()[0] > 0 else "") + MPI.Get_library_version().replace(chr(0), "").splitlines()[0])')
case $variant:$got in
"openmpi:Open MPI"* | "mpich:MPICH"* | "mpiabi:MPI-ABI MPICH"*) ;;
*)
	echo "kbundle: mpi4py in $venv runs on \"$got\", not $variant" >&2
	exit 1
	;;
esac
want >"$stamp"
echo "kbundle: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$PWD/$venv/bin/python-mpi"
