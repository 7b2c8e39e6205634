#!/usr/bin/env bash
# slurm-down.sh: stop the one-machine test Slurm that slurm-up.sh started.
#
# Usage: scripts/ci/slurm-down.sh [STATE_DIR]
#
#   STATE_DIR  the folder given to slurm-up.sh; default $KBUNDLE_SLURM_STATE,
#              else /tmp/kbundle-slurm.
#
# It cancels the cluster's jobs, then stops slurmd, slurmctld and the private
# munged, each BY PID: the pid files in STATE_DIR, plus any slurmd, slurmctld,
# slurmstepd or munged whose command line or environment names STATE_DIR (a
# leftover whose pid file was lost). Nothing else is touched. It waits for
# every process to exit (TERM, then KILL after a bounded wait). It is
# idempotent and always exits 0, so a trap can call it after any failure;
# what it did is reported on stderr.
set -u

# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE=$(state_dir "${1:-${KBUNDLE_SLURM_STATE:-/tmp/kbundle-slurm}}")
CONF=$STATE/slurm.conf

say() { printf 'slurm-down: %s\n' "$*" >&2; }

# ours PID NAME: PID is a live NAME process whose command line or
# environment mentions STATE (guards against a recycled pid).
ours() {
	local pid=$1 name=$2 comm
	alive "$pid" || return 1
	comm=$(cat "/proc/$pid/comm" 2>/dev/null) || return 1
	[[ $comm == "$name" ]] || return 1
	tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$STATE/" && return 0
	tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qxF -- "SLURM_CONF=$CONF"
}

# find NAME: print the pids of our NAME processes, from the pid file first.
find_pids() {
	local name=$1 pidfile=$2 pid p
	local -a found=()
	if [[ -n $pidfile && -r $pidfile ]]; then
		pid=$(tr -dc '0-9' <"$pidfile")
		if [[ -n $pid ]] && ours "$pid" "$name"; then
			found+=("$pid")
		fi
	fi
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[[ " ${found[*]-} " == *" $pid "* ]] && continue
		ours "$pid" "$name" && found+=("$pid")
	done
	if ((${#found[@]})); then
		printf '%s\n' "${found[@]}"
	fi
}

# stop NAME PIDFILE: TERM our NAME processes, wait up to 20 s, then KILL.
stop() {
	local name=$1 pidfile=$2 pid i
	local -a pids
	mapfile -t pids < <(find_pids "$name" "$pidfile")
	if ((${#pids[@]} == 0)); then
		[[ -n $pidfile ]] && rm -f "$pidfile"
		return 0
	fi
	say "stopping $name (pid ${pids[*]})"
	kill -TERM "${pids[@]}" 2>/dev/null
	wait_gone 200 "${pids[@]}"
	for pid in "${pids[@]}"; do
		if alive "$pid"; then
			say "$name pid $pid ignored TERM for 20 s: killing it"
			kill -KILL "$pid" 2>/dev/null
		fi
	done
	wait_gone 50 "${pids[@]}"
	for pid in "${pids[@]}"; do
		alive "$pid" && say "warning: $name pid $pid is still running"
	done
	[[ -n $pidfile ]] && rm -f "$pidfile"
	return 0
}

if [[ ! -d $STATE ]]; then
	say "no state folder $STATE: nothing to stop"
	exit 0
fi

# Cancel jobs first so their steps end cleanly (bounded: 15 s).
if [[ -r $CONF ]] && command -v squeue >/dev/null && [[ -n $(find_pids slurmctld "$STATE/slurmctld.pid") ]]; then
	export SLURM_CONF=$CONF
	jobs=$(timeout 10 squeue -h -o %i 2>/dev/null | tr '\n' ' ')
	if [[ -n ${jobs// /} ]]; then
		say "cancelling jobs: $jobs"
		# shellcheck disable=SC2086 # one word per job id
		timeout 10 scancel $jobs 2>/dev/null
		for ((i = 0; i < 150; i++)); do
			[[ -z $(timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
			sleep 0.1
		done
	fi
fi

stop slurmd "$STATE/slurmd.pid"
stop slurmstepd ""
stop slurmctld "$STATE/slurmctld.pid"
stop munged "$STATE/munge/munged.pid"
say "stopped (state in $STATE)"
exit 0
