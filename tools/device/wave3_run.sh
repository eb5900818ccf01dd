#!/usr/bin/env bash
# Wave 3 on one H200, in two calls of the device tool (each under its
# 10-minute limit; the build in build-gpu is kept while the machine stays
# warm, and rebuilt when it is not):
#   bash tools/device/wave3_run.sh check   the whole suite (CUDA groups
#        included), the tensor-map sweep against the hardware (issue 34),
#        interop with the program's CUDA memory, streams and PyTorch
#        (issue 30), bundles with NVRTC unavailable (issue 32), cubec info
#        --json, a CUDA trace and the documentation's programs on CUDA
#        (issue 33), compute-sanitizer memcheck on the interop test
#   bash tools/device/wave3_run.sh bench   every figure the issues name,
#        each beside its baseline in the same process (issue 31): launch and
#        graph ratios against the raw driver, TMA and GEMM against cuMemcpy
#        and PyTorch, collectives against NCCL, first launch from a bundle,
#        interop costs, allocation
#   bash tools/device/wave3_run.sh verify   after fixes: the CUDA and touched
#        tests, the sweep, the bundle checks (a few minutes)
#   bash tools/device/wave3_run.sh final    the whole suite and issue 29's
#        last rows with their CUDA groups (tools/device/issue29_rest_gpu.sh)
#   bash tools/device/wave3_run.sh figures  issue 31's figures within one
#        call's 10 minutes (launch_bench 3+3 runs, bench_cuda, GEMM vs torch,
#        graph, bundle, interop, collectives)
#   bash tools/device/wave3_run.sh launch   issue 31's launch and graph
#        replay ratios over several runs each, with their medians and ranges
#        and the launch path's breakdown (tools/device/launch_bench.sh)
# Logs under $OUT (or build-gpu/logs); every log is also packed into
# $OUT/all-logs.tgz (the tool returns a few files per call).
set -uo pipefail
# The logs go to a scratch folder; only their archive lands in $OUT (the
# device tool returns at most 8 files from it).
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/wave3-logs-XXXXXX)"
phase="${1:-check}"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,compute_cap --format=csv |
  tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
pack() {
  step done
  tar czf /tmp/all-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/all-logs.tgz "$dest/all-logs.tgz"
}

if [ "$phase" = check ]; then
  step ctest
  timeout 290 ctest --test-dir build-gpu -j8 --output-on-failure --timeout 250 >"$out/ctest.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Not Run|Timeout" "$out/ctest.log" | head -40
  grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest.log" | head -80
  echo "skipped:"; grep -E "\(Skipped\)" "$out/ctest.log" | head -30
  step tma-sweep
  timeout 100 ./build-gpu/tests/tma_sweep >"$out/tma_sweep.log" 2>&1
  echo "tma_sweep rc=$?"
  grep -E "^tma_sweep:" "$out/tma_sweep.log"
  grep -E "MISMATCH" "$out/tma_sweep.log" | head -20
  step interop
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout 60 python3 examples/interop_torch.py build-gpu/libcubec.so >"$out/interop_torch.log" 2>&1
    echo "interop_torch rc=$?"; tail -6 "$out/interop_torch.log"
  else
    echo "interop_torch: no PyTorch with CUDA"
  fi
  cs="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
  if [ -n "$cs" ]; then
    timeout 60 "$cs" --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_interop \
      >"$out/memcheck_interop.log" 2>&1
    echo "memcheck test_cuda_interop rc=$?"; grep "ERROR SUMMARY" "$out/memcheck_interop.log"
    timeout 40 "$cs" --tool memcheck --error-exitcode 3 build-gpu/examples/interop_import \
      >"$out/memcheck_import.log" 2>&1
    echo "memcheck interop_import rc=$?"; grep "ERROR SUMMARY" "$out/memcheck_import.log"
  fi
  step bundles
  OUT="$out" timeout 120 bash tools/device/bundle_check.sh nobench 2>&1 | tail -25
  step issue33
  BUILD=build-gpu OUT="$out" timeout 90 bash tools/device/issue33_gpu.sh 2>&1 | tail -12
  pack
  exit 0
fi

if [ "$phase" = verify ]; then
  # After the check run's findings were fixed and the later merges: the
  # whole suite again (CUDA groups included), the sweep, the bundles.
  step ctest-cuda
  timeout 270 ctest --test-dir build-gpu -j12 --output-on-failure --timeout 220 \
    >"$out/ctest_verify.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Not Run|Timeout" "$out/ctest_verify.log" | head -40
  grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest_verify.log" | head -60
  step tma-sweep
  timeout 100 ./build-gpu/tests/tma_sweep >"$out/tma_sweep.log" 2>&1
  echo "tma_sweep rc=$?"
  grep -E "^tma_sweep:" "$out/tma_sweep.log"
  grep -E "MISMATCH" "$out/tma_sweep.log" | head -10
  step bundles
  OUT="$out" timeout 100 bash tools/device/bundle_check.sh nobench 2>&1 | grep -E "ok:|FAILED|bundle_check"
  pack
  exit 0
