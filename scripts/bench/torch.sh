#!/usr/bin/env bash
# torch.sh: the no-MPI routes of a load against MPI's (`make bench-torch`,
# issue 28), as root, on a 3-node namespace cluster whose links are shaped
# to KBUNDLE_BENCH_RATE (default 1gbit) each way (scripts/bench/cluster.sh).
# The bundle: KBUNDLE_BENCH_MB (default 100) MB of random bytes in 4 files
# (incompressible: the worst case for the network). KBUNDLE_BENCH_RUNS
# (default 3) runs of each case: runs outside, cases inside in an order
# rotated by one each run; every run is printed, with best, median and
# ratios of the cases measured side by side. KBUNDLE_BENCH_PARTS (default
# "transport pernode") picks the parts.
#
# transport: kbundle.load_bundle in-process (scripts/bench/torch_load.py),
#   timed from a barrier to the end of the call, the largest over ranks,
#   so the launch (torchrun's rendezvous, mpirun's daemons, the imports) is
#   left out on both sides; the bundle on the host file system every node
#   sees (page cache warm: the transport alone), a fresh DEST each run;
#   KBUNDLE_BENCH_PPN (default "1 2") ranks per node:
#     gloo   torchrun --nnodes 3 --nproc-per-node PPN --rdzv-backend c10d,
#            one agent a node; dist.init_process_group("gloo") and
#            load_bundle(dist.group.WORLD): libkbundle without MPI, its
#            broadcast made of the group's send and recv (python/kbundle/_torch.py)
#     mpi    mpirun (Debian's Open MPI over TCP) of the same program with
#            mpi4py's MPI.COMM_WORLD: libkbundle-openmpi, MPI_Bcast
#   Each run's job wall time (launch included) is printed beside it.
#   The goal (issue 28): gloo / mpi <= 1.3 on the best times.
#
# pernode: the bundle on the network file system (sshfs served from the
#   bridge), every cache dropped before each run (the nodes' sshfs mounts
#   remade; the machine's page cache dropped where /proc/sys/vm/drop_caches
#   can be written, so the file server reads from disk too), a fresh DEST:
#     per-node    `kbundle load --per-node` (the build without MPI), one
#                 task a node started at once through the cluster's rsh
#                 (as pdsh would): every node reads the whole bundle
#     collective  mpirun kbundle load, one rank a node: rank 0 reads it
#                 once and broadcasts it
#   Wall time (launch included) and the load's own total_seconds (--json;
#   per-node: the slowest node's), and the bytes the file server sent
#   (the bridge's tx_bytes: what the host itself sent the nodes, not what
#   the bridge forwarded between them) against the bundle's size, with
#   what each node received over its link (linkbytes_in).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
ppns=${KBUNDLE_BENCH_PPN:-1 2}
mb=${KBUNDLE_BENCH_MB:-100}
parts=${KBUNDLE_BENCH_PARTS:-transport pernode}
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
# The venv of scripts/dev/venv.sh: torch and mpi4py's wheel, which opens
# Debian's Open MPI (libmpi.so.40) at run time; one Python for both sides.
python=$PWD/.venv/bin/python
torchrun=$PWD/.venv/bin/torchrun
[[ -x $torchrun ]] || { echo "torch.sh: no $torchrun: make .venv with scripts/dev/venv.sh" >&2; exit 1; }
"$python" -c 'import torch.distributed, mpi4py' || { echo "torch.sh: $python lacks torch or mpi4py" >&2; exit 1; }
make python-lib >/dev/null
nompi=$PWD/bin/kbundle-nompi
cores=$(nproc) # before OMP_NUM_THREADS, which nproc obeys
export PYTHONPATH=$PWD/python OMP_NUM_THREADS=1
bench_cluster_up 3 "$rate"
pfs_up
local=/tmp/node-local
prog=$PWD/scripts/bench/torch_load.py
exec 3>&2 2>>"$work/stderr.log"
bench_err=3

mkdir -p "$work/tree"
for i in 1 2 3 4; do head -c $((mb * 1000000 / 4)) /dev/urandom >"$work/tree/part$i.bin"; done
"$kb" pack -q --dir "$work/tree" -o "$pfs_server/b.kbundle"
rm -rf "$work/tree"
chmod 0644 "$pfs_server/b.kbundle"
bytes=$(stat -c %s "$pfs_server/b.kbundle")
clean_nodes() { "${mpirun[@]}" sh -c "rm -rf $local/tb-*" >/dev/null; }
# summary NAME TIMES...: "best median" of the times
best() { printf '%s\n' "$@" | sort -g | head -1; }
ratio() { printf %.2f "$(echo "scale=6; $1 / $2" | bc)"; }
port=29500
lines=()

