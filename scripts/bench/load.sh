#!/usr/bin/env bash
# load.sh CACHE_DIR BUNDLE: the MPI load benchmark (called by bench.sh).
# Times, for np 1, 2 and 4 ranks under Open MPI on this node:
#   load     mpirun kbundle load (rank 0 reads, leaders extract to DEST)
#   naive    every rank runs `kbundle extract BUNDLE` itself (a)
#   files    every rank copies the cache directory file by file (b)
#   sequential  a C MPI_Bcast of the bundle's bytes, then one kbundle
#            extract, nothing overlapped (c): a sequential baseline, which
#            the streaming load beats, not a floor
# and counts the file-metadata system calls that touch the shared location
# (CACHE_DIR and BUNDLE) during each, with strace -f -y -e trace=%file.
# Prints a markdown table with ratios. KBUNDLE_BENCH_RUNS (default 3) runs
# each, median. Needs mpicc.openmpi, mpirun.openmpi, strace, bc.
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 CACHE_DIR BUNDLE" >&2; exit 2; }
cache=$(realpath "$1")
bundle=$(realpath "$2")
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
work=$(mktemp -d "${TMPDIR:-/tmp}/kbundle-loadbench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
	OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader \
	OMPI_MCA_btl_vader_single_copy_mechanism=none

kb=$work/kbundle
CC=mpicc.openmpi go build -tags mpi -o "$kb" ./cmd/kbundle

# (c) the sequential baseline: rank 0 reads the file, MPI_Bcast to every rank,
# one writer per node (bcast.c).
mpicc.openmpi -O2 -o "$work/bcast" scripts/bench/bcast.c

mpirun="mpirun.openmpi --oversubscribe --allow-run-as-root"
dest=$work/dest
now() { date +%s.%N; }
# median CMD: median wall time of $runs runs of the shell command CMD,
# DEST cleared before each.
median() {
	local ts=() t0 t1
	for _ in $(seq "$runs"); do
		rm -rf "$dest"* "$work/floor.kbundle"
		t0=$(now)
		bash -c "$1" >/dev/null 2>&1 || { echo "load.sh: failed: $1" >&2; exit 1; }
		t1=$(now)
		ts+=("$(echo "$t1 - $t0" | bc -l)")
	done
	printf '%s\n' "${ts[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}
# shared CMD: file-metadata syscalls (execve aside) naming the shared
# location, and how many of them open the bundle, as "calls/opens".
shared() {
	rm -rf "$dest"* "$work/floor.kbundle"
	# -y: paths of descriptors too, since kbundle opens the bundle and
	# walks trees relative to directory descriptors (openat).
	strace -f -qq -y -e trace=%file -o "$work/strace" bash -c "$1" >/dev/null 2>&1 || true
	local all opens
	all=$(grep -v execve "$work/strace" | grep -cE "[\"<]($cache|$bundle)" || true)
	opens=$(grep -v execve "$work/strace" | grep -E "open" | grep -cE "(\"$bundle\"|= [0-9]+<$bundle>)" || true)
	echo "$all/$opens"
}
ratio() { echo "scale=2; $1 / $2" | bc -l | sed 's/^\./0./'; }

load="$mpirun -np NP $kb load --bundle $bundle --to $dest"
naive="$mpirun -np NP sh -c '$kb extract $bundle $dest.\$OMPI_COMM_WORLD_RANK'"
files="$mpirun -np NP sh -c 'cp -a $cache $dest.\$OMPI_COMM_WORLD_RANK'"
floor="$mpirun -np NP $work/bcast $bundle $work/floor.kbundle && $kb extract $work/floor.kbundle $dest"

echo "## MPI load (Open MPI, one node, $(nproc) cores; $(du -sh "$bundle" | cut -f1) bundle of $(find "$cache" -type f | wc -l) files; median of $runs)"
echo
echo "| np | load s | naive s (a) | files s (b) | sequential s (c) | load/sequential | load/naive | shared syscalls/bundle opens: load, naive, files |"
echo "|---|---|---|---|---|---|---|---|"
declare -A tload
for np in 1 2 4; do
	tl=$(median "${load//NP/$np}")
	tn=$(median "${naive//NP/$np}")
	tf=$(median "${files//NP/$np}")
	tc=$(median "${floor//NP/$np}")
	tload[$np]=$tl
	sl=$(shared "${load//NP/$np}")
	sn=$(shared "${naive//NP/$np}")
	sf=$(shared "${files//NP/$np}")
	echo "| $np | $tl | $tn | $tf | $tc | $(ratio "$tl" "$tc") | $(ratio "$tl" "$tn") | $sl, $sn, $sf |"
done
echo
echo "load time np 4 / np 1: $(ratio "${tload[4]}" "${tload[1]}") (target <= 1.2); load/sequential at np 4 (target <= 1.3) in the table."
