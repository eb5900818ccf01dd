#!/usr/bin/env bash
# Issue 31's launch and graph-replay figures on the GPU machine, several runs
# of each benchmark and the median of their medians (each run alternates
# cubec and the raw driver inside itself):
#   bench_cuda --launch   x RUNS: empty-kernel and 4-argument axpy enqueue
#                         against raw cuLaunchKernel (target <= 1.03x), with
#                         the breakdown (dispatch slot alone, the core with a
#                         no-op dispatch, the core to dispatch)
#   bench_graph           x GRAPH_RUNS: replay per kernel against a raw
#                         driver graph of a raw kernel (target <= 1.01x) and
#                         of cubec's own entry (the replay path alone)
#   bench_core_launch     x RUNS: the core's path and its phases on this
#                         host's CPU (the dispatch a no-op)
# Usage (repository root, after a build in $BUILD, default build-gpu):
#   BUILD=build-gpu OUT=dir bash tools/device/launch_bench.sh [RUNS] [GRAPH_RUNS]
set -uo pipefail
build="${BUILD:-build-gpu}"
out="${OUT:-$build/logs}"
runs="${1:-5}"
graph_runs="${2:-3}"
mkdir -p "$out"
for i in $(seq 1 "$runs"); do
  timeout 60 "./$build/bench/bench_cuda" --launch >"$out/launch_bench_cuda.run$i.log" 2>&1 ||
    echo "bench_cuda --launch run $i: rc=$?"
  timeout 60 "./$build/bench/bench_core_launch" >"$out/launch_bench_core.run$i.log" 2>&1 ||
    echo "bench_core_launch run $i: rc=$?"
done
for i in $(seq 1 "$graph_runs"); do
  timeout 90 "./$build/bench/bench_graph" >"$out/launch_bench_graph.run$i.log" 2>&1 ||
    echo "bench_graph run $i: rc=$?"
done
# The median over runs of each figure, and its range.
summary() { # label, file glob, line pattern, field (negative: from the end)
  local label="$1" glob="$2" pattern="$3" field="$4"
  # shellcheck disable=SC2086
  grep -h -- "$pattern" $glob 2>/dev/null |
    awk -v f="$field" '{ print (f < 0) ? $(NF + f + 1) : $f }' | sort -g |
    awk -v label="$label" '
      { v[NR] = $1 }
      END {
        if (NR == 0) { printf "  %-52s (no runs)\n", label; exit }
        m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf "  %-52s median %.3f  range %.3f-%.3f  (%d runs)\n", label, m, v[1], v[NR], NR
      }'
}
echo "launch and graph figures, medians over runs:"
cuda_logs="$out/launch_bench_cuda.run*.log"
graph_logs="$out/launch_bench_graph.run*.log"
core_logs="$out/launch_bench_core.run*.log"
summary "empty-kernel launch, cubec us" "$cuda_logs" "empty-kernel launch enqueue" 5
summary "empty-kernel launch, raw cuLaunchKernel us" "$cuda_logs" "empty-kernel launch enqueue" 8
summary "empty-kernel launch ratio (target <= 1.03)" "$cuda_logs" "empty-kernel launch enqueue" 11
summary "4-argument axpy, cubec us" "$cuda_logs" "4-argument axpy launch enqueue" 6
summary "4-argument axpy, raw us" "$cuda_logs" "4-argument axpy launch enqueue" 9
summary "4-argument axpy ratio (target <= 1.03)" "$cuda_logs" "4-argument axpy launch enqueue" 12
summary "graph replay ratio vs raw graph (target <= 1.01)" "$graph_logs" "ratio cubec graph / raw graph  " 7
summary "graph replay ratio vs raw graph of cubec's entry" "$graph_logs" "raw graph of its entry" 10
summary "core path, empty kernel, ns (host CPU)" "$core_logs" "empty kernel .*ns per launch" -4
summary "core path, axpy, ns (host CPU)" "$core_logs" "(axpy) .*ns per launch" -4
echo "breakdowns (first run):"
grep -h "breakdown" "$out/launch_bench_cuda.run1.log" 2>/dev/null
grep -h -A2 "^phases" "$out/launch_bench_core.run1.log" 2>/dev/null
