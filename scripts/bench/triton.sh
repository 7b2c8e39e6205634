#!/usr/bin/env bash
# triton.sh: B3, a 10,000-file Triton-shaped cache read by 3 nodes x 4
# ranks through one shaped link to the file server (`make bench-triton`,
# issue 31; ../shared/reviews/2026-12-01b/benchmarks.md §3), as root.
#
# The file server is an sshd on the controller node kbctl (198.18.0.250),
# so all clients share its one 1 Gbit/s link (tc tbf, both ends), as they
# would a single NFS server; a delay proxy there (internal/cmd/delayproxy)
# adds D ms (KBUNDLE_BENCH_DELAY, default 1) to each round trip to it, and
# to nothing else (B2's recipe; the lab's kernel has no netem). The data:
# `gencache -kernels K -scale 0.4` (KBUNDLE_BENCH_KERNELS, default 1450:
# 7 files a kernel, about 145 MB), packed with --preset triton, and also
# extracted on the server. The reader, on every rank, is
# scripts/bench/triton_replay.py: Triton's FileCacheManager hit path for
# every kernel, without Triton. Each method is timed from job start to the
# last rank's end:
#   M1  direct: TRITON_CACHE_DIR on sshfs
#   M2  kbundle CLI: mpirun 1/node kbundle load, then mpirun -np 12 replay
#   M2s M2 through srun --mpi=pmix in the allocation M5 uses
#   M2j M2 with the load under the job's own 12 ranks (3 leaders, 9
#       waiting): what M3 does, through the CLI
#   M3  in process: the replay calls kbundle.load_bundle(MPI.COMM_WORLD)
#   M4  every node reads: mpirun 1/node kbundle extract from sshfs, replay
#   M5  sbcast to node-local, srun 1/node kbundle extract, srun replay, in
#       an allocation taken before any clock (the job script's host kbn1
#       runs the Slurm clients)
#   M6  per-node read-through: rclone mount of an sftp remote on each node
#       (--vfs-cache-mode full, node-local cache, --read-only), cold
#   M7  local: pre-extracted on every node (the floor)
# KBUNDLE_BENCH_RUNS runs (default 5; M1 and M6, the slow ones,
# KBUNDLE_BENCH_SLOW_RUNS, default 3), interleaved in a rotated order;
# before each run the nodes' DEST is removed and sshfs remounted (the
# server's page cache stays warm). Per method: wall min/median/max, the
# ratios to M1 and M7, the slowest rank's replay, the server's egress
# bytes (rx_bytes of kbvctl, the bridge side), its operations (syscr and
# syscw summed over its sftp-server processes, /proc/PID/io: each request
# is a read of the channel plus the file-system call) and each node's
# ingress bytes (tx_bytes of kbvN: from the server and the other nodes).
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${KBUNDLE_BENCH_RUNS:-5}
slowruns=${KBUNDLE_BENCH_SLOW_RUNS:-3}
rate=${KBUNDLE_BENCH_RATE:-1gbit}
delay=${KBUNDLE_BENCH_DELAY:-1}
nkernels=${KBUNDLE_BENCH_KERNELS:-1450}
methods=${KBUNDLE_BENCH_METHODS:-M1 M2 M2s M2j M3 M4 M5 M6 M7}
pfs_host=198.18.0.250
# shellcheck source=scripts/bench/cluster.sh
. scripts/bench/cluster.sh
bench_traps
inpath=$(inproc_path)
make python-lib >/dev/null
if ! command -v rclone >/dev/null; then
	DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends rclone >/dev/null
fi
bench_cluster_up 3 "$rate"
# shellcheck disable=SC2054 # the commas are a host list; mpirun ends in --host H -np N
mpirun12=("${mpirun[@]:0:${#mpirun[@]}-4}" --host kbn1:4,kbn2:4,kbn3:4 -np 12)
go build -o "$work/delayproxy" ./internal/cmd/delayproxy
declare -A rclone_pid=()
local=/tmp/node-local
rcl=$local/rclone
stop_rclone() {
	local n
	for n in "${!rclone_pid[@]}"; do
		"$rsh" "$n" umount "$rcl" 2>/dev/null || true
		kill "${rclone_pid[$n]}" 2>/dev/null || true
		wait "${rclone_pid[$n]}" 2>/dev/null || true
		unset "rclone_pid[$n]"
	done
}
trap 'bench_status=$?; stop_rclone; stop_proxy; bench_cleanup' EXIT
# (nsenter, not a function: $! is then the proxy itself, nsenter execs it)
nsenter -t "$(cat "$state/nodes/kbctl.pid")" -n -- "$work/delayproxy" -listen "$pfs_host:2223" -to "$pfs_host:2222" \
	-delay "$(echo "scale=3; $delay / 2" | bc)ms" 2>>"$work/stderr.log" &
