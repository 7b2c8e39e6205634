#!/usr/bin/env bash
# start.sh: B1, the fixed cost of a load (`make bench-start`, issue 31;
# ../shared/reviews/2026-12-01b/benchmarks.md §3), as root.
#
# A load of a small set should cost little beyond the launch and MPI_Init
# that any MPI job pays. This times a ladder of launches on a 3-node
# namespace cluster (links shaped to KBUNDLE_BENCH_RATE, default 1gbit),
# Open MPI over TCP, at 1 and 4 ranks per node (KBUNDLE_BENCH_PPN), each
# case KBUNDLE_BENCH_RUNS times (default 5), interleaved, every run printed
# with its best and median:
#   true          mpirun true: the launch alone
#   hello         mpirun of a C program that calls MPI_Init and MPI_Finalize
#   empty         mpirun kbundle load of a set of no files
#   load PRESET   mpirun kbundle load --json of a 60-file, 0.3 MB set packed
#                 with --preset PRESET (triton, numba, jax, inductor), into a
#                 fresh DEST; its own cost is this minus hello
#   probe         the toolchain probe alone: mpirun python3 reading the
#                 versions load reads (importlib.metadata)
#   py-mpi4py     mpirun python3 -c 'from mpi4py import MPI' (an MPI Python
#                 application's own start)
#   py-inproc     the same, then kbundle.load_bundle(MPI.COMM_WORLD) of the
#                 numba set: in-process, inside the application's launch
# The set lives on the host file system every node sees. Needs the mpi4py
# environment of scripts/dev/pyenv-mpi.sh openmpi (made when missing) for
# the py-* cases.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-5}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
ppns=${KBUNDLE_BENCH_PPN:-1 4}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
python=$(scripts/dev/pyenv-mpi.sh openmpi)
make python-lib >/dev/null
bench_cluster_up 3 "$rate"
local=/tmp/node-local
mpicc.openmpi -O2 -o "$work/hello" -x c - <<'EOF'
#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }
EOF

# The sets: 60 files of 5 kB (random, as compiled code is to zstd), one
# per preset, and one of no files.
mkdir -p "$work/tree" "$work/empty"
for i in $(seq 1 60); do head -c 5000 /dev/urandom >"$work/tree/kernel$i.bin"; done
presets="triton numba jax inductor"
for p in $presets; do "$kb" pack -q --dir "$work/tree" -o "$work/$p.kbundle" --preset "$p" 2>/dev/null; done
"$kb" pack -q --dir "$work/empty" -o "$work/empty.kbundle" 2>/dev/null
chmod -R a+rX "$work"
probe='from importlib import metadata
for n in ("numba", "llvmlite", "jax", "jaxlib", "torch", "triton"):
    try: metadata.version(n)
    except Exception: pass'
inproc="from mpi4py import MPI; import kbundle, sys; kbundle.load_bundle(MPI.COMM_WORLD, bundle=sys.argv[1], dest=sys.argv[2])"
export PYTHONPATH=$PWD/python

# shellcheck disable=SC2086 # one case per preset
cases="true hello empty $(printf 'load-%s ' $presets)probe py-mpi4py py-inproc"
echo "| ranks | case | best s | median s | best - hello s | runs (s) |"
echo "|---|---|---|---|---|---|"
for ppn in $ppns; do
	np=$((3 * ppn))
	run=("${mpirun[@]:0:${#mpirun[@]}-4}" --host "kbn1:$ppn,kbn2:$ppn,kbn3:$ppn" -np "$np" -x PYTHONPATH)
	declare -A all=()
	for ((r = 0; r < runs; r++)); do
		for c in $cases; do
			"${run[@]}" sh -c "rm -rf $local/start" >/dev/null
			t0=$(now)
			case $c in
			true) "${run[@]}" true ;;
			hello) "${run[@]}" "$work/hello" ;;
			empty) "${run[@]}" "$kb" load -q --bundle "$work/empty.kbundle" --to "$local/start" ;;
			load-*) "${run[@]}" "$kb" load --json --bundle "$work/${c#load-}.kbundle" --to "$local/start" >/dev/null ;;
			probe) "${run[@]}" "$python" -c "$probe" ;;
			py-mpi4py) "${run[@]}" "$python" -c 'from mpi4py import MPI' ;;
			py-inproc) "${run[@]}" "$python" -c "$inproc" "$work/numba.kbundle" "$local/start" ;;
			esac 2>>"$work/stderr.log"
			t1=$(now)
			all[$c]+="$(echo "$t1 - $t0" | bc) "
		done
	done
	# shellcheck disable=SC2086 # the runs, one per word
	hello_best=$(printf '%s\n' ${all[hello]} | sort -g | head -1)
	for c in $cases; do
		# shellcheck disable=SC2086 # the runs, one per word
		best=$(printf '%s\n' ${all[$c]} | sort -g | head -1)
		# shellcheck disable=SC2086
		med=$(printf '%s\n' ${all[$c]} | median)
		printf '| 3 x %d | %s | %.3f | %.3f | %+.3f | %s|\n' "$ppn" "$c" "$best" "$med" "$(echo "$best - $hello_best" | bc)" "${all[$c]}"
	done
	unset all
done
echo
echo "3 nodes (namespaces), links shaped to $rate each way (tc tbf), Open MPI over TCP; $runs runs of each case, interleaved; $(nproc) cores. py-inproc - py-mpi4py is load_bundle's in-process cost; load-* - hello is the CLI load's own."
