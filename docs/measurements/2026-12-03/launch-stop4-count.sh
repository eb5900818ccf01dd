#!/usr/bin/env bash
# The cache lines and instructions one launch of the core's path costs
# (issue 31, launch row), counted by callgrind: figures that do not move with
# the machine's load. bench_launch_count makes N launches of an empty kernel
# and of a 4-argument axpy (2 buffers + 1 scalar + the info block), the CPU
# backend's dispatch a no-op (the dispatch-only path bench_cuda --launch's
# "core" row also measures) or, with --cpu, the CPU backend's own dispatch.
# --thrash runs 64 KiB of code and touches 1 MiB of data between launches
# (as the driver's own launch does on a GPU), so that with --cache-sim=yes
# the first-level misses per launch are the distinct code and data lines a
# launch touches.
#   bash docs/measurements/2026-12-03/launch-stop4-count.sh [BUILD_DIR] [--cpu]
# BUILD_DIR (default build) is a Release build with bench_launch_count.
# Prints, per launch: instructions (Ir), code lines (I1 misses), data lines
# (D1 read + write misses, and each).
set -euo pipefail
build="${1:-build}"
extra="${2:-}"
n=5000
out="$(mktemp -d /tmp/launch-count-XXXXXX)"
for kind in empty axpy; do
  flag=""
  [ "$kind" = axpy ] && flag=--axpy
  for mode in tight --thrash; do
    th=""
    [ "$mode" = --thrash ] && th=--thrash
    valgrind --tool=callgrind --cache-sim=yes --toggle-collect=measured \
      --callgrind-out-file="$out/$kind$th.out" \
      "$build/bench/bench_launch_count" $flag $th $extra --launches $n >/dev/null 2>&1
    python3 - "$out/$kind$th.out" "$n" "$kind" "$mode" <<'PY'
import sys
lines = open(sys.argv[1]).read().split('\n')
events = next(l for l in lines if l.startswith('events:')).split()[1:]
totals = next(l for l in lines if l.startswith(('summary:', 'totals:'))).split()[1:]
d = dict(zip(events, (int(t) for t in totals)))
n = int(sys.argv[2])
print(f"{sys.argv[3]:6s} {sys.argv[4]:9s} Ir {d['Ir'] / n:7.1f}  code lines {d['I1mr'] / n:5.1f}  "
      f"data lines {(d['D1mr'] + d['D1mw']) / n:5.1f} (read {d['D1mr'] / n:.1f}, "
      f"written {d['D1mw'] / n:.1f})")
PY
  done
done
rm -rf "$out"