proxy_pid=$!
sleep 0.5
pfs_port=2223
pfs_up
node() { nsenter -t "$(cat "$state/nodes/$1.pid")" -n -u -m --wd="$work" -- "${@:2}"; }

# The data, the set on the server, its extracted copy for M1 and M6, the
# floor's copy on every node, and the kernels the replay asks for.
go run ./internal/cmd/gencache -kernels "$nkernels" -scale 0.4 "$work/gen/triton" >"$work/gen.txt"
for f in "$work"/gen/triton/*/__grp__*.json; do
	n=${f##*/__grp__}
	k=${f%/*}
	echo "${k##*/} ${n%.json}"
done >"$work/kernels"
"$kb" pack -q --preset triton --dir "$work/gen" -o "$pfs_server/set.kbundle" 2>>"$work/stderr.log"
chmod 0644 "$pfs_server/set.kbundle"
"$kb" extract -q "$pfs_server/set.kbundle" "$pfs_server/warm" >/dev/null
"${mpirun[@]}" sh -c "rm -rf $local/warm && $kb extract -q $pfs/set.kbundle $local/warm" >/dev/null
calib_setup
pfs_remount
statms=$("$rsh" kbn1 /usr/bin/python3 "$work/calib.py" "$pfs/calib")

# Slurm: the allocation M5 and M2s run in, taken before the run's clock
# starts (one per run: one held through the whole benchmark was ended
# under this load); its clients run on kbn1, the node a job script would
# run on.
conf=$state/slurm/slurm.conf
slurm() { node kbn1 env SLURM_CONF="$conf" "$@"; }
jobid=''
alloc() {
	slurm salloc -N 3 --no-shell -J kbundle-b3 2>>"$work/stderr.log"
	jobid=$(slurm squeue -h -n kbundle-b3 -o %i | head -1)
	[[ -n $jobid ]] || { echo "triton.sh: salloc --no-shell made no allocation" >&2; exit 1; }
	srun=(slurm srun --jobid="$jobid" -N 3 -O)
}
unalloc() { if [[ -n $jobid ]]; then slurm scancel "$jobid" || true; jobid=''; fi; }

# rclone_up: a cold read-through mount on every node (the daemon, as
# Copper's, is up before the job; its cache starts empty).
: >"$work/rclone.conf"
rclone_up() {
	local n i
	for n in kbn1 kbn2 kbn3; do
		"$rsh" "$n" rm -rf "$rcl" "$rcl-cache" "&&" mkdir -p "$rcl" "$rcl-cache"
		nsenter -t "$(cat "$state/nodes/$n.pid")" -n -u -m -- rclone mount --config "$work/rclone.conf" ":sftp:$pfs_server" "$rcl" --sftp-host "$pfs_host" \
			--sftp-port 2223 --sftp-user root --sftp-key-file "$work/ssh/key" --sftp-shell-type none \
			--sftp-disable-hashcheck --sftp-idle-timeout 0 --vfs-cache-mode full --cache-dir "$rcl-cache" \
			--dir-cache-time 1h --attr-timeout 1h --read-only 2>>"$work/stderr.log" &
		rclone_pid[$n]=$!
	done
	for n in kbn1 kbn2 kbn3; do
		for ((i = 0; i < 100; i++)); do
			if "$rsh" "$n" mountpoint -q "$rcl"; then break; fi
			sleep 0.1
		done
		"$rsh" "$n" mountpoint -q "$rcl" || { echo "triton.sh: rclone mount on $n did not come up" >&2; exit 1; }
	done
}

