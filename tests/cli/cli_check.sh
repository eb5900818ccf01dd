#!/usr/bin/env bash
# The CLI's command line, for every subcommand `cubec --help` lists (so a
# new subcommand is checked without touching this file):
#   cubec NAME --help             exit 0, prints "usage: cubec NAME"
#   cubec help NAME               the same
#   cubec NAME --no-such-flag     exit 2, names the flag
#   cubec NAME --backend          exit 2 (missing value), when it takes --backend
#   cubec NAME --backend tpu      exit 2 (unknown backend)
#   cubec NAME --device x         exit 2 (not a number)
# `cubec info` lists the collective transports.
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
