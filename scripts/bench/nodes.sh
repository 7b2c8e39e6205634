#!/usr/bin/env bash
# nodes.sh: the multi-node load benchmark (`make bench-nodes`), as root.
#
# Starts a 4-node namespace cluster (scripts/ci/nscluster-up.sh, its own
# state folder) whose links are shaped by tc to KBUNDLE_BENCH_RATE (default
# 1gbit) in each direction, and times, for bundles of about 100 MB and 1 GB
# (KBUNDLE_BENCH_SIZES, MB, default "100 1000"), one rank per node:
#   load     mpirun kbundle load (rank 0 reads once, broadcast, every node
#            extracts); per-phase times from `kbundle load --json`
#   naive    every rank reads the bundle from the shared file system and
#            extracts it (`kbundle extract`)                            (a)
#   sbcast   Slurm's sbcast of the bundle to every node, then a per-node
#            `kbundle extract` (srun)                                     (b)
#   floor    a C MPI_Bcast of the bundle's bytes to every node (written to
#            node-local storage), then a per-node extract                 (c)
#   read, bcast, extract
#            each phase of a load alone: rank 0 reading the bundle (cat),
#            the C MPI_Bcast alone, every node's extract alone; the last
#            lines give load / max(read, bcast, extract) (issue 10's limit)
# with the peak RSS of every rank (/usr/bin/time), and prints a markdown
# table with the ratios to the floor. KBUNDLE_BENCH_RUNS (default 3) runs
# each, median. The shared file system is this machine's disk with its page
# cache: reading it is far cheaper than a parallel file system under load,
# which flatters (a).
set -euo pipefail
cd "$(dirname "$0")/../.."
[[ $(id -u) == 0 ]] || { echo "nodes.sh: must run as root (namespaces, tc)" >&2; exit 1; }
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
sizes=${KBUNDLE_BENCH_SIZES:-100 1000}
NODES=4
export PATH=$PATH:/usr/local/go/bin

