#!/usr/bin/env bash
# venv.sh: create or update kbundle's project-local Python environment.
#
# Usage: scripts/dev/venv.sh [VENV]   (default .venv at the top of the tree)
#
# Installs the pinned packages of scripts/dev/requirements-frameworks.txt
# (JAX, PyTorch, mpi4py) into VENV with Debian's /usr/bin/python3, only
# from PyPI. Does nothing when VENV already holds exactly that list (a
# stamp file records it). mpi4py is built against $MPICC, default
# mpicc.openmpi (an MPICH build needs its own VENV: MPICC=mpicc.mpich
# scripts/dev/venv.sh .venv-mpich). Prints the VENV's python on stdout.
#
# Cost measured on a 2-core machine: 3.1 GB downloaded, 5.9 GB installed
# (mostly the CUDA libraries that PyPI's torch wheel requires), about 70 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=${1:-.venv}
req=scripts/dev/requirements-frameworks.txt
stamp=$venv/.kbundle-requirements
export MPICC=${MPICC:-mpicc.openmpi}

if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$req" "$stamp"; then
	echo "$PWD/$venv/bin/python"
	exit 0
fi
# Debian's venv module, and Python's headers for building mpi4py.
need=()
/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || need+=(python3-venv)
[ -e "$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["include"])')/Python.h" ] || need+=(python3-dev)
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" -ne 0 ]; then
		echo "kbundle: missing packages: ${need[*]}" >&2
		echo "kbundle: hint: sudo apt-get install -y ${need[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq "${need[@]}" >/dev/null
fi
command -v "$MPICC" >/dev/null || { echo "kbundle: $MPICC not found (mpi4py is built with it)" >&2; exit 1; }

echo "kbundle: installing $req into $venv (MPICC=$MPICC)" >&2
start=$SECONDS
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
rm -f "$stamp"
"$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check -r "$req" >&2
cp "$req" "$stamp"
echo "kbundle: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$PWD/$venv/bin/python"
