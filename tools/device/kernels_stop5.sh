#!/usr/bin/env bash
# Issue 31's graph and TMA rows on one H200, after kernels_stop4.sh: one call
# of the device tool, about 5 minutes, at most 9.5 (each step under its own
# timeout, skipped when the call's time is spent; logs in
# $OUT/kernels-stop5/, a summary on stdout):
#   bash tools/device/kernels_stop5.sh
# 1. build-gpu: the library, bench_graph, bench_cuda and three tests;
# 2. the CUDA tests of what changed: test_launch (ABSOLUTE_POS through every
#    entry and its 1-D-grid twin, 1-D/2-D/3-D grids), test_cuda_backend (a
#    twin opted in to 64 KiB of dynamic shared memory); test_dialect_ops (the
#    TMA copy forms; long: NVRTC compiles every op) runs last, step 6;
# 3. bench_graph three times (the replay with the 1-D-grid entries: target
#    <= 1.01x the raw driver graph);
# 4. tools/device/tma_raw_study.cu --round 2 (nvcc, sm_90a): the raw TMA
#    copy with all the shared memory, other box aspects, L2 evict-first
#    hints, blocked tile order, loads decoupled from 1-3 store threads;
# 5. bench_cuda --tma (cubec's forms; the headline is 64x256, 3 stages,
#    2 stores reading, round 1's best);
# 6. test_dialect_ops on both backends with the time left (at most 150 s).
# (test_dialect_nvrtc, NVRTC only, runs on any machine with libnvrtc.)
set -uo pipefail
dest="${OUT:-build-gpu/logs}/kernels-stop5"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
left() { [ $((SECONDS - started)) -lt "$1" ]; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,clocks.mem,compute_cap \
  --format=csv,noheader | tee "$dest/gpu.txt"

step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
  timeout 150 cmake --build build-gpu -j"$(nproc)" --target bench_graph bench_cuda test_launch \
    test_dialect_ops test_cuda_backend) >"$dest/build.log" 2>&1 ||
  { grep -E 'error|Error' "$dest/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

step "tests on CUDA"
for t in test_launch test_cuda_backend; do
  if [ -x "build-gpu/tests/$t" ] && left 200; then
    timeout 60 "./build-gpu/tests/$t" >"$dest/$t.log" 2>&1
    echo "$t rc=$?"
    grep -E "absolute_pos|TMA copy|grid1d|dynamic_shared|instructions|PASSED|FAILED|ERROR" "$dest/$t.log" | head -8
  fi
done

for i in 1 2 3; do
  if left 250 && [ -x build-gpu/bench/bench_graph ]; then
    step "bench_graph $i"
    timeout 40 ./build-gpu/bench/bench_graph >"$dest/graph.run$i.log" 2>&1
    echo "rc=$?"; grep -E "ratio|padded|entry|replay" "$dest/graph.run$i.log" | head -8
  fi
done

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ] && left 300; then
  step "tma_raw_study --round 2"
  timeout 60 "$nvcc" -O3 -std=c++17 -arch=sm_90a -o build-gpu/tma_raw_study \
    tools/device/tma_raw_study.cu >"$dest/tma_raw_study.build.log" 2>&1
  echo "nvcc rc=$?"; grep -E "error" "$dest/tma_raw_study.build.log" | head -12
  if [ -x build-gpu/tma_raw_study ]; then
    timeout 60 ./build-gpu/tma_raw_study --round 2 >"$dest/tma_raw_study.log" 2>&1
    echo "rc=$?"; cat "$dest/tma_raw_study.log"
  fi
fi

if left 320 && [ -x build-gpu/bench/bench_cuda ]; then
  step "bench_cuda --tma"
  timeout 45 ./build-gpu/bench/bench_cuda --tma >"$dest/bench_cuda_tma.log" 2>&1
  echo "rc=$?"; grep -E "TMA|float4" "$dest/bench_cuda_tma.log" | head -20
fi
if left 420 && [ -x build-gpu/tests/test_dialect_ops ]; then
  step "test_dialect_ops"
  budget=$((570 - (SECONDS - started)))
  [ "$budget" -gt 150 ] && budget=150
  timeout "$budget" ./build-gpu/tests/test_dialect_ops >"$dest/test_dialect_ops.log" 2>&1
  echo "test_dialect_ops rc=$?"
  grep -E "TMA copy|pipelined|PASSED|FAILED|ERROR" "$dest/test_dialect_ops.log" | head -8
fi
step done
