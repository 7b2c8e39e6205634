#!/usr/bin/env bash
# nodes.sh: the multi-node load benchmark (`make bench-nodes`), as root.
#
# Starts a 4-node namespace cluster (scripts/ci/nscluster-up.sh, its own
# state folder) whose links are shaped by tc to KBUNDLE_BENCH_RATE (default
# 1gbit) in each direction, and times, for bundles of about 100 MB and 1 GB
# (KBUNDLE_BENCH_SIZES, MB, default "100 1000"), one rank per node:
#   load     mpirun kbundle load (rank 0 reads once, broadcast, every node
#            extracts); per-phase times from `kbundle load --json`
#   load-srun
#            the same load launched by srun --mpi=pmix inside a Slurm
#            allocation taken before the clock starts, as sbcast is (the
#            same launcher on both sides)
#   naive    every rank reads the bundle from the shared file system and
#            extracts it (`kbundle extract`)                            (a)
#   sbcast   Slurm's sbcast of the bundle to every node, then a per-node
#            `kbundle extract` (srun), inside that allocation: no salloc
#            in the time                                                (b)
#   sequential
#            a C MPI_Bcast of the bundle's bytes to every node (one call
#            for the whole file; written to node-local storage), then a
#            per-node extract, in one mpirun, nothing overlapped: a
#            sequential baseline, not a floor (the streaming load
#            overlaps and beats it)                                     (c)
#   read, bcast, bcast-8m, extract
#            each phase of a load alone: rank 0 reading the bundle (cat),
#            the C MPI_Bcast alone (one call), the C MPI_Bcast in 8 MiB
#            calls (the chunk the load broadcasts: what the streaming
#            load's broadcast should approach), every node's extract
#            alone; the last lines give load / max(read, bcast-8m,
#            extract) (issue 10's limit)
# with the peak RSS of every rank (/usr/bin/time; the last run's), and
# prints a markdown table with min / median / max and the ratios of the
# medians to (c). KBUNDLE_BENCH_RUNS (default 3) runs each: runs outside,
# methods inside in an order rotated by one each run. Before the
# bundles, iperf3 (Debian's, installed with apt-get when missing; skipped,
# and said so, when it cannot be) measures TCP alone on each link, kbn1 to
# every other node, for what Open MPI's TCP path reaches beside it.
#
# The shared file system is a real network file system: sshfs served from
# the bridge (so the server reaches each node through that node's own
# shaped link: N links in all, not one) and mounted on every node and the
# Slurm controller (scripts/bench/cluster.sh), remounted before every run,
# so that each read of the bundle, by rank 0, by every rank in (a) or by
# sbcast, crosses the shaped links client-cold, as from NFS or Lustre (the
# server's page cache stays warm).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
sizes=${KBUNDLE_BENCH_SIZES:-100 1000}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
if ! command -v iperf3 >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends iperf3 >/dev/null 2>&1 || true
fi
bench_cluster_up 4 "$rate"
conf=$state/slurm/slurm.conf
# The bundles live on the network file system, mounted on the controller
# too (sbcast reads there).
pfs_nodes="$(seq -f 'kbn%g' -s ' ' 1 "$NODES") kbctl"
pfs_up
# (c) and the broadcasts alone (bcast.c): rank 0 reads the file, MPI_Bcast, one writer per node.
mpicc.openmpi -O2 -o "$work/bcast" scripts/bench/bcast.c

# Slurm clients on the controller node (nsenter, not the rsh agent, which
# joins its arguments into one shell line as ssh does).
slurm() { nsenter -t "$(cat "$state/nodes/kbctl.pid")" -n -u -m --wd="$work" -- env SLURM_CONF="$conf" "$@"; }
local=/tmp/node-local
clean_nodes() { "${mpirun[@]}" sh -c "rm -rf $local/bench $local/bench.kbundle $local/.bench*" >/dev/null; }

# The allocation sbcast and load-srun run in, taken once, before any clock
# starts (as a job script's steps run in the job's allocation).
slurm salloc -N "$NODES" --no-shell -J kbundle-bench 2>>"$work/stderr.log"
jobid=$(slurm squeue -h -n kbundle-bench -o %i | head -1)
[[ -n $jobid ]] || { echo "nodes.sh: salloc --no-shell made no allocation" >&2; exit 1; }

