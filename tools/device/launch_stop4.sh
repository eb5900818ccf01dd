#!/usr/bin/env bash
# Issue 31's launch row after the straight path (branch perf-launch2,
# docs/measurements/2026-12-03/launch-stop4.md), on the GPU machine:
#   1. build (Release) in build-gpu;
#   2. the CUDA and conformance tests (ctest -L "cuda|conformance"): the
#      straight path and the CUDA dispatch's new frame run there;
#   3. bench_cuda --launch x RUNS (default 5) and bench_core_launch x RUNS,
#      through tools/device/launch_bench.sh (no graph runs): the empty-kernel
#      and 4-argument axpy ratios against raw cuLaunchKernel (target <= 1.03x)
#      with the in-situ breakdown (the core's path between two driver
#      launches, in a tight loop, the dispatch slot alone).
# Usage (repository root): bash tools/device/launch_stop4.sh [RUNS]
# Logs under $OUT (default build-gpu/logs-stop4).
set -uo pipefail
runs="${1:-5}"
out="${OUT:-build-gpu/logs-stop4}"
mkdir -p "$out"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; exit 1; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
step 'ctest -L "cuda|conformance"'
ctest --test-dir build-gpu -L "cuda|conformance" --output-on-failure -j4 >"$out/ctest.log" 2>&1
echo "rc=$?"
grep -E "tests passed|tests failed|\(Failed\)|Skipped" "$out/ctest.log" | tail -20
step "bench_cuda --launch x$runs, bench_core_launch x$runs"
BUILD=build-gpu OUT="$out" bash tools/device/launch_bench.sh "$runs" 0
step done
