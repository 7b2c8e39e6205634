# lib.sh: shell functions shared by the test cluster scripts of this folder
# (slurm-up.sh, slurm-down.sh, nscluster-up.sh, nscluster-down.sh), which
# source it. It defines functions only.
# shellcheck shell=bash

# state_dir DIR: DIR made absolute (against $PWD), without a trailing slash.
state_dir() {
	local d=$1
	case $d in
	/*) ;;
	*) d=$PWD/$d ;;
	esac
	printf '%s\n' "${d%/}"
}

# alive PID: the process exists and is not a zombie (in a container the
# reaper may be missing, so a killed daemon can linger as a zombie).
alive() {
	local st
	[[ -r /proc/$1/stat ]] || return 1
	st=$(cut -d' ' -f3 "/proc/$1/stat" 2>/dev/null) || return 1
	[[ -n $st && $st != Z && $st != X ]]
}

# wait_gone TICKS PID...: wait up to TICKS tenths of a second for the pids
# to exit; fails if one is still alive then.
wait_gone() {
	local ticks=$1 i pid left
	shift
	for ((i = 0; i < ticks; i++)); do
		left=0
		for pid in "$@"; do
			alive "$pid" && left=1
		done
		((left)) || return 0
		sleep 0.1
	done
	return 1
}

# The launching machine's own /etc/hosts names the cluster's nodes too:
# mpirun and mpiexec.hydra run in the root namespace and resolve every
# host they are given (Open MPI 4's orte_ifislocal calls getaddrinfo for
# each), and a name that is not in /etc/hosts goes to DNS, whose lost
# replies cost the resolver's 5 s timeout (here 1 launch in 3 to 20).
# The block sits between these two lines; it is rewritten in place, since
# a container's /etc/hosts is often a bind mount that cannot be replaced.
hosts_begin='# kbundle test cluster: begin (nscluster-up.sh; nscluster-down.sh removes it)'
hosts_end='# kbundle test cluster: end'

# hosts_strip: stdin without the cluster's block (from any cluster: there
# is one per machine, and a block left by a killed one is stale).
hosts_strip() {
	awk -v b="$hosts_begin" -v e="$hosts_end" '$0 == b {skip = 1; next} $0 == e {skip = 0; next} !skip'
}

# hosts_block FILE [LINES]: FILE with the cluster's block holding LINES
# (one "ADDR NAME" a line) in place of any earlier block; without LINES,
# FILE without the block.
hosts_block() {
	local kept
	kept=$(hosts_strip <"$1") || return 1
	if (($# > 1)); then
		printf '%s\n%s\n%s\n%s\n' "$kept" "$hosts_begin" "$2" "$hosts_end" >"$1"
	else
		printf '%s\n' "$kept" >"$1"
	fi
}
