#!/usr/bin/env bash
# The CLI's command line, for every subcommand `cubec --help` lists (so a
# new subcommand is checked without touching this file):
#   cubec NAME --help             exit 0, prints "usage: cubec NAME"
#   cubec help NAME               the same
#   cubec NAME --no-such-flag     exit 2, names the flag
#   cubec NAME --backend          exit 2 (missing value), when it takes --backend
#   cubec NAME --backend tpu      exit 2 (unknown backend)
#   cubec NAME --device x         exit 2 (not a number)
# `cubec info` lists the collective transports, every optional component
# and the cache paths; `cubec info --json` is valid JSON with the same.
# Then `cubec bench` end to end on a small run: the CSV has rows for every
# benchmark, and the PNG is written when matplotlib is there.
#   tests/cli/cli_check.sh path/to/cubec WORKDIR
set -uo pipefail
cubec="$1"
work="$2"
mkdir -p "$work"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

expect() {  # expected-status description command...
  local want="$1" what="$2"
  shift 2
  local out rc
  out="$("$@" 2>&1)"
  rc=$?
  [ "$rc" = "$want" ] || fail "$what: exit $rc, want $want: $out"
  printf '%s' "$out"
}

commands="$("$cubec" --help | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {exit}' | grep -v '^help$\|^version,$')"
[ -n "$commands" ] || fail "cubec --help lists no commands"
for name in $commands; do
  out="$(expect 0 "$name --help" "$cubec" "$name" --help)"
  grep -q "^usage: cubec $name" <<<"$out" || fail "$name --help does not print its usage"
  out="$(expect 0 "help $name" "$cubec" help "$name")"
  grep -q "^usage: cubec $name" <<<"$out" || fail "help $name does not print its usage"
  out="$(expect 2 "$name --no-such-flag" "$cubec" "$name" --no-such-flag)"
  grep -q -- "--no-such-flag" <<<"$out" || fail "$name does not name the unknown flag"
  if grep -q -- "--backend" <<<"$("$cubec" "$name" --help)"; then
    out="$(expect 2 "$name --backend (no value)" "$cubec" "$name" --backend)"
    grep -q "needs a value" <<<"$out" || fail "$name --backend: no 'needs a value'"
    expect 2 "$name --backend tpu" "$cubec" "$name" --backend tpu >/dev/null
    expect 2 "$name --device x" "$cubec" "$name" --device x >/dev/null
  fi
done
expect 2 "unknown command" "$cubec" no-such-command >/dev/null
expect 0 "version" "$cubec" version >/dev/null
# `cubec info` lists the collectives' transports: inproc always available,
# nccl with a version or why not.
out="$(expect 0 "info" "$cubec" info)"
grep -q "^  inproc  *yes " <<<"$out" || fail "info does not list the inproc transport as available"
grep -q "^  nccl  *\(yes  *[0-9][0-9.]*\|no  *- \+[^ ]\)" <<<"$out" ||
  fail "info does not list nccl with a version or why not"

# Every optional component and the C compiler, each with a path or why not;
# the cache paths.
for component in cuda nvrtc nccl mpi sqlite libclang cc; do
  grep -q "^  $component  *\(yes  */\|no  *- (.\)" <<<"$out" ||
    fail "info does not list the component $component with a path or why not"
done
grep -q "^  kernel  *." <<<"$out" || fail "info does not give the kernel cache's path"
grep -q "^  tune  *." <<<"$out" || fail "info does not give the tune cache's path"
# The libraries cubec info probes are the ones the loaders in src/ load.
source_dir="$(cd "$(dirname "$0")/../.." && pwd)"
for library in $(grep -o '"lib[a-z0-9_+-]*\.so[0-9.]*"' "$source_dir/tools/cubec_info.c" | tr -d '"' | sort -u); do
  grep -rqF "\"$library\"" "$source_dir/src" || fail "cubec info probes $library, which no loader in src/ names"
done
# A component that is missing says why and how to get it; an override that
# replaces the default is followed.
out="$(CUBE_SQLITE_PATH=/nonexistent/libsqlite3.so.0 CUBE_CC=/nonexistent/cc "$cubec" info 2>&1)"
grep -q "^  sqlite  *no  *- (/nonexistent/libsqlite3.so.0: .*CUBE_SQLITE_PATH)" <<<"$out" ||
  fail "info with CUBE_SQLITE_PATH=/nonexistent: sqlite not missing with its reason: $(grep sqlite <<<"$out")"
grep -q "^  cc  *no  *- ('/nonexistent/cc' is not an executable" <<<"$out" ||
  fail "info with CUBE_CC=/nonexistent/cc: the compiler not missing with its reason"
# --json: one valid JSON object with the same facts, cache paths included.
CUBE_CACHE_DIR="$work/info-cache" CUBE_TUNE_CACHE= "$cubec" info --json >"$work/info.json" ||
  fail "info --json failed"
python3 -m json.tool "$work/info.json" >/dev/null || fail "info --json is not valid JSON: $(head -c 300 "$work/info.json")"
python3 - "$work/info.json" "$work/info-cache" <<'PY' || fail "info --json lacks what the text says"
import json, sys
info = json.load(open(sys.argv[1]))
names = {c["name"] for c in info["components"]}
assert names == {"cuda", "nvrtc", "nccl", "mpi", "sqlite", "libclang", "cc"}, names
for c in info["components"]:
    assert c["available"] == (c["path"] is not None) and c["detail"], c
assert {b["name"] for b in info["backends"]} == {"cpu", "cuda"}, info["backends"]
assert info["caches"]["kernel"]["path"] == sys.argv[2] + "/kernels", info["caches"]
assert info["caches"]["tune"]["path"] == sys.argv[2] + "/tune.sqlite", info["caches"]
assert info["devices"] and info["devices"][0]["properties"]["backend"] == "cpu", info["devices"]
assert info["version"].startswith("%d." % 0) or info["version"][0].isdigit()
PY

rm -f "$work/bench.csv" "$work/bench.png"
have_plot=0
for py in "${CUBE_PYTHON:-python3}" /usr/bin/python3; do
  "$py" -c 'import matplotlib' >/dev/null 2>&1 && have_plot=1
done
plot=()
[ "$have_plot" = 1 ] && plot=(--plot "$work/bench.png")
expect 0 "bench" "$cubec" bench --backend cpu --sweep --quick --reps 1 --csv "$work/bench.csv" "${plot[@]}" >/dev/null
for bench in launch copy alloc kernel; do
  grep -q "^$bench,.*,cubec," "$work/bench.csv" || fail "bench.csv has no cubec row for $bench"
  grep -q "^$bench,.*,baseline," "$work/bench.csv" || fail "bench.csv has no baseline row for $bench"
done
if [ "$have_plot" = 1 ]; then
  [ "$(head -c 8 "$work/bench.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    fail "bench.png is not a PNG"
else
  echo "note: matplotlib missing, the PNG was not checked"
fi

echo "$failures failure(s)"
[ "$failures" = 0 ]
