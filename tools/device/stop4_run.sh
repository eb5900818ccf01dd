#!/usr/bin/env bash
# Issue 31 on one H200, fourth stop: each phase one call of the device tool
# (under its 10-minute limit), logs under $OUT/<phase>/:
#   bash tools/device/stop4_run.sh gemm-coll   tools/device/gemm_stop4.sh (clusters,
#        ping-pong: conformance on CUDA, 2048^3 checks, 8192^3 vs torch.matmul), then
#        tools/device/coll_stop4.sh (CUDA/MPI collective tests, NCCL one rank x3,
#        MPI 2/4/8 ranks x3)
#   bash tools/device/stop4_run.sh final       every test with a CUDA group, then
#        bench_graph x3, bench_cuda --launch x3, tools/device/kernels_stop5.sh's TMA
#        steps while time is left, bench_cuda --ws-cluster (clusters over fewer cubes)
#   bash tools/device/stop4_run.sh confirm     the TMA headline x3, GEMM vs torch x2, launch x2
#   bash tools/device/stop4_run.sh maps        the two-map launch row x3, launch x3
#   bash tools/device/stop4_run.sh recheck     CUDA and conformance tests, launch x2
# (Earlier calls this stop: tools/device/kernels_stop4.sh alone; a trial merge.)
set -uo pipefail
phase="${1:-final}"
dest="${OUT:-build-gpu/logs}/$phase"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
left() { [ $((SECONDS - started)) -lt "$1" ]; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,compute_cap --format=csv,noheader |
  tee "$dest/gpu.txt"
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

if [ "$phase" = gemm-coll ]; then
  step gemm_stop4
  OUT="$dest/gemm" timeout 290 bash tools/device/gemm_stop4.sh 2>&1 | grep -vE "^\s*$" | tail -60
  if left 330; then
    step coll_stop4
    OUT="$dest/coll" timeout $((580 - (SECONDS - started))) bash tools/device/coll_stop4.sh 2>&1 |
      grep -vE "^\s*$" | tail -70
  fi
  step done
  exit 0
fi

if [ "$phase" = final ]; then
  step "build all"
  (cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" -- -k) >"$dest/build.log" 2>&1 ||
    grep -E 'error|Error' "$dest/build.log" | head -30
  step "ctest (cuda, conformance, coll, examples, failure, interop, tune)"
  timeout 260 ctest --test-dir build-gpu -j16 --output-on-failure --timeout 250 \
    -L "cuda|conformance|coll|examples|failure|interop|tune" >"$dest/ctest.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Not Run|Timeout" "$dest/ctest.log" | head -30
  for i in 1 2 3; do
    if left 430; then
      step "bench_graph $i"
      timeout 30 ./build-gpu/bench/bench_graph --quick >"$dest/graph.run$i.log" 2>&1
      grep -E "ratio|padded|entry|replay" "$dest/graph.run$i.log" | head -6
    fi
  done
  for i in 1 2 3; do
    if left 480; then
      step "bench_cuda --launch $i"
      timeout 30 ./build-gpu/bench/bench_cuda --launch --quick >"$dest/launch.run$i.log" 2>&1
      grep -E "launch|breakdown" "$dest/launch.run$i.log" | head -8
    fi
  done
  for i in 1 2 3; do
    if left 540; then
      step "bench_cuda --tma $i"
      timeout 40 ./build-gpu/bench/bench_cuda --tma >"$dest/tma.run$i.log" 2>&1
      grep -E "TMA" "$dest/tma.run$i.log" | tail -4
    fi
  done
  if left 520; then
    step "bench_cuda --ws-cluster (8192^3; torch.matmul 766 TFLOP/s in the gemm-coll call)"
    timeout $((590 - (SECONDS - started))) ./build-gpu/bench/bench_cuda --ws-cluster \
      >"$dest/ws_cluster.log" 2>&1
    grep -E "gemm_ws" "$dest/ws_cluster.log" | tail -20
  fi
  step done
  exit 0
fi
if [ "$phase" = confirm ]; then
  # After the final call: the TMA headline row (now the one-tile-per-cube
  # form) x3, the GEMM against torch.matmul in one process x2, launch x2.
  step build
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null 2>&1
  cmake --build build-gpu -j"$(nproc)" --target bench_cuda >"$dest/build.log" 2>&1 ||
    grep -E 'error|Error' "$dest/build.log" | head -30
  for i in 1 2 3; do
    step "bench_cuda --tma $i"
    timeout 40 ./build-gpu/bench/bench_cuda --tma >"$dest/tma.run$i.log" 2>&1
    grep -E "TMA" "$dest/tma.run$i.log" | tail -3
  done
  for i in 1 2; do
    if left 420; then
      step "reduce_gemm_torch.py --ws-cluster $i"
      PYTHONUNBUFFERED=1 timeout 150 python3 bench/reduce_gemm_torch.py \
        --bench build-gpu/bench/bench_cuda --ws-cluster >"$dest/gemm_torch.run$i.log" 2>&1
      grep -E "torch.matmul|one cube|ping-pong vs|clusters of 2 vs" "$dest/gemm_torch.run$i.log" | head -8
    fi
  done
  for i in 4 5; do
    if left 560; then
      step "bench_cuda --launch $i"
      timeout 30 ./build-gpu/bench/bench_cuda --launch --quick >"$dest/launch.run$i.log" 2>&1
      grep -E "launch|breakdown" "$dest/launch.run$i.log" | head -8
    fi
  done
  step done
  exit 0
fi
if [ "$phase" = maps ]; then
  # launch.c back at -O2 and its general path not cold: the two-map launch
  # row (bench_cuda --tma) x3 and the launch rows x3.
  step build
  cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null 2>&1
  cmake --build build-gpu -j"$(nproc)" --target bench_cuda >"$dest/build.log" 2>&1 ||
    grep -E 'error|Error' "$dest/build.log" | head -30
  for i in 1 2 3; do
    step "bench_cuda --tma $i"
    timeout 40 ./build-gpu/bench/bench_cuda --tma >"$dest/tma.run$i.log" 2>&1
    grep -E "ratio|two maps|two pointers" "$dest/tma.run$i.log" | tail -4
  done
  for i in 1 2 3; do
    step "bench_cuda --launch $i"
    timeout 30 ./build-gpu/bench/bench_cuda --launch --quick >"$dest/launch.run$i.log" 2>&1
    grep -E "launch|breakdown" "$dest/launch.run$i.log" | head -8
  done
  step done
  exit 0
fi
if [ "$phase" = recheck ]; then
  # The last core change (the straight path on launch_plan.h's helpers):
  # the CUDA and conformance tests, then the launch rows x2.
  step build
  (cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
    cmake --build build-gpu -j"$(nproc)" -- -k) >"$dest/build.log" 2>&1 ||
    grep -E 'error|Error' "$dest/build.log" | head -30
  step "ctest (cuda, conformance)"
  timeout 300 ctest --test-dir build-gpu -j16 --output-on-failure --timeout 280 \
    -L "cuda|conformance" >"$dest/ctest.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Timeout" "$dest/ctest.log" | head -20
  for i in 1 2; do
    if left 540; then
      step "bench_cuda --launch $i"
      timeout 30 ./build-gpu/bench/bench_cuda --launch --quick >"$dest/launch.run$i.log" 2>&1
      grep -E "launch|breakdown" "$dest/launch.run$i.log" | head -8
    fi
  done
  step done
  exit 0
fi
echo "unknown phase $phase"; exit 2
