#!/usr/bin/env bash
# bench.sh: kbundle against its baselines, measured in ONE run on the same
# data (run by `make bench` after `make build`):
#   pack      kbundle pack          vs tar -I 'zstd -T0 -3' -cf
#   extract   kbundle extract       vs zstd -d | tar -x        (into /dev/shm)
#   verify    kbundle verify        (GB/s of stored bytes: whole-file digest)
#             kbundle verify --deep (GB/s of content: every entry decoded)
# on a synthetic Triton-like cache (14,000 files, ~500 MB) and on a real
# Numba cache, then the MPI load benchmark (scripts/bench/load.sh).
# Each figure is the median of KBUNDLE_BENCH_RUNS runs (default 3). Results
# go to stdout and out/bench/results.md. KBUNDLE_BENCH_LOCAL is the node-local
# folder for the MPI load benchmark (default /dev/shm).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
scripts/dev/deps.sh bench
work=${KBUNDLE_BENCH_DIR:-$root/out/bench}
runs=${KBUNDLE_BENCH_RUNS:-3}
kernels=${KBUNDLE_BENCH_KERNELS:-2000}
numba_fns=${KBUNDLE_BENCH_NUMBA:-150}
kb=$root/bin/kbundle-nompi # the no-MPI build itself: no front in the timings
shm=/dev/shm/kbundle-bench.$$
mkdir -p "$work"
chmod 700 "$work"
trap 'rm -rf "$shm"' EXIT
results=$work/results.md
: >"$results"

now() { date +%s.%N; }
# median CMD...: runs CMD $runs times (with a per-run setup in $SETUP) and
# prints the median wall time in seconds.
median() {
	local ts=() t0 t1
	for _ in $(seq "$runs"); do
		[ -n "${SETUP:-}" ] && eval "$SETUP"
		t0=$(now)
		"$@" >/dev/null 2>&1
		t1=$(now)
		ts+=("$(echo "$t1 - $t0" | bc -l)")
	done
	printf '%s\n' "${ts[@]}" | sort -g | awk '{a[NR]=$1} END {printf "%.3f", a[int((NR+1)/2)]}'
}
ratio() { echo "scale=3; $1 / $2" | bc -l; }
size() { stat -c %s "$1"; }
kb_() { echo $((($1 + 500) / 1000)); } # bytes to kB
row() { printf '| %s | %s | %s | %s |\n' "$@" | tee -a "$results"; }

bench_tree() { # name dir
	local name=$1 dir=$2 raw files
	raw=$(du -sb "$dir" | cut -f1)
	files=$(find "$dir" -type f | wc -l)
	echo | tee -a "$results"
	echo "### $name: $files files, $(kb_ "$raw") kB" | tee -a "$results"
	echo | tee -a "$results"
	row "measure" "kbundle" "baseline" "kbundle / baseline"
	row "---" "---" "---" "---"
	local kbf=$work/$name.kbundle tzf=$work/$name.tar.zst
	tp=$(median "$kb" pack --dir "$dir" -o "$kbf")
	bp=$(median tar -C "$dir" -I 'zstd -T0 -3' -cf "$tzf" .)
	row "pack time (s), vs tar+zstd -3" "$tp" "$bp" "$(ratio "$tp" "$bp")"
	row "packed size (kB), vs tar+zstd -3" "$(kb_ "$(size "$kbf")")" "$(kb_ "$(size "$tzf")")" "$(ratio "$(size "$kbf")" "$(size "$tzf")")"
	SETUP="rm -rf $shm; mkdir -p $shm"
	te=$(median "$kb" extract "$kbf" "$shm/x")
	be=$(median sh -c "zstd -d -T0 -c '$tzf' | tar -x -C '$shm'")
	unset SETUP
	row "extract to /dev/shm (s), vs zstd -d \| tar x" "$te" "$be" "$(ratio "$te" "$be")"
	tv=$(median "$kb" verify "$kbf")
	row "verify (GB/s of stored bytes)" "$(echo "scale=2; $(size "$kbf") / $tv / 1000000000" | bc -l)" "-" "-"
	tv=$(median "$kb" verify --deep "$kbf")
	row "verify --deep (GB/s of content)" "$(echo "scale=2; $raw / $tv / 1000000000" | bc -l)" "-" "-"
}

{
	echo "# kbundle benchmark, $(date -u +%Y-%m-%d)"
	echo
	echo "Machine: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(free -g | awk '/Mem/ {print $2}') GiB, $(uname -r). Median of $runs runs; page cache warm for every tool alike."
} | tee -a "$results"

syn=$work/synthetic
if [ ! -d "$syn" ]; then
	go run ./internal/cmd/gencache -kernels "$kernels" "$syn.tmp" >/dev/null
	mv "$syn.tmp" "$syn"
fi
bench_tree synthetic-triton "$syn"

nb=$work/numba
if [ ! -d "$nb/cache" ]; then
	rm -rf "$nb"
	NUMBA_CACHE_DIR=$nb/cache /usr/bin/python3 scripts/bench/numba_cache.py "$nb/src" "$numba_fns" >/dev/null
fi
bench_tree real-numba "$nb/cache"

if [ -x scripts/bench/load.sh ]; then
	echo | tee -a "$results"
	# Node-local DEST in memory (as on nodes whose /tmp is tmpfs), so that
	# the figures measure kbundle and MPI rather than this VM's disk.
	TMPDIR=${KBUNDLE_BENCH_LOCAL:-/dev/shm} scripts/bench/load.sh "$syn" "$work/synthetic-triton.kbundle" | tee -a "$results"
fi
echo
echo "kbundle: results in $results" >&2
