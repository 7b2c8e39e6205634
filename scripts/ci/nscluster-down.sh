#!/usr/bin/env bash
# nscluster-down.sh: stop the test cluster that nscluster-up.sh started.
#
# Usage: scripts/ci/nscluster-down.sh [STATE_DIR]
#
#   STATE_DIR  the folder given to nscluster-up.sh; default
#              $KBUNDLE_TEST_CLUSTER, else /tmp/kbundle-nscluster.
#
# It cancels the cluster's Slurm jobs, then stops every process that runs
# inside one of the cluster's nodes (slurmd, slurmctld, job steps, MPI
# daemons and ranks, the holders), identified by the node's network
# namespace, then the cluster's munged (by its pid file, checked against its
# command line), removes the links, network namespaces and the bridge it
# recorded, the nodes' block in /etc/hosts, and the owner record. Nothing
# the state folder does not record is touched. It is idempotent and always
# exits 0, so a trap can call it after any failure; what it did is reported
# on stderr.
set -u

# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE=$(state_dir "${1:-${KBUNDLE_TEST_CLUSTER:-/tmp/kbundle-nscluster}}")
OWNER=/run/kbundle-nscluster.owner
LIST=$STATE/nodes/list

say() { printf 'nscluster-down: %s\n' "$*" >&2; }

# kill_all SIGNAL-TICKS PID...: TERM, wait, then KILL.
kill_all() {
	local ticks=$1 pid
	shift
	(($# == 0)) && return 0
	kill -TERM "$@" 2>/dev/null
	wait_gone "$ticks" "$@" && return 0
	for pid in "$@"; do
		alive "$pid" && kill -KILL "$pid" 2>/dev/null
	done
	wait_gone 50 "$@"
	for pid in "$@"; do
		alive "$pid" && say "warning: pid $pid ($(cat "/proc/$pid/comm" 2>/dev/null)) is still running"
	done
	return 0
}

if [[ ! -d $STATE ]]; then
	say "no state folder $STATE: nothing to stop"
	exit 0
fi
if [[ ! -e $STATE/.kbundle-nscluster ]]; then
	say "$STATE was not made by nscluster-up.sh: left alone"
	exit 0
fi

# Cancel Slurm jobs first so their steps end cleanly (bounded).
CONF=$STATE/slurm/slurm.conf
ctlpid=$(cat "$STATE/nodes/kbctl.pid" 2>/dev/null)
if [[ -r $CONF && -n $ctlpid ]] && alive "$ctlpid"; then
	jobs=$(timeout 10 nsenter -t "$ctlpid" -n -u -m -- env SLURM_CONF="$CONF" squeue -h -o %i 2>/dev/null | tr '\n' ' ')
	if [[ -n ${jobs// /} ]]; then
		say "cancelling jobs: $jobs"
		# shellcheck disable=SC2086 # one word per job id
		timeout 10 nsenter -t "$ctlpid" -n -u -m -- env SLURM_CONF="$CONF" scancel $jobs 2>/dev/null
		sleep 1
	fi
fi

# Every process inside a recorded node's network namespace.
declare -A netns=()
holders=()
if [[ -r $LIST ]]; then
	while read -r name _ _; do
		pid=$(cat "$STATE/nodes/$name.pid" 2>/dev/null)
		if [[ -n $pid ]] && alive "$pid" && [[ $(cat "/proc/$pid/comm" 2>/dev/null) == sleep ]]; then
			holders+=("$pid")
		fi
		if [[ -e /run/netns/$name ]]; then
			ino=$(stat -L -c %i "/run/netns/$name" 2>/dev/null) && netns[$ino]=$name
		fi
	done <"$LIST"
fi
inside=()
if ((${#netns[@]})); then
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		ino=$(stat -L -c %i "$p/ns/net" 2>/dev/null) || continue
		[[ -n ${netns[$ino]:-} ]] || continue
		[[ " ${holders[*]-} " == *" $pid "* ]] && continue
		alive "$pid" && inside+=("$pid")
	done
fi
if ((${#inside[@]})); then
	say "stopping ${#inside[@]} processes inside the nodes (pid ${inside[*]})"
	kill_all 100 "${inside[@]}"
fi
if ((${#holders[@]})); then
	say "stopping the node holders (pid ${holders[*]})"
	kill_all 50 "${holders[@]}"
fi

# munged: by pid file, if its command line names our socket.
mpid=$(tr -dc '0-9' 2>/dev/null <"$STATE/munge/munged.pid")
if [[ -n $mpid ]] && alive "$mpid" && tr '\0' '\n' <"/proc/$mpid/cmdline" 2>/dev/null | grep -qF -- "$STATE/munge/"; then
	say "stopping munged (pid $mpid)"
	kill_all 100 "$mpid"
fi

# Links, namespaces, bridge.
if [[ -r $LIST ]]; then
	while read -r name _ veth; do
		ip link del "$veth" 2>/dev/null && say "removed link $veth"
		[[ -e /run/netns/$name ]] && ip netns del "$name" && say "removed netns $name"
	done <"$LIST"
	rm -f "$LIST"
fi
if [[ -r $STATE/nodes/bridge ]]; then
	br=$(cat "$STATE/nodes/bridge")
	ip link del "$br" 2>/dev/null && say "removed bridge $br"
	rm -f "$STATE/nodes/bridge"
fi
if [[ -r $STATE/nodes/etc-hosts ]]; then
	hosts_block /etc/hosts && say "removed the nodes from /etc/hosts"
	rm -f "$STATE/nodes/etc-hosts"
fi
rm -f "$STATE"/nodes/*.pid "$STATE/rsh"
if [[ -r $OWNER && $(cat "$OWNER") == "$STATE" ]]; then
	rm -f "$OWNER"
fi
say "stopped (state in $STATE)"
exit 0
