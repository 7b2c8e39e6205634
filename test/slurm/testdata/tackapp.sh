#!/bin/sh
# tackapp.sh: a stand-in for a Tack-like JIT application, used by the job
# script tests. It "compiles" KERNELS kernels (default 5): a kernel whose file
# is in $TACK_CACHE_DIR with the right content is a hit; otherwise it is
# compiled (stored unless TACK_CACHE=read). With no TACK_CACHE_DIR it uses a
# private default directory, like a framework's own default cache. It prints
# one line per process:
#   tackapp: rank=R size=S hits=H compiled=C dir=D
# where R and S come from the launcher (none/none for a plain process).
set -eu
dir=${TACK_CACHE_DIR:-${TMPDIR:-/tmp}/tackapp-default-$$}
mode=${TACK_CACHE:-write}
n=${KERNELS:-5}
rank=${PALS_RANKID:-${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${SLURM_PROCID:-none}}}}
size=${PMI_SIZE:-${OMPI_COMM_WORLD_SIZE:-${SLURM_NTASKS:-none}}}
hits=0
compiled=0
i=1
while [ "$i" -le "$n" ]; do
	f=$dir/kernel-$i.bin
	if [ -f "$f" ] && [ "$(cat "$f")" = "kernel $i compiled" ]; then
		hits=$((hits + 1))
	else
		compiled=$((compiled + 1))
		if [ "$mode" != read ]; then
			mkdir -p "$dir"
			echo "kernel $i compiled" >"$f.tmp.$$"
			mv "$f.tmp.$$" "$f"
		fi
	fi
	i=$((i + 1))
done
echo "tackapp: rank=$rank size=$size hits=$hits compiled=$compiled dir=$dir"
