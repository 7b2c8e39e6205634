#!/usr/bin/env bash
# install.sh: `make install`: build kbundle and install it under PREFIX.
#
# Environment (make install passes its variables): PREFIX (default
# /usr/local), DESTDIR (packaging), GO (default go), VERSION (default
# scripts/dev/version.sh), MPICC.
#
# Installs into PREFIX/bin the front kbundle (cmd/kbundle-front), which
# runs the build matching the MPI it runs under, and the builds beside it:
# kbundle-nompi (no MPI), and one MPI build per compiler wrapper in MPICC
# (one or more, separated by spaces), each named for the ABI it was built
# for as `kbundle version` reports it: kbundle-openmpi, kbundle-mpich or
# kbundle-mpiabi. Without MPICC: each of Debian's mpicc.openmpi and
# mpicc.mpich found on PATH, else the mpicc on PATH; none found is an
# error, and MPICC=none installs the no-MPI build alone (the front then
# runs it everywhere; under a launcher of several tasks it refuses the
# collectives, naming the build to install). Also the man page and the
# bash and zsh completions (generated from the command definitions).
# Needs only Go and the MPI compiler wrappers, not `make deps`.
set -euo pipefail
cd "$(dirname "$0")/.."

prefix=${PREFIX:-/usr/local}
dest=${DESTDIR:-}$prefix
go=${GO:-go}
version=${VERSION:-$(scripts/dev/version.sh)}
ldflags="-X github.com/kbundle/kbundle/internal/version.linked=$version"

ccs=()
case ${MPICC:-} in
none) ;;
'')
	for cc in mpicc.openmpi mpicc.mpich; do
		command -v "$cc" >/dev/null 2>&1 && ccs+=("$cc")
	done
	if [ ${#ccs[@]} -eq 0 ] && command -v mpicc >/dev/null 2>&1; then
		ccs=(mpicc)
	fi
	if [ ${#ccs[@]} -eq 0 ]; then
		echo "kbundle: no MPI compiler wrapper on PATH (mpicc.openmpi, mpicc.mpich or mpicc)" >&2
		echo "kbundle: hint: make install MPICC=/path/to/mpicc (e.g. after module load openmpi), or MPICC=none for the no-MPI build alone" >&2
		exit 1
	fi
	;;
*) read -ra ccs <<<"$MPICC" ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/kbundle-install.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$go" build -ldflags "$ldflags" -o "$work/kbundle-nompi" ./cmd/kbundle
CGO_ENABLED=0 "$go" build -ldflags "$ldflags" -o "$work/kbundle" ./cmd/kbundle-front
declare -A built=()
for cc in "${ccs[@]}"; do
	CC=$cc CGO_ENABLED=1 "$go" build -tags mpi -ldflags "$ldflags" -o "$work/mpi" ./cmd/kbundle
	# The ABI the build is for, as the build itself reports it.
	if ! abi=$("$work/mpi" version --json | sed -n 's/^ *"mpi_abi": *"\([^"]*\)".*/\1/p') || [ -z "$abi" ]; then
		echo "kbundle: the build made with $cc does not run here (its MPI library not on the library path?)" >&2
		exit 1
	fi
	case $abi in
	openmpi | mpich) name=kbundle-$abi ;;
	mpi-abi) name=kbundle-mpiabi ;;
	*)
		echo "kbundle: the build made with $cc reports the ABI \"$abi\"" >&2
		exit 1
		;;
	esac
	if [ -n "${built[$name]:-}" ]; then
		echo "kbundle: $cc and ${built[$name]} both make $name (the same MPI ABI): give MPICC one of them" >&2
		exit 1
	fi
	built[$name]=$cc
	mv "$work/mpi" "$work/$name"
	echo "kbundle: $name built with $cc" >&2
done

install -d "$dest/bin" "$dest/share/man/man1" "$dest/share/bash-completion/completions" "$dest/share/zsh/site-functions"
for f in "$work"/kbundle*; do
	install -m 0755 "$f" "$dest/bin/"
done
"$work/kbundle-nompi" man >"$dest/share/man/man1/kbundle.1"
"$work/kbundle-nompi" completion bash >"$dest/share/bash-completion/completions/kbundle"
# bash-completion loads a command's file by the command's name.
for f in "$work"/kbundle-*; do
	ln -sfn kbundle "$dest/share/bash-completion/completions/${f##*/}"
done
"$work/kbundle-nompi" completion zsh >"$dest/share/zsh/site-functions/_kbundle"
echo "kbundle: installed kbundle $version into $dest/bin: $(cd "$work" && echo kbundle*)" >&2
