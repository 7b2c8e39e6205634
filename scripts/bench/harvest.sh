#!/usr/bin/env bash
# harvest.sh: the harvest benchmarks (`make bench-harvest`, issue 17), as
# root, on a 3-node namespace cluster whose links are shaped to
# KBUNDLE_BENCH_RATE (default 1gbit) each way, with a real network file
# system as the shared one (sshfs served from the bridge, mounted on every
# node: scripts/bench/cluster.sh). One rank per node, Debian's Open MPI.
# KBUNDLE_BENCH_PARTS (default "harvest firststep") picks the parts,
# KBUNDLE_BENCH_RUNS (default 3) the runs of each case: runs outside,
# cases inside in an order rotated by one each run; every run is printed
# with min, median and max.
#
# harvest: a base set of 150 MB (150 cache units of 10 files of 100 kB, as
#   Triton hash directories; about 2:1 compressible) is loaded on every
#   node, then every node "compiles" 40 units the others compile too (the
#   same bytes) and 20 of its own, 5 files each: the delta is those 100
#   units, 50 MB or 200 MB (KBUNDLE_BENCH_DELTA_FILE_SIZES, bytes per file,
#   default "100000 400000"). Timed:
#     harvest      mpirun kbundle harvest (the leaders' lists, each unit
#                  once to rank 0, one layer written to the network FS)
#     launch       mpirun kbundle status of a DEST that does not exist: the
#                  launch and MPI_Init any collective pays, to net out
#     pack-delta   kbundle pack of the delta alone (on one node, from
#                  node-local storage to the network FS): a floor, since
#                  the delta is already gathered on one node and nothing is
#                  launched
#     pack+merge   every node packs its whole DEST to the network FS, the
#                  three become layers of a copy of the set, and merge folds
#                  them (the naive way without harvest)
#     node-layers  every node packs only its files newer than its install
#                  record (find -newer DEST/.kbundle-installed) and
#                  publishes them as its own layer, with no merge (the
#                  careful way without harvest: fast at 3 nodes, but the
#                  shared units are stored once per node and every job adds
#                  one layer per node)
#   KBUNDLE_BENCH_HARVEST_METHODS picks some of them (default all five);
#   KBUNDLE_BENCH_KB_B=BINARY adds harvest-b, the same harvest with another
#   kbundle build (an older commit's), interleaved with the others: an A/B
#   of one run. With the bytes the nodes sent and received over their links during each
#   (the last run's: the leaders' to rank 0, rank 0's to the file server,
#   the reads from it) against the layer's packed size, and the peak RSS of
#   rank 0 and of the other leaders (the last run's).
#
# firststep: the time to a warm first step, from job start to the end of
#   the first step, for one program per framework (scripts/bench/firststep:
#   Numba, JAX, PyTorch Inductor; sized so that a cold first step takes
#   30 s or more here, on every node at once), the same program in every
#   case:
#     cold         an empty cache on every node
#     nfs          a warm cache on the network FS (every lookup over the links)
#     local        a warm cache already on every node (the best case)
#     kbundle      `mpirun kbundle load --json` of the harvested set to
#                  node-local storage, then the program (both in the time)
#   The first cold run is the loop's first job: load --allow-missing, the
#   program cold (timed as the other cold runs, the load left out), then
#   harvest, which writes the set the other cases use; its wall time and
#   the harvest's share of it are printed below the table. Every run uses a
#   DEST of its own (fs-FW-jobN), as the next job's would be. The loads and
#   harvests of JAX and Inductor probe the venv's Python (KBUNDLE_PYTHON),
#   the one their programs run. Each run remounts the network FS, so every
#   read from it is client-cold (the server's page cache stays warm, as a
#   file server's does for hot files). Below the table, per framework:
#   kbundle - nfs and kbundle - local, the load job's wall time and the
#   load's own total_seconds. KBUNDLE_BENCH_KEEP=DIR keeps every rank's
#   JSON line (step_seconds, hits, misses) and every load's --json there.
# Prints markdown tables (docs/PERFORMANCE.md, "Harvest"). About 20 min with
# the defaults on 2 cores (the harvest part 5 min; Inductor's cold runs
# alone 5 min): KBUNDLE_BENCH_PARTS and KBUNDLE_BENCH_FRAMEWORKS run parts
# of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
parts=${KBUNDLE_BENCH_PARTS:-harvest firststep}
frameworks=${KBUNDLE_BENCH_FRAMEWORKS:-numba jax inductor}
deltas=${KBUNDLE_BENCH_DELTA_FILE_SIZES:-100000 400000} # bytes per file of the new units, one harvest case each
methods=${KBUNDLE_BENCH_HARVEST_METHODS:-harvest launch pack-delta pack+merge node-layers}
kb_b=${KBUNDLE_BENCH_KB_B:-}
[[ -z $kb_b ]] || methods+=" harvest-b"
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
bench_cluster_up 3 "$rate"
pfs_up
local=/tmp/node-local
exec 3>&2 2>>"$work/stderr.log"
bench_err=3
say() { echo "harvest.sh: $*" >&3; }
# bytes_since "SENT" "RECEIVED": what kbn1 and kbn2..kbn3 sent, then what
# they received, since the two linkbytes readings given
bytes_since() {
	local -a a b c d
	read -ra a <<<"$1"
	read -ra b <<<"$(linkbytes)"
	read -ra c <<<"$2"
	read -ra d <<<"$(linkbytes_in)"
	echo "$((b[0] - a[0])) $(((b[1] - a[1]) + (b[2] - a[2]))) $((d[0] - c[0])) $(((d[1] - c[1]) + (d[2] - c[2])))"
}
mib() { printf %.1f "$(echo "scale=3; $1 / 1048576" | bc)"; }
# ratio EXPR: EXPR's value to 2 decimals (bc's scale=2 prints .59)
ratio() { printf %.2f "$(echo "scale=4; $1" | bc)"; }
rssof() { # rssof WHAT: "rank 0 / other leaders" in MiB
	local r0 others
	r0=$(cat "$work/rss.$1.kbn1" 2>/dev/null || echo 0)
	others=$(cat "$work"/rss."$1".kbn[2-9] 2>/dev/null | sort -n | tail -1 || true)
	echo "$((r0 / 1024)) / $((${others:-0} / 1024))"
}
# runs_of VALUE...: "min / median / max" and every run, to 2 decimals
runs_of() {
	local min med max
	read -r min med max <<<"$(printf '%s\n' "$@" | stats)"
	printf '%.2f / %.2f / %.2f | %s' "$min" "$med" "$max" "$(printf '%.2f ' "$@" | sed 's/ $//')"
}

