#!/bin/sh
# Issue 31's cold first compile (cpu-compile-stop3.md): ROUNDS invocations
# of `bench_bundle --runs 7` (each line a median of 7 fresh processes, each
# with a new CUBE_CACHE_DIR), each log starting with the load; with BASE (a
# build of the code before, e.g. `git archive main` built in BASE/build),
# that build's bench_bundle runs right before each, under the same load.
# Then the compiler's steps.
#   sh docs/measurements/2026-12-03/cpu-compile-stop3-run.sh OUT_DIR [ROUNDS] [BASE]
set -eu
OUT=${1:?an output directory}
ROUNDS=${2:-6}
BASE=${3:-}
mkdir -p "$OUT"
run() { # $1: bench_bundle binary, $2: log
  { echo "# load before: $(cat /proc/loadavg)"; "$1" --runs 7
    echo "# load after: $(cat /proc/loadavg)"; } >"$2" 2>&1
}
i=1
while [ "$i" -le "$ROUNDS" ]; do
  [ -n "$BASE" ] && run "$BASE/build/bench/bench_bundle" "$OUT/before-bench-bundle-run$i.log"
  run ./build/bench/bench_bundle "$OUT/bench-bundle-run$i.log"
  i=$((i + 1))
done
sh docs/measurements/2026-12-03/cpu-compile-steps.sh build 15 >"$OUT/compile-steps.log" 2>&1
for f in "$OUT"/*bench-bundle-run*.log; do
  printf '%s: %s | %s\n' "$(basename "$f" .log)" "$(grep 'cold compile' "$f" | awk '{print $(NF-1)}')" \
    "$(head -1 "$f" | cut -d' ' -f4-6)"
done
