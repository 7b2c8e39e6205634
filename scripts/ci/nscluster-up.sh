#!/usr/bin/env bash
# nscluster-up.sh: start a cluster of several "nodes" on this one machine, as
# root, for kbundle's multi-node tests (test/cluster) and `make bench-nodes`.
#
# Usage: eval "$(scripts/ci/nscluster-up.sh [STATE_DIR])"
#        ... go test ./test/cluster/ ...
#        scripts/ci/nscluster-down.sh [STATE_DIR]
#
#   STATE_DIR  where the node records, the rsh agent, the Slurm configuration,
#              pid files and logs live; default $KBUNDLE_TEST_CLUSTER, else
#              /tmp/kbundle-nscluster. Give the same folder to nscluster-down.sh.
#
# Each node kbn1..kbnN (N = KBUNDLE_NSCLUSTER_NODES, default 3) is a network
# namespace (address 198.18.0.N/24 on a veth kbvN bridged to kbbr0, which has
# 198.18.0.254/24 in the root namespace) plus a UTS namespace (host name kbnN)
# plus a mount namespace with its own /dev/shm and node-local tmpfs at
# /tmp/node-local (KBUNDLE_NSCLUSTER_LOCAL_SIZE, default 2g) and its own
# /etc/hosts naming every node. One long-lived holder process (`sleep
# infinity`) per node keeps the namespaces; `STATE_DIR/rsh NODE CMD...` (the
# rsh agent scripts/ci/nscluster-rsh) runs a command on a node. Everything
# else, the root file system included, is shared: it plays the parallel file
# system. See docs/cluster.md.
#
# Unless KBUNDLE_NSCLUSTER_SLURM=0, it also starts a multi-node Slurm: a
# private munged (socket in STATE_DIR), slurmctld on a controller node kbctl
# (198.18.0.250) and one `slurmd -N kbnN` per node, and waits until every node
# is idle (at most KBUNDLE_NSCLUSTER_WAIT seconds, default 60). Its daemons are
# in the nodes' network namespaces, so they can run beside the one-machine
# test Slurm of scripts/ci/slurm-up.sh.
#
# A cluster left by an earlier run (same STATE_DIR, or the one recorded as the
# owner of kbbr0 in /run/kbundle-nscluster.owner, once the process that
# started it has exited) is stopped first with nscluster-down.sh. A cluster
# of another state folder whose starting process still runs is in use: the
# script fails and names it (one cluster per machine). Namespaces, links or
# daemons that no recorded cluster owns are never touched: the script fails
# and names them.
#
# On success the only line on stdout is
#   export KBUNDLE_TEST_CLUSTER=STATE_DIR
# and the exit status is 0; on failure it stops what it started, prints what
# it knows on stderr and exits 1.
set -euo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE=$(state_dir "${1:-${KBUNDLE_TEST_CLUSTER:-/tmp/kbundle-nscluster}}")
NODES=${KBUNDLE_NSCLUSTER_NODES:-3}
LOCALSIZE=${KBUNDLE_NSCLUSTER_LOCAL_SIZE:-2g}
WAIT=${KBUNDLE_NSCLUSTER_WAIT:-60}
SLURM=${KBUNDLE_NSCLUSTER_SLURM:-1}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
MARKER=.kbundle-nscluster # marks a state folder made by this script
OWNER=/run/kbundle-nscluster.owner
BRIDGE=kbbr0
NET=198.18.0
CTL=kbctl
CTLADDR=$NET.250

