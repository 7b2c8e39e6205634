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
