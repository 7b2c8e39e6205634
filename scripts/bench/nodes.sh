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
# each, median. The shared file system is a real network file system:
# sshfs served from the bridge and mounted on every node and the Slurm
# controller (scripts/bench/cluster.sh), remounted before every run, so
# that each read of the bundle, by rank 0, by every rank in (a) or by
# sbcast, crosses the shaped links cold, as from NFS or Lustre.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
sizes=${KBUNDLE_BENCH_SIZES:-100 1000}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
bench_cluster_up 4 "$rate"
conf=$state/slurm/slurm.conf
# The bundles live on the network file system, mounted on the controller
# too (sbcast reads there).
pfs_nodes="$(seq -f 'kbn%g' -s ' ' 1 "$NODES") kbctl"
pfs_up
# The floor (bcast.c): rank 0 reads the file, MPI_Bcast, one writer per node.
mpicc.openmpi -O2 -o "$work/bcast" scripts/bench/bcast.c

# Slurm clients on the controller node (nsenter, not the rsh agent, which
# joins its arguments into one shell line as ssh does).
slurm() { nsenter -t "$(cat "$state/nodes/kbctl.pid")" -n -u -m --wd="$work" -- env SLURM_CONF="$conf" "$@"; }
local=/tmp/node-local
clean_nodes() { "${mpirun[@]}" sh -c "rm -rf $local/bench $local/bench.kbundle $local/.bench*" >/dev/null; }

maxrss() { cat "$work"/rss."$1".* 2>/dev/null | sort -n | tail -1; }

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

phase_ratios=()
printf '| bundle | method | median s | x floor | peak RSS rank 0 / other leaders (MiB) | phases (load: read / bcast / extract s) |\n'
printf '|---|---|---|---|---|---|\n'
for mb in $sizes; do
	make_bundle "$mb"
	b=$pfs/b$mb.kbundle # as the nodes see it
	bytes=$(stat -c %s "$pfs_server/b$mb.kbundle")
	declare -A med=() mem=() phases=()
	for method in floor load naive sbcast read bcast extract; do
		times=()
		for ((r = 0; r < runs; r++)); do
			clean_nodes
			pfs_remount # every run reads the bundle cold, over the links
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
				slurm salloc -N "$NODES" --quiet sh -c \
					"sbcast -f $b $local/bench.kbundle && srun -N $NODES -n $NODES sh -c '$(rss sbcast) $kb extract $local/bench.kbundle $local/bench'" >/dev/null
				;;
			floor)
				"${mpirun[@]}" sh -c "$(rss floor) $work/bcast $b $local/bench.kbundle && $kb extract $local/bench.kbundle $local/bench" >/dev/null
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
	rm -f "$pfs_server/b$mb.kbundle"
	clean_nodes
done
echo
printf '%s\n' "${phase_ratios[@]}"
echo "$NODES nodes x 1 rank, links shaped to $rate each way (tc tbf), the bundle on sshfs over them (remounted before each run); $runs runs each, median; $(nproc) cores."