work=$(mktemp -d /tmp/kbundle-nodesbench.XXXXXX)
chmod 0755 "$work"
state=$work/cluster
cleanup() {
	status=$?
	if ((status != 0)) && [[ -s $work/stderr.log ]]; then
		echo "nodes.sh: failed; last lines of the runs' stderr:" >&2
		tail -n 20 "$work/stderr.log" >&2
	fi
	scripts/ci/nscluster-down.sh "$state" 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
KBUNDLE_NSCLUSTER_NODES=$NODES KBUNDLE_NSCLUSTER_LOCAL_SIZE=${KBUNDLE_BENCH_LOCAL_SIZE:-4g} \
	scripts/ci/nscluster-up.sh "$state" >/dev/null
rsh=$state/rsh
conf=$state/slurm/slurm.conf
hosts=$(seq -f 'kbn%g:1' -s, 1 $NODES)

# Shape every link both ways: the bridge's side of each veth (to the node)
# and the node's eth0 (from the node).
for n in $(seq 1 $NODES) ctl; do
	tc qdisc add dev "kbv$n" root tbf rate "$rate" burst 256kb latency 50ms
	node=kbn$n
	[[ $n == ctl ]] && node=kbctl
	"$rsh" "$node" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
done

kb=$work/kbundle
CC=mpicc.openmpi go build -tags mpi -o "$kb" ./cmd/kbundle
# The floor (bcast.c): rank 0 reads the file, MPI_Bcast, one writer per node.
mpicc.openmpi -O2 -o "$work/bcast" scripts/bench/bcast.c

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# shellcheck disable=SC2054 # the commas are MCA values
mpirun=(mpirun.openmpi --oversubscribe --mca plm_rsh_agent "$rsh"
	--mca oob_tcp_if_include 198.18.0.0/24 --mca btl_tcp_if_include 198.18.0.0/24
	--mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none
	--host "$hosts" -np "$NODES")
# Slurm clients on the controller node (nsenter, not the rsh agent, which
# joins its arguments into one shell line as ssh does).
slurm() { nsenter -t "$(cat "$state/nodes/kbctl.pid")" -n -u -m --wd="$work" -- env SLURM_CONF="$conf" "$@"; }
local=/tmp/node-local
# rss WHAT: a wrapper that records each rank's peak RSS (KiB) in work/rss.WHAT.HOST
rss() { echo /usr/bin/time -f %M -o "$work/rss.$1.\$(hostname)"; }
clean_nodes() { "${mpirun[@]}" sh -c "rm -rf $local/bench $local/bench.kbundle $local/.bench*" >/dev/null; }

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
maxrss() { cat "$work"/rss."$1".* 2>/dev/null | sort -n | tail -1; }

# A cache tree of about MB megabytes: 64 files of random bytes (a JIT cache
# compresses somewhat; random bytes are the worst case for the network).
make_bundle() {
	local mb=$1 dir=$work/tree$1 i
	mkdir -p "$dir"
	for i in $(seq 1 64); do
		head -c $((mb * 1000000 / 64)) /dev/urandom >"$dir/kernel$i.bin"
	done
	"$kb" pack --dir "$dir" -o "$work/b$mb.kbundle" >/dev/null 2>&1
	rm -rf "$dir"
	chmod 0644 "$work/b$mb.kbundle"
}

phase_ratios=()
printf '| bundle | method | median s | x floor | peak RSS rank 0 / other leaders (MiB) | phases (load: read / bcast / extract s) |\n'
printf '|---|---|---|---|---|---|\n'
for mb in $sizes; do
	make_bundle "$mb"
	b=$work/b$mb.kbundle
	bytes=$(stat -c %s "$b")
	declare -A med=() mem=() phases=()
	for method in floor load naive sbcast read bcast extract; do
		times=()
		for ((r = 0; r < runs; r++)); do
			clean_nodes
			rm -f "$work"/rss.$method.*
			if [[ $method == extract ]]; then # the bytes on every node first, untimed
				"${mpirun[@]}" sh -c "$work/bcast $b $local/bench.kbundle" >/dev/null 2>>"$work/stderr.log"
			fi
			t0=$(now)
			exec 3>&2 2>>"$work/stderr.log"
			case $method in
			load)
				"${mpirun[@]}" sh -c "$(rss load) $kb load --json --bundle $b --to $local/bench" >"$work/load.json"
				;;
			naive)
				"${mpirun[@]}" sh -c "$(rss naive) $kb extract $b $local/bench" >/dev/null
				;;
			sbcast)
				slurm salloc -N $NODES --quiet sh -c \
					"sbcast -f $b $local/bench.kbundle && srun -N $NODES -n $NODES sh -c '$(rss sbcast) $kb extract $local/bench.kbundle $local/bench'" >/dev/null
				;;
			floor)
				"${mpirun[@]}" sh -c "$(rss floor) $work/bcast $b $local/bench.kbundle && $kb extract $local/bench.kbundle $local/bench" >/dev/null
				;;
			# Each phase of a load alone (issue 10): rank 0 reading the
			# bundle, the bytes broadcast to every node, every node
			# extracting its copy (each with its launch, as load has one).
			read)
				cat "$b" >/dev/null
				;;
			bcast)
				"${mpirun[@]}" sh -c "$(rss bcast) $work/bcast $b $local/bench.kbundle" >/dev/null
				;;
			extract)
				"${mpirun[@]}" sh -c "$(rss extract) $kb extract $local/bench.kbundle $local/bench" >/dev/null
				;;
			esac
			exec 2>&3 3>&-
			t1=$(now)
			times+=("$(echo "$t1 - $t0" | bc)")
		done
		med[$method]=$(printf '%s\n' "${times[@]}" | median)
		r0=$(cat "$work"/rss.$method.kbn1 2>/dev/null || echo 0)
		others=$(cat "$work"/rss.$method.kbn[2-9] 2>/dev/null | sort -n | tail -1 || true)
		mem[$method]="$((r0 / 1024)) / $((${others:-0} / 1024))"
		if [[ $method == load ]]; then
			phases[$method]=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("%.2f / %.2f / %.2f" % (d["read_seconds"], d["bcast_seconds"], d["extract_seconds"]))' "$work/load.json")
		fi
	done
	for method in load floor sbcast naive read bcast extract; do
		ratio=$(echo "scale=2; ${med[$method]} / ${med[floor]}" | bc)
		printf '| %d MB (%s bytes) | %s | %.2f | %s | %s | %s |\n' "$mb" "$bytes" "$method" "${med[$method]}" "$ratio" "${mem[$method]}" "${phases[$method]:-}"
	done
	slowest=$(printf '%s\n' "${med[read]}" "${med[bcast]}" "${med[extract]}" | sort -g | tail -1)
	phase_ratios+=("$mb MB: load / max(read, bcast, extract alone) = $(echo "scale=2; ${med[load]} / $slowest" | bc) (load ${med[load]} s; read ${med[read]}, bcast ${med[bcast]}, extract ${med[extract]} s)")
	rm -f "$b"
	clean_nodes
done
echo
printf '%s\n' "${phase_ratios[@]}"
echo "$NODES nodes x 1 rank, links shaped to $rate each way (tc tbf), $runs runs each, median; $(nproc) cores."