harvest_part() {
	local base=$work/hbase set=$pfs_server/hset.kbundle unit
	say "harvest: making the base"
	/usr/bin/python3 scripts/bench/gen_units.py "$base" base 150 10 100000 1
	"$kb" pack -q --dir "$base" -o "$set"
	chmod 0644 "$set"
	rm -rf "$base"
	for unit in $deltas; do
		harvest_case "$unit"
	done
}

# harvest_case UNIT: the harvest part for new files of UNIT bytes
harvest_case() {
	local unit=$1 set=$pfs_server/hset.kbundle dest=$local/hb r t0 t1 before before_in layer method stored
	local -A times=() bytes=()
	say "harvest: a delta of files of $unit bytes"
	"${mpirun[@]}" sh -c "rm -rf $dest"
	"${mpirun[@]}" "$kb" load -q --bundle "$pfs/hset.kbundle" --to "$dest" >/dev/null
	"${mpirun[@]}" sh -c "/usr/bin/python3 $PWD/scripts/bench/gen_units.py $dest shared 40 5 $unit 2 &&
		/usr/bin/python3 $PWD/scripts/bench/gen_units.py $dest own-\$(hostname) 20 5 $unit \${OMPI_COMM_WORLD_RANK}3"
	# The delta alone, for pack-delta: on kbn1's local storage.
	"$rsh" kbn1 "rm -rf $local/delta; /usr/bin/python3 $PWD/scripts/bench/gen_units.py $local/delta shared 40 5 $unit 2;
		for i in 1 2 3; do /usr/bin/python3 $PWD/scripts/bench/gen_units.py $local/delta own-kbn\$i 20 5 $unit \$((i - 1))3; done"
	# Runs outside, methods inside, in an order rotated by one each run.
	for ((r = 0; r < runs; r++)); do
		# shellcheck disable=SC2086 # the methods, split
		for method in $(rotate "$r" $methods); do
			case $method in
			harvest | harvest-b) rm -rf "$set.d" ;;
			pack-delta) rm -f "$pfs_server/delta.kbundle" ;;
			pack+merge | node-layers)
				rm -rf "$pfs_server/mset.kbundle" "$pfs_server/mset.kbundle.d"
				cp "$set" "$pfs_server/mset.kbundle"
				mkdir -m 0755 "$pfs_server/mset.kbundle.d"
				;;
			esac
			pfs_remount
			rm -f "$work"/rss."$method".*
			before=$(linkbytes)
			before_in=$(linkbytes_in)
			t0=$(now)
			case $method in
			harvest) # into the set as it was
				"${mpirun[@]}" sh -c "$(rss harvest) $kb harvest -q --bundle $pfs/hset.kbundle --to $dest" >/dev/null
				;;
			harvest-b) # the same, with the other build
				"${mpirun[@]}" sh -c "$(rss harvest-b) $kb_b harvest -q --bundle $pfs/hset.kbundle --to $dest" >/dev/null
				;;
			launch) # what any collective kbundle pays: mpirun, kbundle's start, MPI_Init, MPI_Finalize
				"${mpirun[@]}" "$kb" status "$local/none" >/dev/null
				;;
			pack-delta) # pack of the delta alone, already on one node
				"$rsh" kbn1 "$kb" pack -q --dir "$local/delta" -o "$pfs/delta.kbundle"
				;;
			pack+merge) # every node packs its DEST, then merge folds them into the set
				"${mpirun[@]}" sh -c "n=\$((OMPI_COMM_WORLD_RANK + 1)); l=$pfs/mset.kbundle.d/\$(printf %06d \$n)-0000000000000000.kbundle;
					$kb pack -q --dir $dest -o $pfs/mset.kbundle.d/.packing-\$n && : >$pfs/mset.kbundle.d/.\$(printf %06d \$n).claim && mv $pfs/mset.kbundle.d/.packing-\$n \$l"
				"$rsh" kbn1 "$(rss pack+merge) $kb merge -q --grace 0 $pfs/mset.kbundle"
				;;
			node-layers) # every node packs only the files newer than its install record, as its own layer; no merge
				"${mpirun[@]}" sh -c "n=\$((OMPI_COMM_WORLD_RANK + 1)); l=$pfs/mset.kbundle.d/\$(printf %06d \$n)-0000000000000000.kbundle; new=$local/new;
					rm -rf \$new && mkdir \$new && cd $dest && find . -type f -newer .kbundle-installed ! -name '.kbundle-*' -exec cp --parents -t \$new {} + &&
					$(rss node-layers) $kb pack -q --dir \$new -o $pfs/mset.kbundle.d/.packing-\$n && : >$pfs/mset.kbundle.d/.\$(printf %06d \$n).claim && mv $pfs/mset.kbundle.d/.packing-\$n \$l && rm -rf \$new"
				stored=$(cat "$pfs_server"/mset.kbundle.d/0*.kbundle | wc -c)
				;;
			esac
			t1=$(now)
			times[$method]+="$(echo "$t1 - $t0" | bc) "
			bytes[$method]=$(bytes_since "$before" "$before_in")
			[[ $method != harvest ]] || layer=$(stat -c %s "$set.d"/000001-*.kbundle)
		done
	done
	local -A med=()
	for method in $methods; do
		# shellcheck disable=SC2086 # the runs, split
		med[$method]=$(printf '%s\n' ${times[$method]} | median)
	done
	echo "### Harvest: 3 nodes, a 100-unit delta of $((unit * 500 / 1000000)) MB ($(mib "$layer") MiB packed) over a $(mib "$(stat -c %s "$set")") MiB base (packed)"
	echo
	echo "| method | min / median / max s | runs (s) | median x harvest | MiB sent by rank 0's node / by the other nodes | MiB received by rank 0's node / by the other nodes | sent / layer's packed size | peak RSS rank 0 / other leaders (MiB) |"
	echo "|---|---|---|---|---|---|---|---|"
	local s0 sl i0 il rssv
	for method in $methods; do
		read -r s0 sl i0 il <<<"${bytes[$method]}"
		case $method in
		harvest | harvest-b) rssv=$(rssof "$method") ;;
		pack+merge) rssv="$(rssof pack+merge) (merge, on kbn1)" ;;
		node-layers) rssv="$(rssof node-layers) (pack)" ;;
		*) rssv= ;;
		esac
		label=$method
		[[ $method != pack-delta ]] || label="pack-delta (floor: the delta already on one node, no launch)"
		[[ $method != launch ]] || label="launch (mpirun kbundle status: launch, MPI_Init, nothing else)"
		[[ $method != node-layers ]] || label="node-layers (each node packs its files newer than its install record as its own layer; no merge)"
		# shellcheck disable=SC2086 # the runs, split
		printf '| %s | %s | %.2f | %s / %s | %s / %s | %.2f | %s |\n' "$label" "$(runs_of ${times[$method]})" \
			"$(echo "scale=3; ${med[$method]} / ${med[harvest]}" | bc)" "$(mib "$s0")" "$(mib "$sl")" "$(mib "$i0")" "$(mib "$il")" \
			"$(echo "scale=3; ($s0 + $sl) / $layer" | bc)" "$rssv"
	done
	echo
	read -r _ hl _ _ <<<"${bytes[harvest]}"
	# The units rank 0 lacked are kbn2's and kbn3's own: 40 of the 100, as
	# large as the others, so about 0.4 of the layer's packed size.
	moved="$(echo "scale=2; $hl / (0.4 * $layer)" | bc)"
	if [[ -n ${med[pack-delta]:-} && -n ${med[launch]:-} ]]; then
		echo "- harvest / pack-delta = $(ratio "${med[harvest]} / ${med[pack-delta]}") (goal <= 1.5); launch-netted, (harvest - launch) / pack-delta = $(ratio "(${med[harvest]} - ${med[launch]}) / ${med[pack-delta]}") (medians; pack-delta pays no launch)."
		[[ -z ${med[harvest-b]:-} ]] || echo "- harvest-b ($kb_b): launch-netted, (harvest-b - launch) / pack-delta = $(ratio "(${med[harvest-b]} - ${med[launch]}) / ${med[pack-delta]}"); harvest / harvest-b = $(ratio "${med[harvest]} / ${med[harvest-b]}")."
	fi
	[[ -z ${med[pack+merge]:-} || -z ${med[node-layers]:-} ]] ||
		echo "- harvest / pack+merge = $(ratio "${med[harvest]} / ${med[pack+merge]}") (goal <= 0.5); harvest / node-layers = $(ratio "${med[harvest]} / ${med[node-layers]}"). node-layers stores $(mib "$stored") MiB in 3 layers, $(ratio "$stored / $layer") x harvest's one layer, and adds one layer per node per job."
	echo "- The other nodes' bytes sent in harvest are the units rank 0 lacked (2 x 20 units, compressed on the way, over MPI): $moved x their packed share of the layer (0.4 of it), each unit once. Rank 0's are the layer written to the file server, which it must cross once. Bytes received count what the nodes read from the file server and from each other (merge reads the base and the layers)."
	echo "- Bytes and peak RSS are the last run's, not medians."
	echo
}

