#!/usr/bin/env bash
# demo.sh: the main job on a built-in sample, as a user runs it: a
# synthetic Triton-like kernel cache (what TRITON_CACHE_DIR holds) is
# packed with its preset, inspected and verified; 4 MPI ranks load it with
# `mpirun kbundle load`, which prints DEST and the export line to eval,
# and relocates Triton's group files to DEST; the job "compiles" a new
# kernel, and `kbundle harvest` (README.md's line, no --to: it finds the
# DEST by its install record) gathers it into a layer of the set, which
# the next load installs with the rest; `kbundle merge` folds it; a
# damaged bundle gives every rank the same reason; `kbundle clean` removes
# what the loads installed. Run by `make demo` (after `make build`).
# Everything is written under out/demo. bin/kbundle is the front that
# runs the build matching the MPI it runs under: bin/kbundle-nompi here,
# bin/kbundle-openmpi under mpirun.openmpi, bin/kbundle-mpich under
# mpiexec.hydra (cmd/kbundle-front).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=$PWD/out/demo
rm -rf "$out"
mkdir -p "$out/store" "$out/tmp"
chmod 700 "$out" "$out/store" "$out/tmp"
export TMPDIR=$out/tmp # the node-local DESTs: out/demo/tmp/kbundle-$USER-<job id>
say() { printf '\n== %s\n' "$*"; }
kb=bin/kbundle
kbmpi=bin/kbundle # the front: the Open MPI build under mpirun.openmpi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_vader_single_copy_mechanism=none
mpirun=(mpirun.openmpi --oversubscribe -np 4)

say "a sample Triton cache: 300 kernels in cache/triton, where TRITON_CACHE_DIR would point"
go run ./internal/cmd/gencache -kernels 300 -scale 0.5 "$out/cache/triton"

say "kbundle pack --preset triton: one bundle, the preset recorded in it"
$kb pack --dir "$out/cache" --preset triton -o "$out/store/cache.kbundle"

say "kbundle info, kbundle verify"
$kb info "$out/store/cache.kbundle" | grep -v cpu_flags
$kb verify "$out/store/cache.kbundle"

say "mpirun -np 4 kbundle load: rank 0 reads the bundle once; DEST and the export line on stdout"
# No --to, as in README.md: DEST is $TMPDIR/kbundle-$USER-<job id>, and a
# bare mpirun gives each launch a job id of its own.
"${mpirun[@]}" $kbmpi load --bundle "$out/store/cache.kbundle" | tee "$out/load.out"
eval "$(grep '^export ' "$out/load.out")"
dest=$(head -n 1 "$out/load.out")
echo "TRITON_CACHE_DIR is now $TRITON_CACHE_DIR"

say "the group files were relocated: they name DEST, not the warm-up directory"
grp=$(find "$dest/triton" -name '__grp__*.json' | sort | sed -n 1p)
echo "${grp#"$TMPDIR"/}:"
grep -o '"[^"]*\.ptx"' "$grp" | sed 's/^/  /'
grep -q "\"$dest/triton/" "$grp"

say "the job compiles a kernel the bundle lacked; kbundle harvest (README's line, no --to) gathers it into a layer"
new=$TRITON_CACHE_DIR/ZZDEMONEWKERNEL0000000000000000000000000000000000000
mkdir "$new"
echo 'compiled by this job' >"$new/new_kernel.cubin"
"${mpirun[@]}" $kbmpi harvest --bundle "$out/store/cache.kbundle" 2>&1 | tee "$out/harvest.out"
grep -q 'wrote a new layer' "$out/harvest.out"
$kb info "$out/store/cache.kbundle" | sed -n '/^layers:/,$p'

say "the next job loads the base and the layer as one: warm for the new kernel too"
dest2=$("${mpirun[@]}" $kbmpi load -q --bundle "$out/store/cache.kbundle" | head -n 1)
test -e "$dest2/triton/${new##*/}/new_kernel.cubin" && echo "the new kernel is in $dest2: the next job is warm for it too"

say "kbundle merge folds the layer into the base"
$kb merge "$out/store/cache.kbundle"

say "mpiexec.hydra -np 4 kbundle load (MPICH), with a damaged bundle: every rank gets the same reason"
cp "$out/store/cache.kbundle" "$out/store/damaged.kbundle"
printf 'X' | dd of="$out/store/damaged.kbundle" bs=1 seek=5000 conv=notrunc status=none
set +e
mpiexec.hydra -np 4 bin/kbundle load --bundle "$out/store/damaged.kbundle" --to "$out/node-local-3"
rc=$?
set -e
echo "exit status $rc (3: bundle unusable, the application would compile as usual)"
[ "$rc" -eq 3 ] && [ ! -e "$out/node-local-3" ]

say "kbundle clean: what the loads installed goes, and only that"
$kb clean "$dest" "$dest2"
left=$(find "$TMPDIR" -maxdepth 1 -name 'kbundle-*')
[ -z "$left" ] || { echo "kbundle: the demo left $left" >&2; exit 1; }
say "done: see $out"