fi

if [ "$phase" = final ]; then
  # The tree as it is closed: the whole suite, then issue 29's last rows with
  # their CUDA groups required to run (tools/device/issue29_rest_gpu.sh).
  step ctest
  timeout 250 ctest --test-dir build-gpu -j12 --output-on-failure --timeout 200 \
    >"$out/ctest_final.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Not Run|Timeout" "$out/ctest_final.log" | head -30
  grep -B2 -A14 -E "FAILED  \]|ERROR   \]|^FAIL" "$out/ctest_final.log" | head -60
  pack
  step issue29-rest
  BUILD=build-gpu OUT="$out" timeout 120 bash tools/device/issue29_rest_gpu.sh 2>&1 | tail -30
  pack
  exit 0
fi

if [ "$phase" = figures ]; then
  # Issue 31's figures in one call: each step packs what it wrote so far.
  step launch_bench
  BUILD=build-gpu OUT="$out" timeout 170 bash tools/device/launch_bench.sh 3 3 2>&1 | tail -24
  pack
  step bench_cuda
  timeout 150 ./build-gpu/bench/bench_cuda >"$out/bench_cuda.log" 2>&1; echo "bench_cuda rc=$?"
  tail -40 "$out/bench_cuda.log"
  pack
  step reduce_gemm_torch
  PYTHONUNBUFFERED=1 timeout 110 python3 bench/reduce_gemm_torch.py --bench build-gpu/bench/bench_cuda \
    >"$out/reduce_gemm_torch.log" 2>&1; echo "reduce_gemm_torch rc=$?"
  tail -12 "$out/reduce_gemm_torch.log"
  pack
  step graph_torch
  PYTHONUNBUFFERED=1 timeout 30 python3 bench/graph_torch.py >"$out/graph_torch.log" 2>&1
  tail -4 "$out/graph_torch.log"
  step bench_bundle
  timeout 30 ./build-gpu/bench/bench_bundle --cuda --runs 5 >"$out/bench_bundle.log" 2>&1
  tail -8 "$out/bench_bundle.log"
  step bench_interop
  timeout 25 ./build-gpu/bench/bench_interop --cuda >"$out/bench_interop.log" 2>&1
  tail -10 "$out/bench_interop.log"
  step bench_collectives
  timeout 40 ./build-gpu/bench/bench_collectives --backend cuda >"$out/bench_collectives.log" 2>&1
  tail -16 "$out/bench_collectives.log"
  pack
  exit 0
fi

if [ "$phase" = launch ]; then
  step launch_bench
  BUILD=build-gpu OUT="$out" timeout 500 bash tools/device/launch_bench.sh 5 3 2>&1 | tail -30
  pack
  exit 0
fi

# bench
step bench_cuda
timeout 200 ./build-gpu/bench/bench_cuda >"$out/bench_cuda.log" 2>&1; echo "bench_cuda rc=$?"
tail -45 "$out/bench_cuda.log"
step reduce_gemm_torch
PYTHONUNBUFFERED=1 timeout 150 python3 bench/reduce_gemm_torch.py --bench build-gpu/bench/bench_cuda \
  >"$out/reduce_gemm_torch.log" 2>&1; echo "reduce_gemm_torch rc=$?"
tail -12 "$out/reduce_gemm_torch.log"
step graph
PYTHONUNBUFFERED=1 timeout 60 python3 bench/graph_torch.py >"$out/graph_torch.log" 2>&1
tail -4 "$out/graph_torch.log"
timeout 60 ./build-gpu/bench/bench_graph >"$out/bench_graph.log" 2>&1; tail -14 "$out/bench_graph.log"
step bench_bundle
timeout 60 ./build-gpu/bench/bench_bundle --cuda --runs 7 >"$out/bench_bundle.log" 2>&1
tail -8 "$out/bench_bundle.log"
step bench_interop
timeout 40 ./build-gpu/bench/bench_interop --cuda >"$out/bench_interop.log" 2>&1
tail -10 "$out/bench_interop.log"
step bench_collectives
timeout 60 ./build-gpu/bench/bench_collectives --backend cuda >"$out/bench_collectives.log" 2>&1
tail -16 "$out/bench_collectives.log"
pack