# sftp_ops: "PID SYSCR SYSCW" of every sftp-server under the sshd
sftp_ops() {
	local p
	for p in $(ps -e -o pid=,ppid=,comm= | awk -v root="$(cat "$sshd_pid")" '{p[$1] = $2; c[$1] = $3}
		END {for (i in p) if (c[i] == "sftp-server") {j = p[i]; while ((j in p) && j != root) j = p[j]; if (j == root) print i}}'); do
		awk -v p="$p" '/^syscr/ {r = $2} /^syscw/ {w = $2} END {print p, r, w}' "/proc/$p/io" 2>/dev/null || true
	done
}
srvbytes() { cat /sys/class/net/kbvctl/statistics/rx_bytes; }
envs() { sed -n 's/^export //p' "$1" | sort -u | tr '\n' ' '; }
dest=$local/b3
replay="/usr/bin/python3 $PWD/scripts/bench/triton_replay.py"
rk="KBUNDLE_BENCH_KERNELS=$work/kernels"

# run_method M: one timed run; the ranks' JSON lines in work/out
run_method() {
	case $1 in
	M1) "${mpirun12[@]}" sh -c "env TRITON_CACHE_DIR=$pfs/warm/triton $rk $replay" ;;
	M2 | M2j)
		local -a launch=("${mpirun[@]}") # M2j: the load under the job's 12 ranks
		[[ $1 == M2 ]] || launch=("${mpirun12[@]}")
		"${launch[@]}" "$kb" load -q --bundle "$pfs/set.kbundle" --to "$dest" >"$work/exports"
		"${mpirun12[@]}" sh -c "env $(envs "$work/exports") $rk $replay"
		;;
	M2s)
		"${srun[@]}" -n 3 --mpi=pmix "$kb" load -q --bundle "$pfs/set.kbundle" --to "$dest" >"$work/exports"
		"${srun[@]}" -n 12 --ntasks-per-node=4 sh -c "env $(envs "$work/exports") $rk $replay"
		;;
	M3) "${mpirun12[@]}" sh -c "env $inpath KBUNDLE_BENCH_LOAD=$pfs/set.kbundle KBUNDLE_BENCH_DEST=$dest $rk $replay" ;;
	M4)
		"${mpirun[@]}" "$kb" extract -q "$pfs/set.kbundle" "$dest" >"$work/exports"
		"${mpirun12[@]}" sh -c "env $(envs "$work/exports") $rk $replay"
		;;
	M5)
		slurm sbcast --jobid="$jobid" -f "$pfs/set.kbundle" "$local/b3.kbundle"
		"${srun[@]}" -n 3 "$kb" extract -q "$local/b3.kbundle" "$dest" >"$work/exports"
		"${srun[@]}" -n 12 --ntasks-per-node=4 sh -c "env $(envs "$work/exports") $rk $replay"
		;;
	M6) "${mpirun12[@]}" sh -c "env TRITON_CACHE_DIR=$rcl/warm/triton $rk $replay" ;;
	M7) "${mpirun12[@]}" sh -c "env TRITON_CACHE_DIR=$local/warm/triton $rk $replay" ;;
	esac >"$work/out"
}
# field NAME: NAME's values in the ranks' JSON lines of work/out (lines may share a line)
field() { grep -o "\"$1\": [0-9.e-]*" "$work/out" | awk '{print $2}'; }

