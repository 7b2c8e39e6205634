#!/usr/bin/env bash
# wheel.sh: `make wheel`: a platform wheel of the Python package that pip
# installs where no Go and no compiler are, on glibc 2.28 or newer
# (manylinux_2_28, x86-64: RHEL 8, Rocky 8 and later).
#
# Usage: scripts/dev/wheel.sh          build dist/kbundle-VERSION-py3-none-manylinux_2_28_x86_64.whl
#        scripts/dev/wheel.sh deps     only the build environment (and the test wheelhouse)
#
# The wheel holds, in the package folder:
#   lib/libkbundle-openmpi.so, lib/libkbundle-mpich.so   the c-shared
#       libraries load_bundle loads, one per MPI ABI (python/kbundle/_lib.py);
#   lib/libkbundle-nompi.so   the one without MPI, for a torch.distributed
#       process group (python/kbundle/_torch.py);
#   bin/kbundle, bin/kbundle-nompi, bin/kbundle-openmpi, bin/kbundle-mpich
#       the CLI: the front and the builds it picks from (cmd/kbundle-front),
#       run by `python -m kbundle` and the `kbundle` console script.
# The cgo parts are compiled against Debian's Open MPI and MPICH headers
# (mpicc --showme:compile, mpicc -show) with zig's C toolchain from PyPI
# (ziglang) targeting glibc 2.28, so that they need no symbol newer than
# 2.28 whatever glibc builds them. libmpi is not in the wheel: the Open MPI
# parts need libmpi.so.40 and the MPICH parts libmpi.so.12 (the name that
# MPICH, Intel MPI and MVAPICH give their library, and PyPI's mpich and
# impi-rt), found at run time from the user's MPI. Debian's MPICH names
# it libmpich.so.12, so the MPICH parts link against a copy of it renamed
# (soname libmpi.so.12, set with patchelf) in .venv-wheel/mpich-link. The
# no-MPI build and the front are pure Go (CGO_ENABLED=0): static programs.
# No library of the MPI-5 standard ABI (libmpi_abi.so): PyPI's mpi4py
# wheel has no build for it, so none could load it (docs/python.md). The
# MPICH parts run under Intel MPI too (test/python TestWheel).
# auditwheel then checks the wheel against manylinux_2_28 with libmpi*
# excluded and tags it (`auditwheel repair`, which grafts nothing here).
#
# .venv-wheel (git-ignored) is made once with Debian's /usr/bin/python3
# from scripts/dev/requirements-wheel.txt, pinned (a stamp file records the
# list); .venv-wheel/wheelhouse holds the mpi4py
# wheel that test/python's install test installs offline (the pin of
# python/requirements-test.txt). The version is VERSION from make, else
# scripts/dev/version.sh. Prints the wheel's path on stdout.
# Cost measured on a 2-core machine: deps 20 s from nothing, a no-op
# afterwards; the wheel (12 MB) 3.5 min from empty Go and zig caches (Go's
# packages compiled for the static and both cgo builds), about 1 min after
# a change to the Go code, 22 s when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv=$PWD/.venv-wheel
req=scripts/dev/requirements-wheel.txt
glibc=2.28
plat=manylinux_2_28_x86_64
go=${GO:-go}

if [ "$(uname -m)" != x86_64 ]; then
	echo "kbundle: make wheel builds an x86-64 wheel; this machine is $(uname -m)" >&2
	exit 1
fi

