#!/usr/bin/env bash
# memory.sh [GIB...]: peak memory of every rank of `kbundle load`, for
# bundles of the given sizes in GiB (default: 1 4), under Open MPI and
# MPICH, on 4 ranks in 2 (fake) nodes of 2 ranks: rank 0 (reader, sender
# and its node's leader), rank 2 (a receiving leader) and ranks 1 and 3
# (waiting ranks). Peak RSS comes from /usr/bin/time per rank; the MPI
# library's own baseline (a C program that only calls MPI_Init, a barrier
# and MPI_Finalize, measured the same way) is printed beside it. The
# bundles hold incompressible data, so their size is what is moved.
# Writes a markdown table to stdout. Needs about 2.2 x GIB of free space
# under ${KBUNDLE_BENCH_DIR:-/tmp}.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=("$@")
[ ${#sizes[@]} -gt 0 ] || sizes=(1 4)
work=$(mktemp -d "${KBUNDLE_BENCH_DIR:-/tmp}/kbundle-membench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
for v in openmpi mpich; do
	CC=mpicc.$v go build -tags mpi -o "$work/kb-$v" ./cmd/kbundle
	printf '#include <mpi.h>\nint main(int c,char**v){MPI_Init(&c,&v);MPI_Barrier(MPI_COMM_WORLD);MPI_Finalize();return 0;}\n' >"$work/hello.c"
	mpicc.$v -o "$work/hello-$v" "$work/hello.c"
done
go build -o "$work/kb" ./cmd/kbundle
cat >"$work/rank.sh" <<'SH'
#!/bin/sh
r=${OMPI_COMM_WORLD_RANK:-$PMI_RANK}
exec /usr/bin/time -o "$KB_MEMDIR/rank$r" -f "%M" "$@"
SH
chmod +x "$work/rank.sh"
launch() { # variant command...
	if [ "$1" = openmpi ]; then
		shift
		timeout 900 mpirun.openmpi -np 4 -x KBUNDLE_TEST_RANKS_PER_NODE=2 -x KB_MEMDIR "$work/rank.sh" "$@"
	else
		shift
		timeout 900 mpiexec.hydra -n 4 -genv KBUNDLE_TEST_RANKS_PER_NODE 2 -genv KB_MEMDIR "$KB_MEMDIR" "$work/rank.sh" "$@"
	fi
}
mib() { echo $((($(cat "$1") + 512) / 1024)); }
echo "| bundle | MPI | rank 0 (reader + leader) | rank 2 (receiving leader) | ranks 1, 3 (waiting) | MPI library alone | load s |"
echo "|---|---|---|---|---|---|---|"
for g in "${sizes[@]}"; do
	src=$work/src$g
	mkdir -p "$src" "$work/b"
	for i in $(seq 0 $((g * 128 - 1))); do
		mkdir -p "$src/d$((i % 16))"
		head -c 8M /dev/urandom >"$src/d$((i % 16))/blob$i.bin"
	done
	"$work/kb" pack -q --level fastest --dir "$src" -o "$work/b/cache.kbundle"
	rm -rf "$src"
	for v in openmpi mpich; do
		export KB_MEMDIR=$work/mem-$v-$g
		mkdir -p "$KB_MEMDIR"
		launch "$v" "$work/hello-$v" >/dev/null
		base=$(mib "$KB_MEMDIR/rank1")
		t0=$(date +%s.%N)
		launch "$v" "$work/kb-$v" load -q --bundle "$work/b/cache.kbundle" --to "$work/dest-$v" >/dev/null
		t1=$(date +%s.%N)
		echo "| $g GiB | $v | $(mib "$KB_MEMDIR/rank0") MiB | $(mib "$KB_MEMDIR/rank2") MiB | $(mib "$KB_MEMDIR/rank1"), $(mib "$KB_MEMDIR/rank3") MiB | $base MiB | $(echo "$t1 - $t0" | bc -l | cut -c1-5) |"
		rm -rf "$work"/dest-"$v"*
	done
	rm -f "$work/b/cache.kbundle"
done