declare -A wall=() repl=() egress=() rops=() wops=() ingress=() hits=() failed=()
# shellcheck disable=SC2206 # the methods, one per word
order=($methods)
# budget: no round starts once the runs have taken this many seconds
budget=${KBUNDLE_BENCH_BUDGET:-660}
start=$(now)
for ((r = 0; r < runs; r++)); do
	if ((r > 0)) && (($(echo "$(now) - $start > $budget" | bc))); then
		echo "triton.sh: $r rounds in $budget s (KBUNDLE_BENCH_BUDGET): no more" >&2
		break
	fi
	k=$((r % ${#order[@]}))
	for m in "${order[@]:k}" "${order[@]:0:k}"; do
		if [[ $m == M1 || $m == M6 ]] && ((r >= slowruns)); then continue; fi
		"${mpirun[@]}" sh -c "rm -rf $dest $local/b3.kbundle" >/dev/null
		pfs_remount
		if [[ $m == M6 ]]; then rclone_up; fi
		if [[ $m == M5 || $m == M2s ]]; then alloc; fi
		sftp_ops >"$work/ops0"
		b0=$(srvbytes)
		read -r -a in0 <<<"$(linkbytes_in)"
		t0=$(now)
		if ! run_method "$m" 2>>"$work/stderr.log"; then
			echo "triton.sh: $m run $r failed (stderr: last lines)" >&2
			tail -n 3 "$work/stderr.log" >&2
			failed[$m]+="$r "
			stop_rclone
			unalloc
			continue
		fi
		t1=$(now)
		b1=$(srvbytes)
		read -r -a in1 <<<"$(linkbytes_in)"
		sftp_ops >"$work/ops1"
		if [[ $m == M6 ]]; then stop_rclone; fi
		unalloc
		read -r dr dw < <(awk 'NR == FNR {r[$1] = $2; w[$1] = $3; next} {dr += $2 - r[$1]; dw += $3 - w[$1]} END {print dr + 0, dw + 0}' "$work/ops0" "$work/ops1")
		h=$(field hits | awk '{s += $1} END {print s + 0}')
		[[ $h == $((12 * nkernels)) ]] || echo "triton.sh: $m run $r: $h hits, want $((12 * nkernels))" >&2
		wall[$m]+="$(echo "$t1 - $t0" | bc) "
		repl[$m]+="$(field replay_seconds | sort -g | tail -1) "
		egress[$m]+="$((b1 - b0)) "
		rops[$m]+="$dr "
		wops[$m]+="$dw "
		ingress[$m]+="$(((in1[0] - in0[0]) / 1000000))/$(((in1[1] - in0[1]) / 1000000))/$(((in1[2] - in0[2]) / 1000000)) "
		hits[$m]+="$h "
	done
done
# shellcheck disable=SC2086 # the runs, one per word
m1=$(med ${wall[M1]:-0})
# shellcheck disable=SC2086
m7=$(med ${wall[M7]:-0})
echo "| method | runs | min s | median s | max s | median / M1 | median / M7 | slowest rank's replay s | server egress MB | server syscr | server syscw | node ingress MB kbn1/2/3 | runs (s) |"
echo "|---|---|---|---|---|---|---|---|---|---|---|---|---|"
for m in $methods; do
	[[ -n ${wall[$m]:-} ]] || continue
	# shellcheck disable=SC2086
	read -r lo mid hi < <(printf '%s\n' ${wall[$m]} | stats)
	# shellcheck disable=SC2086
	printf '| %s | %d | %.2f | %.2f | %.2f | %s | %s | %.2f | %.1f | %s | %s | %s | %s|\n' "$m" "$(wc -w <<<"${wall[$m]}")" "$lo" "$mid" "$hi" \
		"$(if [[ $m1 != 0 ]]; then printf %.3f "$(echo "scale=4; $mid / $m1" | bc)"; else echo -; fi)" \
		"$(if [[ $m7 != 0 ]]; then printf %.1f "$(echo "scale=4; $mid / $m7" | bc)"; else echo -; fi)" \
		"$(med ${repl[$m]})" "$(echo "scale=1; $(med ${egress[$m]}) / 1000000" | bc)" "$(med ${rops[$m]})" "$(med ${wops[$m]})" \
		"$(printf '%s\n' ${ingress[$m]} | sort | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}')" "${wall[$m]}"
done
for m in "${!failed[@]}"; do echo "$m: failed in run(s) ${failed[$m]}"; done
echo
echo "Data: $(sed "s| in .*||" "$work/gen.txt"); bundle $(($(stat -c %s "$pfs_server/set.kbundle") / 1000000)) MB (--preset triton); every rank replays all $nkernels kernels."
echo "3 nodes x 4 ranks; the file server (sshd, sftp) on kbctl behind one link shaped to $rate each way (tc tbf), D = $delay ms added to each round trip to it (delay proxy): $statms ms per stat(2) through a fresh sshfs mount; other links $rate; $runs runs (M1, M6: $slowruns), interleaved, rotated; sshfs remounted before each run, the server's page cache warm; medians of bytes and operations; $(nproc) cores; kbundle $("$kb" version | head -1); $(rclone version 2>/dev/null | head -1)."