deps() {
	local stamp=$venv/.kbundle-requirements start=$SECONDS
	if ! [ -x "$venv/bin/python" ] || ! cmp -s "$req" "$stamp"; then
		/usr/bin/python3 -c 'import venv, ensurepip' 2>/dev/null || {
			echo "kbundle: Debian's python3-venv is missing (scripts/dev/pyenv-mpi.sh deps installs it)" >&2
			exit 1
		}
		echo "kbundle: installing $req into .venv-wheel" >&2
		rm -f "$stamp"
		"$venv/bin/python" -c 'import sys' 2>/dev/null || { rm -rf "$venv"; /usr/bin/python3 -m venv "$venv"; }
		"$venv/bin/pip" install --quiet --no-cache-dir --disable-pip-version-check --only-binary=:all: -r "$req" >&2
		cp "$req" "$stamp"
		echo "kbundle: .venv-wheel ready in $((SECONDS - start)) s" >&2
	fi
	# The C compiler Go runs for cgo: zig's, for glibc $glibc. Its cache is
	# zig's own (~/.cache/zig), kept across clones as Go's is: its glibc
	# 2.28 stubs take a minute to build the first time.
	cat >"$venv/bin/zigcc" <<-EOF
		#!/bin/sh
		# Made by scripts/dev/wheel.sh: zig's C compiler for x86-64 Linux, glibc $glibc.
		exec "$venv/bin/python" -m ziglang cc -target x86_64-linux-gnu.$glibc "\$@"
	EOF
	chmod 755 "$venv/bin/zigcc"
	# MPICH's library under the name every MPICH-ABI MPI gives it.
	local mpich dir
	dir=$(mpicc.mpich -show | tr ' ' '\n' | sed -n 's/^-L//p' | head -1)
	mpich=${dir:-/usr/lib/x86_64-linux-gnu}/libmpich.so.12
	if ! [ "$venv/mpich-link/libmpi.so" -nt "$(readlink -f "$mpich")" ]; then
		mkdir -p "$venv/mpich-link"
		cp "$(readlink -f "$mpich")" "$venv/mpich-link/libmpi.so.tmp"
		"$venv/bin/patchelf" --set-soname libmpi.so.12 "$venv/mpich-link/libmpi.so.tmp"
		mv "$venv/mpich-link/libmpi.so.tmp" "$venv/mpich-link/libmpi.so"
	fi
	# The test's offline wheelhouse: mpi4py as python/requirements-test.txt pins it.
	local mpi4py
	mpi4py=$(grep -E '^mpi4py==' python/requirements-test.txt)
	mkdir -p "$venv/wheelhouse"
	if ! ls "$venv/wheelhouse/mpi4py-${mpi4py#mpi4py==}-"*.whl >/dev/null 2>&1; then
		"$venv/bin/pip" download --quiet --no-cache-dir --disable-pip-version-check --only-binary=:all: --no-deps \
			--python-version "$(/usr/bin/python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')" \
			-d "$venv/wheelhouse" "$mpi4py" >&2
	fi
}

deps
[ "${1:-}" = deps ] && exit 0

for cc in mpicc.openmpi mpicc.mpich; do
	command -v "$cc" >/dev/null || { echo "kbundle: $cc is missing (make deps installs it)" >&2; exit 1; }
done
version=${VERSION:-$(scripts/dev/version.sh)}
start=$SECONDS
out=$PWD/out/wheel
rm -rf "$out"
mkdir -p "$out/src"
# A copy of python/ without what `make python` may have left there.
cp -r python/pyproject.toml python/setup.py python/README.md python/kbundle "$out/src/"
pkg=$out/src/kbundle
rm -rf "${pkg:?}/bin" "$pkg/_version.py" "$pkg"/lib/libkbundle-* "$pkg/__pycache__"
mkdir "$pkg/bin"
printf '# Written by scripts/dev/wheel.sh.\n__version__ = "%s"\n' "$version" >"$pkg/_version.py"

# -s -w: no symbol table nor DWARF (a third of each program's size); Go's
# own tables for stack traces and `kbundle version` stay.
ldflags="-s -w -X github.com/kbundle/kbundle/internal/version.linked=$version"
build() { "$go" build -trimpath -ldflags "$ldflags" "$@"; }
CGO_ENABLED=0 build -o "$pkg/bin/kbundle-nompi" ./cmd/kbundle
CGO_ENABLED=0 build -o "$pkg/bin/kbundle" ./cmd/kbundle-front
# cgo: the -I flags of each MPI's compiler wrapper, zig's compiler, and
# the library to link named by its run-time soname.
ompi_cflags=$(mpicc.openmpi --showme:compile)
ompi_lib=$(mpicc.openmpi --showme:libdirs | cut -d' ' -f1)
mpich_cflags=$(mpicc.mpich -show | tr ' ' '\n' | grep '^-I' | tr '\n' ' ')
for what in openmpi mpich; do
	if [ $what = openmpi ]; then
		cflags=$ompi_cflags ldflags_c="-L$ompi_lib -lmpi"
	else
		cflags=$mpich_cflags ldflags_c="-L$venv/mpich-link -lmpi"
	fi
	export CC=$venv/bin/zigcc CGO_ENABLED=1 CGO_CFLAGS="-O2 -g $cflags" CGO_LDFLAGS="$ldflags_c"
	build -tags mpi -o "$pkg/bin/kbundle-$what" ./cmd/kbundle
	build -tags mpi -buildmode=c-shared -o "$pkg/lib/libkbundle-$what.so" ./cmd/libkbundle
	rm -f "$pkg/lib/libkbundle-$what.h"
	unset CC CGO_ENABLED CGO_CFLAGS CGO_LDFLAGS