# iperf3 per link: TCP alone, kbn1 to each other node and back, 3 s each.
if command -v iperf3 >/dev/null; then
	echo "TCP alone (iperf3 -t 3, one stream), MB/s: kbn1 to / from each node:"
	for n in $(seq 2 "$NODES"); do
		"$rsh" "kbn$n" iperf3 -s -1 -D -B "198.18.0.$n" >/dev/null 2>&1
		sleep 0.3
		to=$("$rsh" kbn1 iperf3 -c "198.18.0.$n" -t 3 -J 2>/dev/null | jq '.end.sum_received.bits_per_second / 8e6' 2>/dev/null || echo "?")
		"$rsh" "kbn$n" iperf3 -s -1 -D -B "198.18.0.$n" >/dev/null 2>&1
		sleep 0.3
		from=$("$rsh" kbn1 iperf3 -c "198.18.0.$n" -t 3 -R -J 2>/dev/null | jq '.end.sum_received.bits_per_second / 8e6' 2>/dev/null || echo "?")
		printf -- '- kbn%d: %.1f / %.1f\n' "$n" "$to" "$from"
	done
	echo
else
	echo "iperf3 is not installed and apt-get could not install it: TCP alone per link not measured."
	echo
fi

# A cache tree of about MB megabytes: 64 files of random bytes (a JIT cache
# compresses somewhat; random bytes are the worst case for the network).
make_bundle() {
	local mb=$1 dir=$work/tree$1 i
	mkdir -p "$dir"
	for i in $(seq 1 64); do
		head -c $((mb * 1000000 / 64)) /dev/urandom >"$dir/kernel$i.bin"
	done
	"$kb" pack --dir "$dir" -o "$pfs_server/b$mb.kbundle" >/dev/null 2>&1
	rm -rf "$dir"
	chmod 0644 "$pfs_server/b$mb.kbundle"
}

