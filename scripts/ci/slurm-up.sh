#!/usr/bin/env bash
# slurm-up.sh: start a one-machine Slurm (22.05, Debian's slurm-wlm) for the
# tests, as root: a private munged, slurmctld and slurmd.
#
# Usage: eval "$(scripts/ci/slurm-up.sh [STATE_DIR])"
#        ... tests ...
#        scripts/ci/slurm-down.sh [STATE_DIR]
#
#   STATE_DIR  where the configuration, pid files, logs, spool and the munge
#              socket live; default $KBUNDLE_SLURM_STATE, else
#              /tmp/kbundle-slurm. Give the same folder to slurm-down.sh.
#
# The configuration is scripts/ci/slurm.conf.in filled in for this machine:
# its short host name and the first line of `slurmd -C`. munged runs as the
# munge user with its own socket and pid file inside STATE_DIR, so a system
# munged (if any) is neither used nor disturbed.
#
# Leftovers of an earlier run (daemons still running, stale pid files, old
# jobs) are stopped and cleared first: with the same STATE_DIR, or with
# another one that an earlier slurm-up.sh made (it holds a marker file). A
# slurmctld or slurmd from any OTHER configuration would hold the ports: the
# script then fails and names it. It waits (at most KBUNDLE_SLURM_WAIT seconds, default
# 60) until the node is idle. On success the only thing on stdout is
#   export SLURM_CONF=STATE_DIR/slurm.conf
# and the exit status is 0; on failure it stops what it started, prints the
# daemons' log tails on stderr and exits 1.
set -euo pipefail

# shellcheck source=SCRIPTDIR/lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
STATE=$(state_dir "${1:-${KBUNDLE_SLURM_STATE:-/tmp/kbundle-slurm}}")
WAIT=${KBUNDLE_SLURM_WAIT:-60}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
TEMPLATE=$HERE/slurm.conf.in
CONF=$STATE/slurm.conf
MUNGEDIR=$STATE/munge
SOCKET=$MUNGEDIR/munge.socket
MARKER=.kbundle-test-slurm # marks a state folder made by this script

say() { printf 'slurm-up: %s\n' "$*" >&2; }
die() {
	say "error: $*"
	exit 1
}

# --- preconditions -----------------------------------------------------------
[[ -n $STATE && $STATE != / ]] || die "refusing state folder '$STATE'"
[[ $(id -u) == 0 ]] || die "must run as root (slurmd, and munged as the munge user)"
missing=()
for b in munged munge unmunge slurmctld slurmd sinfo scontrol srun sbatch squeue scancel runuser; do
	command -v "$b" >/dev/null || missing+=("$b")
