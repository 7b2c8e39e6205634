#!/usr/bin/env bash
# capture-launcher-env.sh: record what a real launcher gives its tasks, as
# the fixtures in detect/testdata/launchers/ (see their README).
#
# Usage: scripts/dev/capture-launcher-env.sh OUTDIR LAUNCHER [ARG...]
#   e.g. scripts/dev/capture-launcher-env.sh /tmp/x .venv-mpirt/impi/bin/mpiexec.hydra -bootstrap fork -np 4
#
# Runs LAUNCHER ARG... from `env -i` with a small base environment (HOME,
# LANG, LOGNAME, PATH, and the root/oversubscription settings Open MPI
# needs here), with LAUNCHER's own folder first on PATH (Intel MPI's
# mpirun script runs the mpiexec.hydra it finds there); each task writes its whole environment, sorted, to
# OUTDIR/rank<N>.env, N from the launcher's own rank variable (torchrun: RANK;
# pass --no-python). No MPI
# program runs: these are the variables a task sees before MPI_Init.
# ENVDUMP_DIR is the capture harness's own variable.
set -euo pipefail
out=$1
shift
path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
case $1 in */*) path=$(cd "$(dirname "$1")" && pwd):$path ;; esac
mkdir -p "$out"
out=$(cd "$out" && pwd)
exec env -i HOME="$HOME" LANG=C.UTF-8 LOGNAME="${LOGNAME:-$(id -un)}" \
	PATH="$path" \
	ENVDUMP_DIR="$out" "$@" /bin/sh -c \
	'env | LC_ALL=C sort >"$ENVDUMP_DIR/rank${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-${PMIX_RANK:-${RANK:-x}}}}.env"'
