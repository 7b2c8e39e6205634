#!/usr/bin/env bash
# harvest.sh: the harvest benchmarks (`make bench-harvest`, issue 17), as
# root, on a 3-node namespace cluster whose links are shaped to
# KBUNDLE_BENCH_RATE (default 1gbit) each way, with a real network file
# system as the shared one (sshfs served from the bridge, mounted on every
# node: scripts/bench/cluster.sh). One rank per node, Debian's Open MPI.
# KBUNDLE_BENCH_PARTS (default "harvest firststep") picks the parts,
# KBUNDLE_BENCH_RUNS (default 3) the runs of each case (median).
#
# harvest: a base set of 150 MB (150 cache units of 10 files of 100 kB, as
#   Triton hash directories; about 2:1 compressible) is loaded on every
#   node, then every node "compiles" 40 units the others compile too (the
#   same bytes) and 20 of its own, 5 files each: the delta is those 100
#   units, 50 MB or 200 MB (KBUNDLE_BENCH_DELTA_FILE_SIZES, bytes per file,
#   default "100000 400000"). Timed:
#     harvest      mpirun kbundle harvest (the leaders' lists, each unit
#                  once to rank 0, one layer written to the network FS)
#     pack-delta   kbundle pack of the delta alone (on one node, from
#                  node-local storage to the network FS)
#     pack+merge   every node packs its whole DEST to the network FS, the
#                  three become layers of a copy of the set, and merge folds
#                  them (what a user can do without harvest)
#   with the bytes the nodes sent over their links during each (the
#   leaders' to rank 0, rank 0's to the file server) against the layer's
#   packed size, and the peak RSS of rank 0 and of the other leaders.
#
# firststep: the time to a warm first step, from job start to the end of
#   the first step, for one program per framework (scripts/bench/firststep:
#   Numba, JAX, PyTorch Inductor; sized so that a cold first step takes
#   30 s or more here, on every node at once), the same program in every
#   case:
#     cold         an empty cache on every node
#     nfs          a warm cache on the network FS (every lookup over the links)
#     local        a warm cache already on every node (the best case)
#     kbundle      `mpirun kbundle load` of the harvested set to node-local
#                  storage, then the program (both in the time)
#   The first cold run is the loop's first job: load --allow-missing, the
#   program cold (timed as the other cold runs, the load left out), then
#   harvest, which writes the set the other cases use; its wall time and
#   the harvest's share of it are printed below the table. Each run
#   remounts the network FS, so every read from it is cold.
# Prints markdown tables (docs/PERFORMANCE.md, "Harvest"). About 17 min with
# the defaults on 2 cores (the harvest part 3 min; Inductor's cold runs
# alone 5 min): KBUNDLE_BENCH_PARTS and KBUNDLE_BENCH_FRAMEWORKS run parts
# of it.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
parts=${KBUNDLE_BENCH_PARTS:-harvest firststep}
frameworks=${KBUNDLE_BENCH_FRAMEWORKS:-numba jax inductor}
deltas=${KBUNDLE_BENCH_DELTA_FILE_SIZES:-100000 400000} # bytes per file of the new units, one harvest case each
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
bench_cluster_up 3 "$rate"
pfs_up
local=/tmp/node-local
venv_python=$PWD/.venv/bin/python
exec 3>&2 2>>"$work/stderr.log"
bench_err=3
say() { echo "harvest.sh: $*" >&3; }
# bytes_since "N1 N2 N3": what kbn1 sent and what kbn2..kbn3 sent since then
bytes_since() {
	local -a a b
	read -ra a <<<"$1"
	read -ra b <<<"$(linkbytes)"
	echo "$((b[0] - a[0])) $(((b[1] - a[1]) + (b[2] - a[2])))"
}
mib() { echo "scale=1; $1 / 1048576" | bc; }
rssof() { # rssof WHAT: "rank 0 / other leaders" in MiB
	local r0 others
	r0=$(cat "$work/rss.$1.kbn1" 2>/dev/null || echo 0)
	others=$(cat "$work"/rss."$1".kbn[2-9] 2>/dev/null | sort -n | tail -1 || true)
	echo "$((r0 / 1024)) / $((${others:-0} / 1024))"
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
	local unit=$1 set=$pfs_server/hset.kbundle dest=$local/hb r t0 t1 before layer sent_h sent_p sent_m
	local -a th=() tp=() tm=()
	say "harvest: a delta of files of $unit bytes"
	"${mpirun[@]}" sh -c "rm -rf $dest"
	"${mpirun[@]}" "$kb" load -q --bundle "$pfs/hset.kbundle" --to "$dest" >/dev/null
	"${mpirun[@]}" sh -c "/usr/bin/python3 $PWD/scripts/bench/gen_units.py $dest shared 40 5 $unit 2 &&
		/usr/bin/python3 $PWD/scripts/bench/gen_units.py $dest own-\$(hostname) 20 5 $unit \${OMPI_COMM_WORLD_RANK}3"
	# The delta alone, for pack-delta: on kbn1's local storage.
	"$rsh" kbn1 "rm -rf $local/delta; /usr/bin/python3 $PWD/scripts/bench/gen_units.py $local/delta shared 40 5 $unit 2;
		for i in 1 2 3; do /usr/bin/python3 $PWD/scripts/bench/gen_units.py $local/delta own-kbn\$i 20 5 $unit \$((i - 1))3; done"
	for ((r = 0; r < runs; r++)); do
		# harvest, into the set as it was
		rm -rf "$set.d"
		pfs_remount
		rm -f "$work"/rss.harvest.*
		before=$(linkbytes)
		t0=$(now)
		"${mpirun[@]}" sh -c "$(rss harvest) $kb harvest -q --bundle $pfs/hset.kbundle --to $dest" >/dev/null
		t1=$(now)
		th+=("$(echo "$t1 - $t0" | bc)")
		sent_h=$(bytes_since "$before")
		layer=$(stat -c %s "$set.d"/000001-*.kbundle)
		# pack of the delta alone
		rm -f "$pfs_server/delta.kbundle"
		pfs_remount
		before=$(linkbytes)
		t0=$(now)
		"$rsh" kbn1 "$kb" pack -q --dir "$local/delta" -o "$pfs/delta.kbundle"
		t1=$(now)
		tp+=("$(echo "$t1 - $t0" | bc)")
		sent_p=$(bytes_since "$before")
		# every node packs its DEST, then merge folds them into the set
		rm -rf "$pfs_server/mset.kbundle" "$pfs_server/mset.kbundle.d"
		cp "$set" "$pfs_server/mset.kbundle"
		mkdir -m 0755 "$pfs_server/mset.kbundle.d"
		pfs_remount
		rm -f "$work"/rss.merge.*
		before=$(linkbytes)
		t0=$(now)
		"${mpirun[@]}" sh -c "n=\$((OMPI_COMM_WORLD_RANK + 1)); l=$pfs/mset.kbundle.d/\$(printf %06d \$n)-0000000000000000.kbundle;
			$kb pack -q --dir $dest -o $pfs/mset.kbundle.d/.packing-\$n && : >$pfs/mset.kbundle.d/.\$(printf %06d \$n).claim && mv $pfs/mset.kbundle.d/.packing-\$n \$l"
		"$rsh" kbn1 "$(rss merge) $kb merge -q --grace 0 $pfs/mset.kbundle"
		t1=$(now)
		tm+=("$(echo "$t1 - $t0" | bc)")
		sent_m=$(bytes_since "$before")
	done
	local mh mp mm
	mh=$(printf '%s\n' "${th[@]}" | median)
	mp=$(printf '%s\n' "${tp[@]}" | median)
	mm=$(printf '%s\n' "${tm[@]}" | median)
	read -r h0 hl <<<"$sent_h"
	read -r p0 pl <<<"$sent_p"
	read -r m0 ml <<<"$sent_m"
	echo "### Harvest: 3 nodes, a 100-unit delta of $((unit * 500 / 1000000)) MB ($(mib "$layer") MiB packed) over a $(mib "$(stat -c %s "$set")") MiB base (packed)"
	echo
	echo "| method | median s | x harvest | MiB sent by rank 0's node / by the other nodes | sent / layer's packed size | peak RSS rank 0 / other leaders (MiB) |"
	echo "|---|---|---|---|---|---|"
	printf '| harvest | %.2f | 1.00 | %s / %s | %.2f | %s |\n' "$mh" "$(mib "$h0")" "$(mib "$hl")" "$(echo "scale=3; ($h0 + $hl) / $layer" | bc)" "$(rssof harvest)"
	# The units rank 0 lacked are kbn2's and kbn3's own: 40 of the 100, as
	# large as the others, so about 0.4 of the layer's packed size.
	moved="$(echo "scale=2; $hl / (0.4 * $layer)" | bc)"
	printf '| pack-delta | %.2f | %.2f | %s / %s | %.2f | |\n' "$mp" "$(echo "scale=3; $mp / $mh" | bc)" "$(mib "$p0")" "$(mib "$pl")" "$(echo "scale=3; ($p0 + $pl) / $layer" | bc)"
	printf '| pack+merge | %.2f | %.2f | %s / %s | %.2f | %s (merge, on kbn1) |\n' "$mm" "$(echo "scale=3; $mm / $mh" | bc)" "$(mib "$m0")" "$(mib "$ml")" "$(echo "scale=3; ($m0 + $ml) / $layer" | bc)" "$(rssof merge)"
	echo
	echo "harvest / pack-delta = $(echo "scale=2; $mh / $mp" | bc) (goal <= 1.5); harvest / pack+merge = $(echo "scale=2; $mh / $mm" | bc) (goal <= 0.5)."
	echo "The other nodes' bytes are the units rank 0 lacked (2 x 20 units, compressed on the way, over MPI): $moved x their packed share of the layer (0.4 of it), each unit once. Rank 0's are the layer written to the file server, which it must cross once."
	echo
}