methods="sequential load load-srun naive sbcast read bcast bcast-8m extract"
phase_ratios=()
printf '| bundle | method | min / median / max s | median x sequential (c) | peak RSS rank 0 / other leaders (MiB) | phases (load: read / bcast / extract s, median run) |\n'
printf '|---|---|---|---|---|---|\n'
for mb in $sizes; do
	make_bundle "$mb"
	b=$pfs/b$mb.kbundle # as the nodes see it
	bytes=$(stat -c %s "$pfs_server/b$mb.kbundle")
	declare -A times=() med=() mem=() phases=() ph=()
	for ((r = 0; r < runs; r++)); do
		# shellcheck disable=SC2086 # the methods, split
		for method in $(rotate "$r" $methods); do
			clean_nodes
			pfs_remount # every run reads the bundle cold, over the links
			rm -f "$work"/rss."$method".*
			if [[ $method == extract ]]; then # the bytes on every node first, untimed
				"${mpirun[@]}" sh -c "$work/bcast $b $local/bench.kbundle" >/dev/null 2>>"$work/stderr.log"
			fi
			t0=$(now)
			exec 3>&2 2>>"$work/stderr.log"
			case $method in
			load)
				"${mpirun[@]}" sh -c "$(rss load) $kb load --json --bundle $b --to $local/bench" >"$work/load.json"
				;;
			load-srun)
				slurm srun --jobid="$jobid" -N "$NODES" -n "$NODES" -O --mpi=pmix sh -c "$(rss load-srun) $kb load --json --bundle $b --to $local/bench" >"$work/load-srun.json"
				;;
			naive)
				"${mpirun[@]}" sh -c "$(rss naive) $kb extract $b $local/bench" >/dev/null
				;;
			sbcast)
				slurm sbcast --jobid="$jobid" -f "$b" "$local/bench.kbundle" &&
					slurm srun --jobid="$jobid" -N "$NODES" -n "$NODES" sh -c "$(rss sbcast) $kb extract $local/bench.kbundle $local/bench" >/dev/null
				;;
			sequential)
				"${mpirun[@]}" sh -c "$(rss sequential) $work/bcast $b $local/bench.kbundle && $kb extract $local/bench.kbundle $local/bench" >/dev/null
				;;
			# Each phase of a load alone (issue 10): rank 0 reading the
			# bundle, the bytes broadcast to every node, every node
			# extracting its copy (each with its launch, as load has one).
			read)
				"$rsh" kbn1 cat "$b" >/dev/null
				;;
			bcast)
				"${mpirun[@]}" sh -c "$(rss bcast) $work/bcast $b $local/bench.kbundle" >/dev/null
				;;
			bcast-8m)
				"${mpirun[@]}" sh -c "$(rss bcast-8m) $work/bcast $b $local/bench.kbundle 8388608" >/dev/null
				;;
			extract)
				"${mpirun[@]}" sh -c "$(rss extract) $kb extract $local/bench.kbundle $local/bench" >/dev/null
				;;
			esac
			exec 2>&3 3>&-
			t1=$(now)
			times[$method]+="$(echo "$t1 - $t0" | bc) "
			r0=$(cat "$work"/rss."$method".kbn1 2>/dev/null || echo 0)
			others=$(cat "$work"/rss."$method".kbn[2-9] 2>/dev/null | sort -n | tail -1 || true)
			mem[$method]="$((r0 / 1024)) / $((${others:-0} / 1024))"
			if [[ $method == load || $method == load-srun ]]; then
				ph[$method]+="$(jq -r '"\(.total_seconds) \(.read_seconds)/\(.bcast_seconds)/\(.extract_seconds)"' "$work/$method.json");"
			fi
		done
	done
	for method in $methods; do
		# shellcheck disable=SC2086 # the runs, split
		med[$method]=$(printf '%s\n' ${times[$method]} | median)
		# shellcheck disable=SC2086 # the runs, split
		read -r lo _ hi <<<"$(printf '%s\n' ${times[$method]} | stats)"
		times[$method]=$(printf '%.2f / %.2f / %.2f' "$lo" "${med[$method]}" "$hi")
		if [[ -n ${ph[$method]:-} ]]; then # the phases of the run whose total_seconds is the median
			phases[$method]=$(tr ';' '\n' <<<"${ph[$method]}" | sed '/^$/d' | sort -g | awk '{a[NR]=$2} END {print a[int((NR+1)/2)]}' |
				awk -F/ '{printf "%.2f / %.2f / %.2f", $1, $2, $3}')
		fi
	done
	for method in load load-srun sequential sbcast naive read bcast bcast-8m extract; do
		ratio=$(echo "scale=4; ${med[$method]} / ${med[sequential]}" | bc)
		printf '| %d MB (%s bytes) | %s | %s | %.2f | %s | %s |\n' "$mb" "$bytes" "$method" "${times[$method]}" "$ratio" "${mem[$method]}" "${phases[$method]:-}"
	done
	slowest=$(printf '%s\n' "${med[read]}" "${med[bcast-8m]}" "${med[extract]}" | sort -g | tail -1)
	phase_ratios+=("$mb MB: load / max(read, bcast-8m, extract alone) = $(printf %.2f "$(echo "scale=4; ${med[load]} / $slowest" | bc)") (medians: load $(printf %.2f "${med[load]}") s; read $(printf %.2f "${med[read]}"), bcast-8m $(printf %.2f "${med[bcast-8m]}"), extract $(printf %.2f "${med[extract]}") s; one-call bcast $(printf %.2f "${med[bcast]}") s); load-srun / sbcast = $(printf %.2f "$(echo "scale=4; ${med[load-srun]} / ${med[sbcast]}" | bc)") (one launcher, one allocation)")
	rm -f "$pfs_server/b$mb.kbundle"
	clean_nodes
	unset times med mem phases ph
done
slurm scancel "$jobid" || true
echo
printf '%s\n' "${phase_ratios[@]}"
echo "$NODES nodes x 1 rank, links shaped to $rate each way (tc tbf), the bundle on sshfs over them (client-cold: remounted before each run; the server's page cache warm); $runs runs each, methods interleaved, min / median / max; RSS the last run's; $(nproc) cores; $(date -u +%F) at $(git rev-parse --short HEAD 2>/dev/null || echo "?")."
