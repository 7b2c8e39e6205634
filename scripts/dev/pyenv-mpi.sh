#!/usr/bin/env bash
# pyenv-mpi.sh: create or update the project-local Python environments of
# kbundle's Python package tests, one per MPI library.
#
# Usage: scripts/dev/pyenv-mpi.sh openmpi|mpich
#        scripts/dev/pyenv-mpi.sh deps   (only the Debian packages it needs)
#
# Makes .venv-mpi/VARIANT with Debian's /usr/bin/python3 and installs the
# pinned packages of python/requirements-test.txt from PyPI: mpi4py built
# from source (never a prebuilt wheel, never pip's cache) with
# MPICC=mpicc.openmpi or mpicc.mpich, pytest and mypy. Does nothing when the
# environment already holds exactly that list for that MPI (a stamp file
# records it). Prints the environment's python on stdout.
#
# Separate from scripts/dev/venv.sh (JAX, PyTorch): these environments are
# small (118 MB) and need one mpi4py build per MPI library: 441 s wall
# for both at once on a 2-core machine (python/requirements-test.txt).
set -euo pipefail
cd "$(dirname "$0")/../.."

variant=${1:-}
case $variant in
openmpi) mpicc=mpicc.openmpi ;;
mpich) mpicc=mpicc.mpich ;;
deps) ;;
*)
	echo "usage: scripts/dev/pyenv-mpi.sh openmpi|mpich|deps" >&2
	exit 2
	;;
esac

# python3-dev: mpi4py is compiled against Python's headers.
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

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s <(cat "$req"; echo "MPICC=$mpicc") "$stamp"; then
	echo "$PWD/$venv/bin/python"
	exit 0
fi
command -v "$mpicc" >/dev/null || { echo "kbundle: $mpicc not found (mpi4py is built with it; run scripts/dev/deps.sh)" >&2; exit 1; }

echo "kbundle: installing $req into $venv (MPICC=$mpicc)" >&2
start=$SECONDS
rm -f "$stamp"
# An existing environment is updated in place (pip keeps what already
# matches, mpi4py's build included); a broken one is made anew.
if ! "$venv/bin/python" -c 'import sys' 2>/dev/null; then
	rm -rf "$venv"
	/usr/bin/python3 -m venv "$venv"
fi
MPICC=$mpicc "$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check \
	--no-binary mpi4py -r "$req" >&2
# The build must have used this MPI (mpi4py 4's get_config() is empty: ask
# the library it runs on).
got=$("$venv/bin/python" -c 'from mpi4py import MPI; print(MPI.Get_library_version().replace(chr(0), "").splitlines()[0])')
case $variant:$got in
"openmpi:Open MPI"* | "mpich:MPICH"*) ;;
*)
	echo "kbundle: mpi4py in $venv runs on \"$got\", not $variant (built with MPICC=$mpicc)" >&2
	exit 1
	;;
esac
{ cat "$req"; echo "MPICC=$mpicc"; } >"$stamp"
echo "kbundle: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$PWD/$venv/bin/python"