# fw_env FW DIR: the variables the framework's kbundle preset exports for DIR
fw_env() {
	case $1 in
	numba) echo "NUMBA_CACHE_DIR=$2/numba" ;;
	jax) echo "JAX_COMPILATION_CACHE_DIR=$2/jax JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none" ;;
	inductor) echo "TORCHINDUCTOR_CACHE_DIR=$2/inductor TRITON_CACHE_DIR=$2/triton" ;;
	esac
}

# step FW ENV...: the program's command line on every rank
step_cmd() {
	local fw=$1
	shift
	case $fw in
	numba) echo "env $* KBUNDLE_BENCH_FNS=$work/fns /usr/bin/python3 $PWD/scripts/bench/firststep/numba_step.py" ;;
	jax) echo "env $* KBUNDLE_BENCH_N=${KBUNDLE_BENCH_JAX_N:-16} $venv_python $PWD/scripts/bench/firststep/jax_step.py" ;;
	inductor) echo "env $* KBUNDLE_BENCH_N=${KBUNDLE_BENCH_INDUCTOR_N:-2} $venv_python $PWD/scripts/bench/firststep/inductor_step.py" ;;
	esac
}

# misses FILE: the ranks' cache misses, summed
misses() { /usr/bin/python3 -c 'import json,sys; print(sum(json.loads(l)["misses"] for l in open(sys.argv[1]) if l.startswith("{")))' "$1"; }