done
((${#missing[@]} == 0)) || die "missing programs: ${missing[*]} (install the Debian packages: apt-get install -y slurm-wlm munge)"
id munge >/dev/null 2>&1 || die "no munge user (install the munge package)"
[[ -r /etc/munge/munge.key ]] || die "no /etc/munge/munge.key (install the munge package, or run mungekey as the munge user)"
[[ -r $TEMPLATE ]] || die "missing $TEMPLATE"
HOST=$(hostname -s)
getent hosts "$HOST" >/dev/null || die "host name '$HOST' does not resolve (add it to /etc/hosts)"
NODELINE=$(slurmd -C 2>/dev/null | head -n 1)
[[ $NODELINE == NodeName=* ]] || die "unexpected output from slurmd -C: '$NODELINE'"

# --- leftovers -----------------------------------------------------------------
mkdir -p "$STATE"
"$HERE/slurm-down.sh" "$STATE" 2>&1 | sed 's/^/  /' >&2 || true

# slurmd and slurmctld daemons still running (not zombies) in this network
# namespace (those of the multi-node test cluster, scripts/ci/nscluster-up.sh,
# run in their nodes' namespaces and hold no port here): "pid conf" lines.
running_daemons() {
	local p comm st conf here
	here=$(readlink /proc/self/ns/net)
	for p in /proc/[0-9]*; do
		comm=$(cat "$p/comm" 2>/dev/null) || continue
		[[ $comm == slurmctld || $comm == slurmd ]] || continue
		[[ $(readlink "$p/ns/net" 2>/dev/null) == "$here" ]] || continue
		st=$(cut -d' ' -f3 "$p/stat" 2>/dev/null) || continue
		[[ $st == Z || $st == X ]] && continue
		conf=$(tr '\0' '\n' <"$p/cmdline" 2>/dev/null | sed -n '/^-f$/{n;p;q}')
		echo "${p#/proc/} ${conf:--}"
	done
}

# A daemon left by an earlier slurm-up.sh with ANOTHER state folder (marked
# by MARKER) is stopped through that folder; any other one holds the ports:
# name it, do not kill it.
stopped=" "
while read -r pid conf; do
	old=$(dirname "$conf")
	[[ $stopped == *" $old "* ]] && continue
	if [[ $conf != - && -e $old/$MARKER ]]; then
		stopped+="$old "
		say "stopping an earlier test Slurm (pid $pid, state $old)"
		"$HERE/slurm-down.sh" "$old" 2>&1 | sed 's/^/  /' >&2 || true
	fi
done < <(running_daemons)
foreign=()
while read -r pid conf; do
	foreign+=("pid $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null))")
done < <(running_daemons)
((${#foreign[@]} == 0)) || die "another Slurm daemon is running and holds the ports: ${foreign[*]}; stop it (e.g. scripts/ci/slurm-down.sh ITS_STATE_DIR) and retry"

# Fresh state: old jobs and node registrations must not come back.
rm -rf "$STATE/state" "$STATE/spool" "$MUNGEDIR"
rm -f "$STATE"/slurmctld.log "$STATE"/slurmd.log "$STATE"/*.pid
mkdir -p "$STATE/state" "$STATE/spool" "$MUNGEDIR"
echo "state folder of scripts/ci/slurm-up.sh; stop with scripts/ci/slurm-down.sh $STATE" >"$STATE/$MARKER"
chmod 0755 "$STATE"
chown munge:munge "$MUNGEDIR"
chmod 0755 "$MUNGEDIR"

started=0
fail() {
	say "error: $*"
	for log in "$MUNGEDIR/munged.log" "$STATE/slurmctld.log" "$STATE/slurmd.log"; do
		if [[ -s $log ]]; then
			say "--- last lines of $log"
			tail -n 20 "$log" >&2
		fi
	done
	if ((started)); then
		"$HERE/slurm-down.sh" "$STATE" || true
	fi
	exit 1
}

# --- configuration ---------------------------------------------------------------
sed -e "s|@HOST@|$HOST|g" -e "s|@STATE@|$STATE|g" -e "s|@MUNGESOCKET@|$SOCKET|g" \
	-e "s|@NODELINE@|$NODELINE|g" "$TEMPLATE" >"$CONF.tmp"
mv "$CONF.tmp" "$CONF"
export SLURM_CONF=$CONF

# --- munged --------------------------------------------------------------------
started=1
runuser -u munge -- munged --socket="$SOCKET" --pid-file="$MUNGEDIR/munged.pid" \
	--log-file="$MUNGEDIR/munged.log" --seed-file="$MUNGEDIR/munged.seed" ||
	fail "munged did not start"
for ((i = 0; i < 100; i++)); do
	if munge -n -S "$SOCKET" 2>/dev/null | unmunge -S "$SOCKET" >/dev/null 2>&1; then
		break
	fi
	sleep 0.1
done
((i < 100)) || fail "munged is not answering on $SOCKET after 10 s"

# --- slurmctld, slurmd ------------------------------------------------------------
slurmctld -f "$CONF" || fail "slurmctld did not start"
slurmd -f "$CONF" || fail "slurmd did not start"

state=
for ((i = 0; i < WAIT * 2; i++)); do
	state=$(timeout 5 sinfo -h -o %t 2>/dev/null | head -n 1) || true
	[[ $state == idle ]] && break
	sleep 0.5
done
[[ $state == idle ]] || fail "node not idle after ${WAIT} s (sinfo says '${state:-nothing}')"

say "node $HOST idle after about $((i / 2)) s; state in $STATE"
printf 'export SLURM_CONF=%s\n' "$CONF"
