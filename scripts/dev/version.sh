#!/usr/bin/env bash
# version.sh: print kbundle's version, the one string that the CLI
# (`kbundle version`, linked in as internal/version.linked), `make install`
# and the Python package (kbundle/_version.py, the wheel's metadata) carry.
#
# VERSION at the top of the tree holds the release, a PEP 440 version such
# as 0.1.0. A tree exactly at the tag vVERSION without changes to tracked
# files prints it as it is; any other git tree adds a local version label
# naming the commit, and .dirty for changes not committed:
# 0.1.0+g2e94ddb1f2a3, 0.1.0+g2e94ddb1f2a3.dirty (PEP 440 local versions,
# which pip installs; PyPI takes only the plain release). Outside git (a
# source archive): VERSION as it is.
set -euo pipefail
cd "$(dirname "$0")/../.."

base=$(tr -d ' \t\r\n' <VERSION)
if ! [[ $base =~ ^[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?$ ]]; then
	echo "kbundle: VERSION holds \"$base\", not a release version such as 0.1.0 (PEP 440)" >&2
	exit 1
fi
if ! commit=$(git rev-parse --short=12 HEAD 2>/dev/null); then
	echo "$base"
	exit 0
fi
dirty=''
git diff --quiet HEAD -- 2>/dev/null || dirty=.dirty
if [ -z "$dirty" ] && [ "$(git tag --points-at HEAD 2>/dev/null | grep -Fx "v$base")" = "v$base" ]; then
	echo "$base"
	exit 0
fi
echo "$base+g$commit$dirty"