firststep_part() {
	local fw case r t0 t1 t2 tl set dest exports
	/usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "${KBUNDLE_BENCH_NUMBA_N:-56}" 2>/dev/null ||
		{ mkdir -p "$work/fns" && /usr/bin/python3 scripts/bench/firststep/numba_step.py --prepare "$work/fns" "${KBUNDLE_BENCH_NUMBA_N:-56}"; }
	echo "### Time to a warm first step: 3 nodes x 1 rank, median of $runs"
	echo
	echo "| framework | case | median s | x best case | cold / this | cache misses (all ranks, each run) |"
	echo "|---|---|---|---|---|---|"
	local -a loopnotes=()
	for fw in $frameworks; do
		if [[ $fw != numba ]] && ! [[ -x $venv_python ]]; then
			say "no $venv_python (scripts/dev/venv.sh): $fw skipped"
			continue
		fi
		set=$pfs/set-$fw.kbundle
		dest=$local/fs-$fw
		declare -A med=() miss=()
		for case in cold nfs local kbundle; do
			say "firststep $fw: $case"
			local -a times=() ms=()
			for ((r = 0; r < runs; r++)); do
				"${mpirun[@]}" sh -c "rm -rf $dest"
				pfs_remount
				t0=$(now)
				case $case in
				cold)
					if ((r == 0)); then
						# The loop's first job: no set yet, so load
						# --allow-missing installs an empty DEST; the
						# program runs cold (its time is this cold
						# run's, the load left out); harvest writes the
						# set the other cases use.
						exports=$("${mpirun[@]}" "$kb" load -q --allow-missing --preset "$fw" --bundle "$set" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
						tl=$(now)
						"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >"$work/out"
						t1=$(now)
						"${mpirun[@]}" "$kb" harvest -q --bundle "$set" --to "$dest" >/dev/null
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
					exports=$("${mpirun[@]}" "$kb" load -q --bundle "$set" --to "$dest" | sed -n 's/^export //p' | tr '\n' ' ')
					# The set records the first job's presets: its load exports them.
					[[ -n $exports ]] || { say "the load of $set printed no exports"; exit 1; }
					"${mpirun[@]}" sh -c "$(step_cmd "$fw" "$exports")" >"$work/out"
					;;
				esac
				[[ $case == cold ]] || t1=$(now)
				times+=("$(echo "$t1 - $t0" | bc)")
				ms+=("$(misses "$work/out")")
			done
			med[$case]=$(printf '%s\n' "${times[@]}" | median)
			miss[$case]="${ms[*]}"
		done
		for case in cold nfs local kbundle; do
			printf '| %s | %s | %.2f | %.2f | %.1f | %s |\n' "$fw" "$case" "${med[$case]}" \
				"$(echo "scale=3; ${med[$case]} / ${med[local]}" | bc)" "$(echo "scale=2; ${med[cold]} / ${med[$case]}" | bc)" "${miss[$case]}"
		done
		unset med miss
	done
	echo
	printf '%s\n' "${loopnotes[@]}"
	echo
}

for part in $parts; do
	"${part}_part"
done
echo "3 nodes x 1 rank, links shaped to $rate each way (tc tbf), the shared file system sshfs over them; $runs runs each, median; $(nproc) cores; kbundle $("$kb" version | head -1)."
