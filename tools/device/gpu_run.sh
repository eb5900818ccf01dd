#!/usr/bin/env bash
# The lead's GPU run: build, the whole suite (CUDA groups included), the
# CUDA benchmarks side by side with the raw driver and PyTorch, and the
# conformance suite under compute-sanitizer memcheck. Logs under $OUT (or
# build-gpu/logs). Run from the repository root on the GPU machine:
#   bash tools/device/gpu_run.sh [quick]
set -uo pipefail
out="${OUT:-build-gpu/logs}"
mkdir -p "$out"
# cmocka and xxHash from Debian's packages carried in .deb/ (the GPU image has
# no registry).
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release && cmake --build build-gpu -j"$(nproc)" -- -k) \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
timeout 300 ctest --test-dir build-gpu -j4 --output-on-failure >"$out/ctest.log" 2>&1
grep -E "tests passed|\*\*\*|Not Run|Skipped" "$out/ctest.log" | head -30
./build-gpu/cubec demo >"$out/demo_cold.log" 2>&1; echo "demo (cold) rc=$?"
./build-gpu/cubec demo >"$out/demo_warm.log" 2>&1; echo "demo (warm) rc=$?"
grep -E "kernel cache|checks passed" "$out/demo_cold.log" "$out/demo_warm.log"
timeout 60 ./build-gpu/bench/bench_alloc 2>&1 | tee "$out/bench_alloc.log"
timeout 240 ./build-gpu/bench/bench_cuda ${1:+--quick} 2>&1 | tee "$out/bench_cuda.log" | tail -14
# PyTorch before and after cubec's run, so neither side gets the only warm GPU.
PYTHONUNBUFFERED=1 timeout 200 python3 bench/graph_torch.py 2>&1 | tee "$out/graph_torch.log" | tail -4
timeout 200 ./build-gpu/bench/bench_graph 2>&1 | tee "$out/bench_graph.log" | tail -25
timeout 300 ./build-gpu/bench/bench_tune 2>&1 | tee "$out/bench_tune.log" | tail -26
PYTHONUNBUFFERED=1 timeout 200 python3 bench/graph_torch.py 2>&1 | tee -a "$out/graph_torch.log" | tail -4
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$cs" ]; then
  for suite in launch memory streams; do
    CUBE_MM_PASSTHROUGH=1 timeout 300 "$cs" --tool memcheck --report-api-errors no --error-exitcode 9 \
      ./build-gpu/tests/test_$suite >>"$out/memcheck.log" 2>&1
    echo "memcheck (conformance $suite, pass-through pool) rc=$?"
  done
  grep "ERROR SUMMARY" "$out/memcheck.log"
fi