done
# The library without MPI: cgo for the C interface only, no libmpi.
export CC=$venv/bin/zigcc CGO_ENABLED=1 CGO_CFLAGS="-O2 -g"
build -buildmode=c-shared -o "$pkg/lib/libkbundle-nompi.so" ./cmd/libkbundle
rm -f "$pkg/lib/libkbundle-nompi.h"
unset CC CGO_ENABLED CGO_CFLAGS
if readelf -d "$pkg/lib/libkbundle-nompi.so" | grep -q 'NEEDED.*libmpi'; then
	echo "kbundle: $pkg/lib/libkbundle-nompi.so needs a libmpi" >&2
	exit 1
fi
for f in "$pkg/bin/kbundle-openmpi" "$pkg/lib/libkbundle-openmpi.so"; do
	readelf -d "$f" | grep -q 'NEEDED.*\[libmpi\.so\.40\]' || { echo "kbundle: $f does not need libmpi.so.40" >&2; exit 1; }
done
for f in "$pkg/bin/kbundle-mpich" "$pkg/lib/libkbundle-mpich.so"; do
	readelf -d "$f" | grep -q 'NEEDED.*\[libmpi\.so\.12\]' || { echo "kbundle: $f does not need libmpi.so.12" >&2; exit 1; }
done

# pip builds the wheel from the copy, offline (setuptools is the build
# environment's own); auditwheel checks and tags it.
"$venv/bin/python" -m pip wheel --quiet --no-deps --no-build-isolation --no-index --disable-pip-version-check \
	-w "$out/raw" "$out/src" >&2
raw=$(ls "$out"/raw/kbundle-*.whl)
# --only-plat: the tag of the glibc the parts were built for, although
# auditwheel finds them eligible for older ones (their few glibc symbols
# are old): 2.28 is what zig's toolchain targeted and what is tested.
PATH=$venv/bin:$PATH "$venv/bin/auditwheel" repair --plat "$plat" --only-plat --exclude 'libmpi.so.*' -w "$out/repaired" "$raw" >&2
whl=$(ls "$out"/repaired/kbundle-*-py3-none-"$plat".whl)
# auditwheel's own report with libmpi left out: with Debian's libmpi.so.40
# on its search path it would count the symbols of libmpi's dependencies,
# not the wheel's. Its glibc symbols must allow $plat, and libmpi.so.40 and
# libmpi.so.12 be its only libraries outside the manylinux set.
mkdir "$out/no-libs"
"$venv/bin/auditwheel" show --json --ldpaths "$out/no-libs" "$whl" >"$out/show.json"
"$venv/bin/python" - "$out/show.json" "$glibc" <<'EOF'
import json, re, sys
r = json.load(open(sys.argv[1]))
want = int(sys.argv[2].split(".")[1])
m = re.fullmatch(r"manylinux_2_(\d+)_x86_64", r["sym_tag"])
libs = set(r["external_libs"]) - {"libmpi.so.12", "libmpi.so.40"}
if not m or int(m.group(1)) > want or libs:
    sys.exit(f"kbundle: auditwheel: glibc symbols allow {r['sym_tag']}, libraries outside manylinux {sorted(libs)}")
print(f"kbundle: auditwheel: glibc symbols allow {r['sym_tag']} (built for 2.{want}); "
      f"external libraries {sorted(r['external_libs'])}", file=sys.stderr)
EOF
mkdir -p dist
rm -f dist/kbundle-*.whl
mv "$whl" dist/
echo "kbundle: $(basename "$whl") in $((SECONDS - start)) s" >&2
echo "$PWD/dist/$(basename "$whl")"
