#!/usr/bin/env bash
# venv.sh: create or update kbundle's project-local Python environment.
#
# Usage: scripts/dev/venv.sh [VENV]   (default .venv at the top of the tree)
#
# Installs the pinned packages of scripts/dev/requirements-frameworks.txt
# (JAX, PyTorch, mpi4py) into VENV with Debian's /usr/bin/python3, only
# from PyPI. Does nothing when VENV already holds exactly that list (a
# stamp file records it). Prints the VENV's python on stdout.
#
# mpi4py 4.1.2 comes from PyPI as a binary wheel that opens libmpi at run
# time (no compiler needed): Debian's Open MPI by default. Debian's MPICH
# is libmpich.so.12 while the wheel's MPICH module wants libmpi.so.12, so
# VENV/mpich-lib holds that name as a link: run under MPICH with
#   LD_LIBRARY_PATH=VENV/mpich-lib MPI4PY_LIBMPI=libmpi.so.12
# (measured: a source build against mpicc.mpich instead takes 2 min of CPU,
# 5 min on a busy 2-core machine).
#
# Cost measured on a 2-core machine: 3.1 GB downloaded, 5.9 GB installed
# (mostly the CUDA libraries that PyPI's torch wheel requires), about 70 s.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=${1:-.venv}
req=scripts/dev/requirements-frameworks.txt
stamp=$venv/.kbundle-requirements
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
echo "kbundle: installing $req into $venv" >&2
start=$SECONDS
[ -x "$venv/bin/python" ] || /usr/bin/python3 -m venv "$venv"
rm -f "$stamp"
"$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check -r "$req" >&2
mkdir -p "$venv/mpich-lib"
for d in /usr/lib/x86_64-linux-gnu /usr/lib/aarch64-linux-gnu /usr/lib64 /usr/lib; do
	if [ -e "$d/libmpich.so.12" ]; then
		ln -sfn "$d/libmpich.so.12" "$venv/mpich-lib/libmpi.so.12"
		break
	fi
done
cp "$req" "$stamp"
echo "kbundle: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1)" >&2
echo "$PWD/$venv/bin/python"