if [[ " $parts " == *" transport "* ]]; then
	echo "## transport: load_bundle in-process, gloo (torchrun) against MPI (mpirun), $mb MB bundle ($bytes bytes), page cache warm"
	echo
	echo "| ranks | case | run | load s (max over ranks) | read / bcast / extract s (rank 0) | job wall s (launch included) |"
	echo "|---|---|---|---|---|---|"
	for ppn in $ppns; do
		run=("${mpirun[@]:0:${#mpirun[@]}-4}" --host "kbn1:$ppn,kbn2:$ppn,kbn3:$ppn" -np $((3 * ppn)) -x PYTHONPATH -x OMP_NUM_THREADS)
		declare -A all=()
		for ((r = 0; r < runs; r++)); do
			for c in $(rotate "$r" gloo mpi); do
				clean_nodes
				dest=$local/tb-$c-$ppn-$r
				rm -f "$work"/out.*
				t0=$(now)
				case $c in
				gloo)
					port=$((port + 1))
					pids=()
					for n in 1 2 3; do
						"$rsh" "kbn$n" "$torchrun" --nnodes 3 --nproc-per-node "$ppn" --rdzv-backend c10d \
							--rdzv-endpoint "198.18.0.1:$port" --rdzv-id "kbb$port" "$prog" gloo "$pfs_server/b.kbundle" "$dest" >"$work/out.$n" &
						pids+=($!)
					done
					for p in "${pids[@]}"; do wait "$p"; done
					;;
				mpi)
					"${run[@]}" "$python" "$prog" mpi "$pfs_server/b.kbundle" "$dest" >"$work/out.1"
					;;
				esac
				t1=$(now)
				res=$(cat "$work"/out.* | sed -n 's/^RESULT //p')
				[[ $(jq -r .ok <<<"$res") == true ]] || { echo "torch.sh: $c at $ppn a node: $res" >&3; exit 1; }
				s=$(jq -r .seconds <<<"$res")
				all[$c]+="$s "
				printf '| 3 x %d | %s | %d | %.3f | %s | %.2f |\n' "$ppn" "$c" "$((r + 1))" "$s" \
					"$(jq -r '"\(.read_seconds*1000|round/1000) / \(.bcast_seconds*1000|round/1000) / \(.extract_seconds*1000|round/1000)"' <<<"$res")" \
					"$(echo "$t1 - $t0" | bc)"
			done
		done
		# shellcheck disable=SC2086 # the runs, one per word
		gb=$(best ${all[gloo]}) mb_=$(best ${all[mpi]}) gm=$(med ${all[gloo]}) mm=$(med ${all[mpi]})
		lines+=("3 x $ppn: gloo best $(printf %.3f "$gb") s, median $(printf %.3f "$gm") s; mpi best $(printf %.3f "$mb_") s, median $(printf %.3f "$mm") s; gloo / mpi: best $(ratio "$gb" "$mb_"), median $(ratio "$gm" "$mm") (goal <= 1.3)")
		unset all
	done
	echo
	printf '%s\n' "${lines[@]}"
	echo
	lines=()
fi

if [[ " $parts " == *" pernode "* ]]; then
	drop=no
	if sync && echo 3 >/proc/sys/vm/drop_caches 2>/dev/null; then drop=yes; fi
	server() { cat /sys/class/net/kbbr0/statistics/tx_bytes; }
	echo "## pernode: kbundle load --per-node against the collective load, $mb MB bundle ($bytes bytes) on sshfs, caches dropped (page cache: $drop)"
	echo
	echo "| case | run | wall s | load total_seconds (slowest node) | MB from the file server (x bundle) | MB received per node |"
	echo "|---|---|---|---|---|---|"
	declare -A wall=() own=() srv=()
	for ((r = 0; r < runs; r++)); do
		for c in $(rotate "$r" per-node collective); do
			clean_nodes
			pfs_remount
			[[ $drop == no ]] || { sync && echo 3 >/proc/sys/vm/drop_caches; }
			dest=$local/tb-$c-$r
			rm -f "$work"/out.*
			s0=$(server)
			read -ra in0 <<<"$(linkbytes_in)"
			t0=$(now)
			case $c in
			per-node)
				pids=()
				for n in 1 2 3; do
					"$rsh" "kbn$n" "$nompi" load --per-node --json --bundle "$pfs/b.kbundle" --to "$dest" >"$work/out.$n" &
					pids+=($!)
				done
				for p in "${pids[@]}"; do wait "$p"; done
				;;
			collective)
				"${mpirun[@]}" "$kb" load --json --bundle "$pfs/b.kbundle" --to "$dest" >"$work/out.1"
				;;
			esac
			t1=$(now)
			s1=$(server)
			read -ra in1 <<<"$(linkbytes_in)"
			wt=$(echo "$t1 - $t0" | bc)
			o=$(cat "$work"/out.* | jq -s 'map(.total_seconds) | max')
			sent=$((s1 - s0))
			wall[$c]+="$wt " own[$c]+="$o " srv[$c]+="$sent "
			per=""
			for i in 0 1 2; do per+="$(((in1[i] - in0[i]) / 1000000)) "; done
			printf '| %s | %d | %.3f | %.3f | %d (%.2f) | %s|\n' "$c" "$((r + 1))" "$wt" "$o" "$((sent / 1000000))" \
				"$(echo "scale=4; $sent / $bytes" | bc)" "$per"
		done
	done
	echo
	for c in per-node collective; do
		# shellcheck disable=SC2086 # the runs, one per word
		lines+=("$c: wall best $(printf %.3f "$(best ${wall[$c]})") s, median $(printf %.3f "$(med ${wall[$c]})") s; load's own best $(printf %.3f "$(best ${own[$c]})") s, median $(printf %.3f "$(med ${own[$c]})") s; file server sent $(($(med ${srv[$c]}) / 1000000)) MB (median)")
	done
	# shellcheck disable=SC2086 # the runs, one per word
	lines+=("per-node / collective: wall best $(ratio "$(best ${wall[per-node]})" "$(best ${wall[collective]})"), median $(ratio "$(med ${wall[per-node]})" "$(med ${wall[collective]})"); load's own best $(ratio "$(best ${own[per-node]})" "$(best ${own[collective]})"), median $(ratio "$(med ${own[per-node]})" "$(med ${own[collective]})")")
	printf '%s\n' "${lines[@]}"
	echo
fi
clean_nodes
echo "3 nodes x PPN ranks (namespaces), links shaped to $rate each way (tc tbf), Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p') over TCP, torch $("$python" -c 'import torch; print(torch.__version__)'); $runs runs of each case, interleaved; $cores cores; $(date -u +%F) at $(git rev-parse --short HEAD 2>/dev/null || echo "?")."
