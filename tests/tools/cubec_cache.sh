#!/usr/bin/env bash
# `cubec cache info | verify | clear` on a cache of its own: a demo fills it,
# verify passes, a flipped byte makes verify fail and remove that entry, the
# next demo rebuilds it (a warning), clear empties it.
set -euo pipefail
cubec="$1"
dir="$(mktemp -d /tmp/cube-cli-cache-XXXXXX)"
trap 'rm -rf "$dir"' EXIT
export CUBE_CACHE_DIR="$dir" CUBE_BACKEND=cpu
"$cubec" demo >/dev/null
"$cubec" cache info | tee "$dir/info.txt"
grep -q "entries" "$dir/info.txt"
"$cubec" cache verify
entry="$(ls "$dir"/kernels/*.ck | head -n1)"
printf 'x' | dd of="$entry" bs=1 seek=2000 conv=notrunc 2>/dev/null
if "$cubec" cache verify; then echo "FAILED: verify passed a damaged entry"; exit 1; fi
[ ! -e "$entry" ] || { echo "FAILED: the damaged entry was not removed"; exit 1; }
"$cubec" cache verify
"$cubec" demo >/dev/null
"$cubec" cache clear
"$cubec" cache info | grep -q " 0 entries"
chmod 0777 "$dir"
"$cubec" cache info | grep -q "not used: .*writable by others"
if "$cubec" cache bogus 2>/dev/null; then echo "FAILED: a bogus action was accepted"; exit 1; fi
echo "cubec cache: info, verify, clear behave"