say() { printf 'nscluster-up: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}

# --- preconditions -------------------------------------------------------------
[[ -n $STATE && $STATE != / ]] || die "refusing state folder '$STATE'"
[[ $(id -u) == 0 ]] || die "must run as root (namespaces, links, mounts)"
if ! [[ $NODES =~ ^[1-9][0-9]{0,2}$ ]] || ((NODES > 200)); then
	die "KBUNDLE_NSCLUSTER_NODES=$NODES: want 1..200"
fi
missing=()
for b in ip tc nsenter unshare setsid mount; do
	command -v "$b" >/dev/null || missing+=("$b")
done
if [[ $SLURM == 1 ]]; then
	for b in munged munge unmunge slurmctld slurmd sinfo srun runuser; do
		command -v "$b" >/dev/null || missing+=("$b")
	done
fi
((${#missing[@]} == 0)) || die "missing programs: ${missing[*]} (apt-get install -y iproute2 util-linux slurm-wlm munge)"

# --- leftovers -------------------------------------------------------------------
mkdir -p "$STATE"
"$HERE/nscluster-down.sh" "$STATE" 2>&1 | sed 's/^/  /' >&2 || true
# Another state folder's cluster: stopped if it is left over (its holders
# are gone, or the process that started it, recorded in nodes/user.pid, has
# exited: a crashed run); left alone, and this fails, while that process
# still runs (someone is using it; the names kbbr0, kbnN are one per machine).
if [[ -r $OWNER ]]; then
	old=$(cat "$OWNER")
	if [[ $old != "$STATE" && -e $old/$MARKER ]]; then
		holder=$(cat "$old/nodes/kbctl.pid" 2>/dev/null || true)
		user=$(cat "$old/nodes/user.pid" 2>/dev/null || true)
		if [[ -n $holder && -e /proc/$holder ]] && { [[ -z $user ]] || [[ -e /proc/$user ]]; }; then
			die "another test cluster is up (state $old, started by pid ${user:-unknown}, still running): use it (export KBUNDLE_TEST_CLUSTER=$old) or stop it (scripts/ci/nscluster-down.sh $old)"
		fi
		say "stopping an earlier test cluster (state $old)"
		"$HERE/nscluster-down.sh" "$old" 2>&1 | sed 's/^/  /' >&2 || true
	fi
fi
names=("$CTL")
for ((n = 1; n <= NODES; n++)); do
	names+=("kbn$n")
done
foreign=()
ip link show "$BRIDGE" >/dev/null 2>&1 && foreign+=("link $BRIDGE")
for name in "${names[@]}"; do
	[[ -e /run/netns/$name ]] && foreign+=("netns $name")
	ip link show "kbv${name#kbn}" >/dev/null 2>&1 && foreign+=("link kbv${name#kbn}")
done
((${#foreign[@]} == 0)) || die "not made by a recorded test cluster, left alone: ${foreign[*]}; remove them (ip netns del NAME, ip link del NAME) or stop their owner, then retry"

rm -rf "$STATE/nodes" "$STATE/slurm" "$STATE/munge"
mkdir -p "$STATE/nodes"
echo "state folder of scripts/ci/nscluster-up.sh; stop with scripts/ci/nscluster-down.sh $STATE" >"$STATE/$MARKER"
echo "$PPID" >"$STATE/nodes/user.pid" # the cluster is in use while it runs
chmod 0755 "$STATE"

started=0
fail() {
	say "error: $*"
	for log in "$STATE"/munge/munged.log "$STATE"/slurm/*.log; do
		if [[ -s $log ]]; then
			say "--- last lines of $log"
			tail -n 15 "$log" >&2
		fi
	done
	if ((started)); then
		"$HERE/nscluster-down.sh" "$STATE" || true
	fi
	exit 1
}
trap 'fail "interrupted"' INT TERM HUP

# --- network -----------------------------------------------------------------------
started=1
echo "$STATE" >"$OWNER"
ip link add "$BRIDGE" type bridge || fail "cannot create bridge $BRIDGE"
echo "$BRIDGE" >"$STATE/nodes/bridge"
ip addr add "$NET.254/24" dev "$BRIDGE"
ip link set "$BRIDGE" up

# /etc/hosts inside the nodes: the machine's own plus every node; and the
# same names in the machine's own, where the launchers run (lib.sh,
# hosts_block), recorded for nscluster-down.sh.
hostlines=$(
	echo "$CTLADDR $CTL"
	for ((n = 1; n <= NODES; n++)); do
		echo "$NET.$n kbn$n"
	done
)
{
	hosts_strip </etc/hosts
	echo "# kbundle test cluster ($STATE)"
	echo "$hostlines"
} >"$STATE/nodes/hosts"
if hosts_block /etc/hosts "$hostlines" 2>/dev/null; then
	echo /etc/hosts >"$STATE/nodes/etc-hosts"
else
	say "warning: cannot add the nodes to /etc/hosts: launchers here resolve kbn1..kbn$NODES through DNS, and a lost reply costs 5 s"
fi

# node NAME ADDR VETH: make one node and start its holder.
node() {
	local name=$1 addr=$2 veth=$3 pidf=$STATE/nodes/$1.pid i
	ip netns add "$name" || fail "ip netns add $name"
	echo "$name $addr $veth" >>"$STATE/nodes/list"
	ip link add "$veth" type veth peer name eth0 netns "$name" || fail "veth $veth for $name"
	ip link set "$veth" master "$BRIDGE" up
	ip -n "$name" addr add "$addr/24" dev eth0
	ip -n "$name" link set lo up
	ip -n "$name" link set eth0 up
	# The holder: not `ip netns exec`, which remounts /sys (slurmd needs
	# /sys/fs/cgroup). It writes its own pid (sh execs sleep) when ready.
	rm -f "$pidf"
	# shellcheck disable=SC2016 # the holder's shell expands its arguments
	setsid nsenter --net="/run/netns/$name" unshare --uts --mount --propagation private --fork \
		sh -c 'set -e
			hostname "$1"
			mount -t tmpfs -o size=512m,mode=1777 tmpfs /dev/shm
			mkdir -p /tmp/node-local
			mount -t tmpfs -o "size=$2,mode=1777" tmpfs /tmp/node-local
			mount --bind "$3/nodes/hosts" /etc/hosts
			echo $$ >"$4.tmp" && mv "$4.tmp" "$4"
			exec sleep infinity' holder "$name" "$LOCALSIZE" "$STATE" "$pidf" \
		</dev/null >"$STATE/nodes/$name.log" 2>&1 &
	for ((i = 0; i < 100; i++)); do
		[[ -s $pidf ]] && break
		sleep 0.05
	done
	[[ -s $pidf ]] || fail "node $name: holder did not start ($(cat "$STATE/nodes/$name.log"))"
}

node "$CTL" "$CTLADDR" kbvctl
for ((n = 1; n <= NODES; n++)); do
	node "kbn$n" "$NET.$n" "kbv$n"
done

# The rsh agent for this state folder.
cat >"$STATE/rsh" <<EOF
#!/bin/sh
# rsh agent of the test cluster in $STATE (see scripts/ci/nscluster-rsh)
KBUNDLE_NSCLUSTER=$STATE exec $HERE/nscluster-rsh "\$@"
EOF
chmod 0755 "$STATE/rsh"

for ((n = 1; n <= NODES; n++)); do
	got=$("$STATE/rsh" "kbn$n" hostname) || fail "cannot run a command on kbn$n"
	[[ $got == "kbn$n" ]] || fail "kbn$n says its host name is '$got'"
	if command -v ping >/dev/null; then
		timeout 10 "$STATE/rsh" "kbn$n" ping -c 1 -W 5 "$NET.254" >/dev/null 2>&1 || fail "kbn$n cannot reach $NET.254"
	fi
done

# --- Slurm ----------------------------------------------------------------------------
if [[ $SLURM == 1 ]]; then
	id munge >/dev/null 2>&1 || fail "no munge user (install the munge package)"
	[[ -r /etc/munge/munge.key ]] || fail "no /etc/munge/munge.key (install the munge package)"
	mkdir -p "$STATE/munge" "$STATE/slurm/state"
	chown munge:munge "$STATE/munge"
	chmod 0755 "$STATE/munge"
	SOCKET=$STATE/munge/munge.socket
	runuser -u munge -- munged --socket="$SOCKET" --pid-file="$STATE/munge/munged.pid" \
		--log-file="$STATE/munge/munged.log" --seed-file="$STATE/munge/munged.seed" ||
		fail "munged did not start"
	for ((i = 0; i < 100; i++)); do
		munge -n -S "$SOCKET" 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1 && break
		sleep 0.1
	done
	((i < 100)) || fail "munged is not answering on $SOCKET after 10 s"

	CONF=$STATE/slurm/slurm.conf
	sed -e "s|@STATE@|$STATE/slurm|g" -e "s|@MUNGESOCKET@|$SOCKET|g" \
		-e "s|@CTL@|$CTL|g" -e "s|@CTLADDR@|$CTLADDR|g" \
		-e "s|@NODES@|kbn[1-$NODES]|g" -e "s|@ADDRS@|$NET.[1-$NODES]|g" \
		"$HERE/nscluster-slurm.conf.in" >"$CONF"
	# PMIx's per-job directories must be node-local (else every node's PMIx
	# server makes the same /tmp/spmix_appdir_* on the shared /tmp).
	printf 'PMIxCliTmpDirBase=/tmp/node-local\n' >"$STATE/slurm/mpi.conf"
	"$STATE/rsh" "$CTL" env SLURM_CONF="$CONF" slurmctld -f "$CONF" || fail "slurmctld did not start"
	for ((n = 1; n <= NODES; n++)); do
		"$STATE/rsh" "kbn$n" env SLURM_CONF="$CONF" slurmd -f "$CONF" -N "kbn$n" || fail "slurmd on kbn$n did not start"
	done
	idle=
	for ((i = 0; i < WAIT * 2; i++)); do
		idle=$("$STATE/rsh" "$CTL" env SLURM_CONF="$CONF" timeout 5 sinfo -h -N -t idle -o %N 2>/dev/null | sort -u | grep -c . || true)
		[[ $idle == "$NODES" ]] && break
		sleep 0.5
	done
	[[ $idle == "$NODES" ]] || fail "$idle of $NODES nodes idle after ${WAIT} s ($("$STATE/rsh" "$CTL" env SLURM_CONF="$CONF" timeout 5 sinfo -N 2>&1 | tr '\n' ';'))"
	echo "$CONF" >"$STATE/slurm/conf"
fi

trap - INT TERM HUP
say "$NODES nodes up (kbn1..kbn$NODES, controller $CTL$([[ $SLURM == 1 ]] && echo ", Slurm idle")); state in $STATE"
printf 'export KBUNDLE_TEST_CLUSTER=%s\n' "$STATE"
