#!/usr/bin/env bash
# demo.sh: the main job on a built-in sample: a synthetic Triton-like kernel
# cache is generated, packed, inspected, verified, extracted, and loaded by 4
# MPI ranks with `mpirun kbundle load`. Run by `make demo` (after `make
# build`). Everything is written under out/demo. bin/kbundle is the front
# that runs the build matching the MPI it runs under: bin/kbundle-nompi
# here, bin/kbundle-openmpi under mpirun.openmpi, bin/kbundle-mpich under
# mpiexec.hydra (cmd/kbundle-front).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$PWD/out/demo
rm -rf "$out"
mkdir -p "$out"
chmod 700 "$out"
say() { printf '\n== %s\n' "$*"; }

say "generate a sample kernel cache (Triton-like, 300 kernels)"
go run ./internal/cmd/gencache -kernels 300 -scale 0.5 "$out/cache"

say "kbundle pack"
bin/kbundle pack --dir "$out/cache" -o "$out/cache.kbundle"

say "kbundle info"
bin/kbundle info "$out/cache.kbundle" | grep -v cpu_flags

say "kbundle verify"
bin/kbundle verify "$out/cache.kbundle"

say "kbundle extract"
bin/kbundle extract "$out/cache.kbundle" "$out/extracted"
diff -r -x .kbundle-installed "$out/cache" "$out/extracted" && echo "extracted tree equals the source"

say "mpirun -np 4 kbundle load (Open MPI: the front runs bin/kbundle-openmpi)"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun.openmpi --oversubscribe -np 4 bin/kbundle load \
	--bundle "$out/cache.kbundle" --to "$out/node-local"
diff -r -x .kbundle-installed "$out/cache" "$out/node-local" && echo "node-local copy equals the source"

say "mpiexec.hydra -np 4 kbundle load (MPICH: bin/kbundle-mpich), with a damaged bundle: every rank gets the same reason"
cp "$out/cache.kbundle" "$out/damaged.kbundle"
printf 'X' | dd of="$out/damaged.kbundle" bs=1 seek=5000 conv=notrunc status=none
set +e
mpiexec.hydra -np 4 bin/kbundle load --bundle "$out/damaged.kbundle" --to "$out/node-local-2"
rc=$?
set -e
echo "exit status $rc (3: bundle unusable, the application would compile as usual)"
[ "$rc" -eq 3 ] && [ ! -e "$out/node-local-2" ]
say "done: see $out"
