#!/usr/bin/env bash
# Issue 31's graph and TMA rows on one H200, fourth stop: one call of the
# device tool, about 3 minutes, at most 6 (each step under its own timeout, and skipped
# when the call's time is spent; logs in $OUT/kernels-stop4/ and a summary on
# stdout):
#   bash tools/device/kernels_stop4.sh
# 1. tools/device/tma_raw_study.cu built with nvcc (sm_90a) and run: the TMA
#    copy written in CUDA by hand in ~30 forms (box shapes, stages, stores in
#    flight, boxes per stage, non-tensor bulk copies, TMA load + thread
#    stores) against the float4 copy and cudaMemcpyAsync D2D: is the 0.94x
#    the TMA path or cubec?
# 2. build-gpu (only the library, the two benchmarks and three tests);
# 3. bench_graph --code-probe (raw graphs of the padded raw kernel with the
#    1-D grid test, the context struct, both), then bench_graph;
# 4. bench_cuda --tma (cubec's TMA copy forms, encode, two-map launch);
# 5. on CUDA: test_launch (ABSOLUTE_POS through every entry and its 1-D
#    twin, 1-D/2-D/3-D grids), test_dialect_ops (the TMA copy forms),
#    test_dialect_nvrtc (the twins' instruction count), while time is left.
set -uo pipefail
dest="${OUT:-build-gpu/logs}/kernels-stop4"
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

# 1. The raw TMA study first: it needs no cmake build.
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  step "tma_raw_study: build"
  mkdir -p build-gpu
  timeout 60 "$nvcc" -O3 -std=c++17 -arch=sm_90a -Xptxas -v -o build-gpu/tma_raw_study \
    tools/device/tma_raw_study.cu >"$dest/tma_raw_study.build.log" 2>&1
  echo "nvcc rc=$?"; grep -E "error|registers" "$dest/tma_raw_study.build.log" | head -12
  if [ -x build-gpu/tma_raw_study ]; then
    step "tma_raw_study: run"
    timeout 60 ./build-gpu/tma_raw_study >"$dest/tma_raw_study.log" 2>&1
    echo "rc=$?"; cat "$dest/tma_raw_study.log"
  fi
else
  echo "kernels_stop4: no nvcc on this machine: the raw TMA study is skipped"
fi

# 2. Only what steps 3 and 4 run.
if left 120; then
  step build
  (cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
    timeout $((140 - (SECONDS - started))) \
      cmake --build build-gpu -j"$(nproc)" --target bench_graph bench_cuda test_launch \
        test_dialect_ops test_dialect_nvrtc) \
    >"$dest/build.log" 2>&1 || { grep -E 'error|Error' "$dest/build.log" | head -40; }
fi
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

# 3. The graph: which feature of cubec's small kernel costs the replay.
if left 150 && [ -x build-gpu/bench/bench_graph ]; then
  step "bench_graph --code-probe"
  timeout 30 ./build-gpu/bench/bench_graph --code-probe >"$dest/graph_code_probe.log" 2>&1
  echo "rc=$?"; grep -E "probe|padded|grid|context|both" "$dest/graph_code_probe.log" | head -8
fi
if left 175 && [ -x build-gpu/bench/bench_graph ]; then
  step "bench_graph"
  timeout 45 ./build-gpu/bench/bench_graph >"$dest/graph.log" 2>&1
  echo "rc=$?"; grep -E "ratio|padded|entry|replay" "$dest/graph.log" | head -8
fi

# 4. cubec's TMA copy forms, the same run's baselines.
if left 215 && [ -x build-gpu/bench/bench_cuda ]; then
  step "bench_cuda --tma"
  timeout 60 ./build-gpu/bench/bench_cuda --tma >"$dest/bench_cuda_tma.log" 2>&1
  echo "rc=$?"; grep -E "TMA|float4|launch" "$dest/bench_cuda_tma.log" | head -40
fi
# 5. The conformance of what changed, on CUDA.
if left 240; then
  step "tests on CUDA"
  for t in test_launch test_dialect_ops test_dialect_nvrtc; do
    if [ -x "build-gpu/tests/$t" ] && left 300; then
      timeout 60 "./build-gpu/tests/$t" >"$dest/$t.log" 2>&1
      echo "$t rc=$?"
      grep -E "absolute_pos|TMA copy|grid1d|instructions|PASSED|FAILED|ERROR" "$dest/$t.log" | head -8
    fi
  done
fi
step done
