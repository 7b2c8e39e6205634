#!/bin/sh
# slowapp.sh: an application still running when its job's time is nearly up,
# for the harvest tests of the job scripts. It runs tackapp.sh (which compiles
# what the cache lacks: KERNELS), then says so by making the file
# $SLOWAPP_DIR/compiled.PID, then keeps running until the bundle set at
# $SLOWAPP_SET has more bundles (its base and the layers in SET.d) than when
# it started, i.e. until the job's time-limit harvest wrote one, at most
# SLOWAPP_WAIT seconds (default 60; then it fails, exit 1). It exits
# SLOWAPP_EXIT (default 0).
set -eu
count() {
	n=0
	for f in "$SLOWAPP_SET" "$SLOWAPP_SET".d/*.kbundle; do
		[ -f "$f" ] && n=$((n + 1))
	done
	echo "$n"
}
before=$(count)
"$(dirname "$0")/tackapp.sh"
: >"$SLOWAPP_DIR/compiled.$$"
i=0
while [ "$(count)" -le "$before" ]; do
	i=$((i + 1))
	if [ "$i" -gt $((${SLOWAPP_WAIT:-60} * 10)) ]; then
		echo "slowapp: no new bundle at $SLOWAPP_SET within ${SLOWAPP_WAIT:-60} s" >&2
		exit 1
	fi
	sleep 0.1
done
echo "slowapp: the set has a new bundle; exit ${SLOWAPP_EXIT:-0}"
exit "${SLOWAPP_EXIT:-0}"
