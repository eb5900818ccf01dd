#!/bin/sh
# Issue 31's CPU figures, reproduced: five runs of `make bench` (bench_cpu:
# copies against memcpy, barrier kernels against PoCL), then bench_bundle's
# cold first compile (each line a median of fresh processes, each with a new
# CUBE_CACHE_DIR), then the compiler's steps. Each log starts with the load.
#   sh docs/measurements/2026-12-03/cpu-issue31-run.sh OUT_DIR [RUNS]
set -eu
OUT=${1:?an output directory}
RUNS=${2:-5}
mkdir -p "$OUT"
i=1
while [ "$i" -le "$RUNS" ]; do
  { echo "# load before: $(cat /proc/loadavg)"; make --no-print-directory bench 2>&1
    echo "# load after: $(cat /proc/loadavg)"; } >"$OUT/make-bench-run$i.log"
  i=$((i + 1))
done
i=1
while [ "$i" -le 3 ]; do
  { echo "# load before: $(cat /proc/loadavg)"; ./build/bench/bench_bundle --runs 7
    echo "# load after: $(cat /proc/loadavg)"; } >"$OUT/bench-bundle-run$i.log" 2>&1
  i=$((i + 1))
done
sh docs/measurements/2026-12-03/cpu-compile-steps.sh build 15 >"$OUT/compile-steps.log" 2>&1
# The rows the issue asks about, one line per run.
grep -H -E "cube_(write|read) (1|256) MiB|cubec / PoCL" "$OUT"/make-bench-run*.log
grep -H "cold compile" "$OUT"/bench-bundle-run*.log