# outcome FILE: the ranks' cache misses, summed, and the slowest rank's
# step_seconds (each rank prints one JSON line)
outcome() {
	/usr/bin/python3 -c 'import json,sys
d=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
print(sum(x["misses"] for x in d), "%.2f" % max(x["step_seconds"] for x in d))' "$1"
}

firststep_part() {
	local fw case r t0 t1 t2 tl tp set dest exports job=0 m st c
	local -a kbenv
	/usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "${KBUNDLE_BENCH_NUMBA_N:-56}" 2>/dev/null ||
		{ mkdir -p "$work/fns" && /usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "${KBUNDLE_BENCH_NUMBA_N:-56}"; }
	[[ -z ${KBUNDLE_BENCH_KEEP:-} ]] || mkdir -p "$KBUNDLE_BENCH_KEEP"
	echo "### Time to a warm first step: 3 nodes x 1 rank, $runs runs, cases interleaved (rotated order)"
	echo
	echo "| framework | case | min / median / max s | runs (s) | median x local | median x nfs | cold / this (medians) | slowest rank's step_seconds, median | cache misses (all ranks, each run) |"
	echo "|---|---|---|---|---|---|---|---|---|"
	local -a loopnotes=()
	for fw in $frameworks; do
		if [[ $fw != numba ]] && ! [[ -x $venv_python ]]; then
			say "no $venv_python (scripts/dev/venv.sh): $fw skipped"
			continue
		fi
		set=$pfs/set-$fw.kbundle
		# The load's and the harvest's version probe reads the job's own
		# Python: Debian's for Numba, the venv's for JAX and Inductor.
		kbenv=(env)
		[[ $fw == numba ]] || kbenv+=("KBUNDLE_PYTHON=$venv_python")
		local -A times=() miss=() steps=() ljob=() lown=()
		for ((r = 0; r < runs; r++)); do
			for case in $(rotate "$r" cold nfs local kbundle); do
				say "firststep $fw: $case, run $((r + 1))"
				# Every run loads into a DEST of its own, as the next
				# job's (named after its job id) would be.
				job=$((job + 1))
				dest=$local/fs-$fw-job$job
				"${mpirun[@]}" sh -c "rm -rf $local/fs-$fw-job*"
				pfs_remount
				t0=$(now)
				tp=0
				case $case in
				cold)
					if ((r == 0)); then
						# The loop's first job (rotation puts cold first
						# in run 1): no set yet, so load --allow-missing
						# installs an empty DEST; the program runs cold
						# (its time is this cold run's, the load left
						# out); harvest writes the set the other cases use.
						exports=$("${mpirun[@]}" "${kbenv[@]}" "$kb" load -q --allow-missing --preset "$fw" --bundle "$set" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
						tl=$(now)
						"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >"$work/out"
						t1=$(now)
						"${mpirun[@]}" "${kbenv[@]}" "$kb" harvest -q --bundle "$set" --to "$dest" >/dev/null
						t2=$(now)
						loopnotes+=("$fw: the first job $(printf %.1f "$(echo "$t2 - $t0" | bc)") s wall (load --allow-missing $(printf %.1f "$(echo "$tl - $t0" | bc)") s, the program cold, harvest $(printf %.1f "$(echo "$t2 - $t1" | bc)") s, $(echo "scale=1; 100 * ($t2 - $t1) / ($t2 - $t0)" | bc) % of the job); the set it wrote: $(stat -c %s "$pfs_server/set-$fw.kbundle") bytes")
						t0=$tl
						# The warm caches of the nfs and local cases: the set's files.
						rm -rf "$pfs_server/warm-$fw"
						"$kb" extract -q "$pfs_server/set-$fw.kbundle" "$pfs_server/warm-$fw" >/dev/null
						"${mpirun[@]}" sh -c "rm -rf $local/warm-$fw && $kb extract -q $set $local/warm-$fw" >/dev/null
					else
						"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$(fw_env "$fw" "$dest")")" >"$work/out"
						t1=$(now)
					fi
					;;
				nfs) "${mpirun[@]}" sh -c "$(step_cmd "$fw" "$(fw_env "$fw" "$pfs/warm-$fw")")" >"$work/out" ;;
				local) "${mpirun[@]}" sh -c "$(step_cmd "$fw" "$(fw_env "$fw" "$local/warm-$fw")")" >"$work/out" ;;
				kbundle)
					"${mpirun[@]}" "${kbenv[@]}" "$kb" load --json --bundle "$set" --to "$dest" >"$work/load.json"
					tl=$(now)
					# Reading the exports out of --json is the benchmark's
					# work, not the user's (a plain load prints them):
					# timed, and taken out of the run's time.
					exports=$(jq -r '.env | join(" ")' "$work/load.json")
					tp=$(echo "$(now) - $tl" | bc)
					# The set records the first job's presets: its load exports them.
					[[ -n $exports ]] || { say "the load of $set printed no exports"; exit 1; }
					"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >"$work/out"
					ljob[$fw]+="$(echo "$tl - $t0" | bc) "
					lown[$fw]+="$(jq -r .total_seconds "$work/load.json") "
					;;
				esac
				[[ $case == cold ]] || t1=$(now)
				times[$case]+="$(echo "$t1 - $t0 - $tp" | bc) "
				read -r m st <<<"$(outcome "$work/out")"
				miss[$case]+="$m "
				steps[$case]+="$st "
				if [[ -n ${KBUNDLE_BENCH_KEEP:-} ]]; then
					cp "$work/out" "$KBUNDLE_BENCH_KEEP/$fw-$case-run$((r + 1)).jsonl"
					[[ $case != kbundle ]] || cp "$work/load.json" "$KBUNDLE_BENCH_KEEP/$fw-load-run$((r + 1)).json"
				fi
			done
		done
		local -A med=()
		for case in cold nfs local kbundle; do
			# shellcheck disable=SC2086 # the runs, split
			med[$case]=$(printf '%s\n' ${times[$case]} | median)
		done
		for case in cold nfs local kbundle; do
			# shellcheck disable=SC2086 # the runs, split
			printf '| %s | %s | %s | %.2f | %.2f | %.1f | %s | %s |\n' "$fw" "$case" "$(runs_of ${times[$case]})" \
				"$(echo "scale=3; ${med[$case]} / ${med[local]}" | bc)" "$(echo "scale=3; ${med[$case]} / ${med[nfs]}" | bc)" \
				"$(echo "scale=2; ${med[cold]} / ${med[$case]}" | bc)" "$(printf '%s\n' ${steps[$case]} | median)" "${miss[$case]% }"
		done
		# shellcheck disable=SC2086 # the runs, split
		loopnotes+=("$fw: kbundle - nfs $(printf %+.2f "$(echo "${med[kbundle]} - ${med[nfs]}" | bc)") s, kbundle - local $(printf %+.2f "$(echo "${med[kbundle]} - ${med[local]}" | bc)") s, nfs - local $(printf %+.2f "$(echo "${med[nfs]} - ${med[local]}" | bc)") s (medians); the load job (mpirun kbundle load, start to exit) min / median / max $(runs_of ${ljob[$fw]} | sed 's/ |.*//') s, of which the load's own total_seconds (--json) $(runs_of ${lown[$fw]} | sed 's/ |.*//') s")
		unset times miss steps med
	done
	echo
	for c in "${loopnotes[@]}"; do echo "- $c"; done
	echo
}

for part in $parts; do
	"${part}_part"
done
echo "3 nodes x 1 rank, links shaped to $rate each way (tc tbf), the shared file system sshfs over them (client-cold: remounted before each run; the server's page cache warm); $runs runs each, cases interleaved; $(nproc) cores; $(date -u +%F) at $(git rev-parse --short HEAD 2>/dev/null || echo "?"); kbundle $("$kb" version | head -1)."
