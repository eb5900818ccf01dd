#!/usr/bin/env bash
# The lead's GPU run: build, the whole suite (CUDA groups included), every
# CUDA benchmark side by side with its baseline (the raw driver, NCCL,
# PyTorch), the CLI sweep, the single-GPU pass of the multi-GPU script, and
# the conformance suite under compute-sanitizer memcheck. Logs under $OUT
# (or build-gpu/logs). Run from the repository root on the GPU machine:
#   bash tools/device/gpu_run.sh [quick] [tests|bench|all|tma-sweep]
# "tests" stops after the suite and the CLI; "bench" skips the suite (the
# build is kept between calls while the machine stays warm); "tma-sweep"
# builds and runs only the differential tensor-map sweep (every case on CUDA
# and on the CPU, compared byte for byte, padding included: the case count
# and the mismatches, tools/device/tma_sweep.c), and the TMA tests.
set -uo pipefail
out="${OUT:-build-gpu/logs}"
quick=""
phase=all
for a in "$@"; do
  case "$a" in
  quick) quick=1 ;;
  tests | bench | all | tma-sweep) phase="$a" ;;
  *) echo "gpu_run.sh: unknown argument '$a' (quick, tests, bench, all or tma-sweep)"; exit 2 ;;
  esac
done
mkdir -p "$out"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
# cmocka, xxHash and SQLite from Debian's packages carried in .deb/ (the GPU
# image has no registry).
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm --format=csv | tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
if [ "$phase" = tma-sweep ]; then
  step tma-sweep
  # (--interleave adds the interleaved cases, which only CUDA runs: see the
  # tool's header before trusting it with the GPU.)
  timeout 500 ./build-gpu/tests/tma_sweep ${quick:+--quick} >"$out/tma_sweep.log" 2>&1
  echo "tma_sweep rc=$?"
  grep -E "^tma_sweep:" "$out/tma_sweep.log"
  grep -E "MISMATCH" "$out/tma_sweep.log" | head -40
  timeout 200 ctest --test-dir build-gpu -R "tma|tensor_map" --output-on-failure >"$out/ctest_tma.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Skipped" "$out/ctest_tma.log" | head -20
  grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest_tma.log" | head -60
  exit 0
fi
if [ "$phase" != bench ]; then
step ctest
timeout 300 ctest --test-dir build-gpu -j8 --output-on-failure --timeout 280 >"$out/ctest.log" 2>&1
grep -E "tests passed|\*\*\*|Failed|Not Run" "$out/ctest.log" | head -40
grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest.log" | head -100
grep -iE "skip" "$out/ctest.log" | grep -viE "0 skipped" | head -20
step cli
./build-gpu/cubec info >"$out/info.log" 2>&1; echo "cubec info rc=$?"; head -30 "$out/info.log"
./build-gpu/cubec demo >"$out/demo_cold.log" 2>&1; echo "demo (cold) rc=$?"
./build-gpu/cubec demo >"$out/demo_warm.log" 2>&1; echo "demo (warm) rc=$?"
grep -E "kernel cache|checks passed|tune|gemm|GEMM" "$out/demo_cold.log" "$out/demo_warm.log" | head -20
CUBE_LOG=info ./build-gpu/examples/saxpy >"$out/saxpy_log.log" 2>&1; echo "saxpy CUBE_LOG=info rc=$?"; head -8 "$out/saxpy_log.log"
timeout 120 ./build-gpu/cubec bench --backend cuda --sweep --csv "$out/h200.csv" --plot "$out/h200.png" >"$out/cli_sweep.log" 2>&1
echo "cubec bench --sweep rc=$?"; tail -12 "$out/cli_sweep.log"
fi
[ "$phase" = tests ] && { step done
# Every log in one file: the device tool returns only a few files per call.
tar czf /tmp/all-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/all-logs.tgz "$out/all-logs.tgz"; exit 0; }
step bench_cuda
timeout 240 ./build-gpu/bench/bench_cuda ${quick:+--quick} >"$out/bench_cuda.log" 2>&1; echo "bench_cuda rc=$?"
tail -40 "$out/bench_cuda.log"
step reduce_gemm_torch
# PyTorch's torch.sum and torch.matmul (bf16 8192^3) beside bench_cuda --dialect.
PYTHONUNBUFFERED=1 timeout 240 python3 bench/reduce_gemm_torch.py --bench build-gpu/bench/bench_cuda \
  ${quick:+--quick} >"$out/reduce_gemm_torch.log" 2>&1; echo "reduce_gemm_torch rc=$?"
tail -12 "$out/reduce_gemm_torch.log"
step bench_graph
PYTHONUNBUFFERED=1 timeout 200 python3 bench/graph_torch.py 2>&1 | tee "$out/graph_torch.log" | tail -4
timeout 200 ./build-gpu/bench/bench_graph ${quick:+--quick} 2>&1 | tee "$out/bench_graph.log" | tail -20
step bench_tune
timeout 200 ./build-gpu/bench/bench_tune 2>&1 | tee "$out/bench_tune.log" | tail -26
step bench_collectives
timeout 200 ./build-gpu/bench/bench_collectives --backend cuda 2>&1 | tee "$out/bench_collectives.log" | tail -26
step bench_alloc
timeout 60 ./build-gpu/bench/bench_alloc 2>&1 | tee "$out/bench_alloc.log" | tail -12
step multi_gpu_quick
OUT="$out/multi-gpu" timeout 200 bash tools/device/multi_gpu_run.sh quick >"$out/multi_gpu.log" 2>&1
echo "multi_gpu_run quick rc=$?"; tail -20 "$out/multi_gpu.log"
step memcheck
cs=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$cs" ]; then
  for suite in launch memory streams; do
    CUBE_MM_PASSTHROUGH=1 timeout 200 "$cs" --tool memcheck --report-api-errors no --error-exitcode 9 \
      ./build-gpu/tests/test_$suite >>"$out/memcheck.log" 2>&1
    echo "memcheck (conformance $suite, pass-through pool) rc=$?"
  done
  grep "ERROR SUMMARY" "$out/memcheck.log"
fi
step done
# Every log in one file: the device tool returns only a few files per call.
tar czf /tmp/all-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/all-logs.tgz "$out/all-logs.tgz"
