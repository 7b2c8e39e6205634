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
# files through a fresh mount), then times the first step of each
# framework (KBUNDLE_BENCH_FRAMEWORKS, default "numba jax": Numba's
# scripts/bench/firststep/numba_step.py, KBUNDLE_BENCH_NUMBA_N functions,
# default 56, with Debian's Python; JAX's jax_step.py, KBUNDLE_BENCH_JAX_N,
# default 16, with the pinned venv's; 3 nodes x 1 rank) from job start to
# its end, in 4 cases:
#   nfs     the framework's cache on the network file system, warm
#   local   a warm copy already on every node (the floor)
#   cli     mpirun kbundle load of the set on the network FS, then the step
#   inproc  the step loads the set itself (kbundle.load_bundle, mpi4py;
#           scripts/bench/bench_inproc.py) before it imports its
#           framework: one launch
# KBUNDLE_BENCH_RUNS runs (default 5), the cases interleaved in a rotated
# order, the client's caches dropped before each run (remount; the
# server's page cache stays warm). Prints every run, min/median/max, the
# ratios to nfs, and the smallest D at which each kbundle case beats nfs.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-5}
delays=${KBUNDLE_BENCH_DELAYS:-0 1 2 5}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
frameworks=${KBUNDLE_BENCH_FRAMEWORKS:-numba jax}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
inpath=$(inproc_path)
make python-lib >/dev/null
bench_cluster_up 3 "$rate"
pfs_up
go build -o "$work/delayproxy" ./internal/cmd/delayproxy
trap 'bench_status=$?; stop_proxy; bench_cleanup' EXIT
local=/tmp/node-local
mkdir -p "$work/fns"
/usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "${KBUNDLE_BENCH_NUMBA_N:-56}"
dest=$local/mdlat

# Each framework's set: the loop's first job (no set: an empty DEST, the
# step compiles cold, harvest writes the set), then warm copies for nfs
# and local. The load's version probe reads the job's own Python
# (KBUNDLE_PYTHON): Debian's for Numba, the venv's for JAX.
declare -A kbpy=()
for fw in $frameworks; do
	kbpy[$fw]=KBUNDLE_PYTHON=$([[ $fw == numba ]] && echo /usr/bin/python3 || echo "$venv_python")
	exports=$("${mpirun[@]}" env "${kbpy[$fw]}" "$kb" load -q --allow-missing --preset "$fw" --bundle "$pfs/set-$fw.kbundle" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
	"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >/dev/null
	"${mpirun[@]}" env "${kbpy[$fw]}" "$kb" harvest -q --bundle "$pfs/set-$fw.kbundle" --to "$dest" >/dev/null
	"$kb" extract -q "$pfs_server/set-$fw.kbundle" "$pfs_server/warm-$fw" >/dev/null
	"${mpirun[@]}" sh -c "rm -rf $dest $local/warm-$fw && $kb extract -q $pfs/set-$fw.kbundle $local/warm-$fw" >/dev/null
done
calib_setup

cases="nfs local cli inproc"
# misses: the ranks' misses in all (their JSON lines may share a line of
# mpirun's output).
misses() { python3 -c 'import re,sys; print(sum(int(m) for m in re.findall(r"\"misses\": (\d+)", open(sys.argv[1]).read())))' "$1"; }
echo "| D ms | stat ms | framework | case | min s | median s | max s | median / nfs | misses | runs (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|"
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
		for fw in $frameworks; do
			set=$pfs/set-$fw.kbundle
			# shellcheck disable=SC2086 # the cases, one per word
			for c in $(rotate "$r" $cases); do
				"${mpirun[@]}" sh -c "rm -rf $dest" >/dev/null
				pfs_remount
				t0=$(now)
				case $c in
				nfs | local)
					[[ $c == nfs ]] && warm=$pfs/warm-$fw || warm=$local/warm-$fw
					"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$(fw_env "$fw" "$warm")")" >"$work/out"
					;;
				cli)
					exports=$("${mpirun[@]}" env "${kbpy[$fw]}" "$kb" load -q --bundle "$set" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
					"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >"$work/out"
					;;
				inproc) "${mpirun[@]}" sh -c "$(step_cmd "$fw" "$inpath" KBUNDLE_BENCH_LOAD="$set" KBUNDLE_BENCH_DEST="$dest")" >"$work/out" ;;
				esac 2>>"$work/stderr.log"
				t1=$(now)
				all[$fw $c]+="$(echo "$t1 - $t0" | bc) "
				miss[$fw $c]+="$(misses "$work/out") "
			done
		done
	done
	for fw in $frameworks; do
		# shellcheck disable=SC2086 # the runs, one per word
		nfsmed=$(med ${all[$fw nfs]})
		for c in $cases; do
			# shellcheck disable=SC2086
			read -r lo mid hi < <(printf '%s\n' ${all[$fw $c]} | stats)
			printf '| %s | %s | %s | %s | %.2f | %.2f | %.2f | %.2f | %s| %s|\n' "$d" "$statms" "$fw" "$c" "$lo" "$mid" "$hi" \
				"$(echo "scale=3; $mid / $nfsmed" | bc)" "${miss[$fw $c]}" "${all[$fw $c]}"
			if [[ $c == cli || $c == inproc ]] && [[ -z ${cross[$fw $c]:-} ]] && (($(echo "$mid <= $nfsmed" | bc))); then
				cross[$fw $c]=$d
			fi
		done
	done
	unset all miss
done
echo
for fw in $frameworks; do
	for c in cli inproc; do
		echo "$fw, kbundle $c: at or below nfs from D = ${cross[$fw $c]:-never (in $delays)} ms"
	done
done
echo "3 nodes x 1 rank, links shaped to $rate each way (tc tbf), sshfs through a delay proxy adding D ms to each round trip to the file server; $runs runs of each case, interleaved, rotated; client caches dropped before each run, the server's page cache warm; $(nproc) cores; kbundle $("$kb" version | head -1)."
