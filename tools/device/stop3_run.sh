#!/usr/bin/env bash
# Issue 31 on one H200, third stop (each phase one call of the device tool,
# under its 10-minute limit; logs packed into $OUT/all-logs.tgz):
#   bash tools/device/stop3_run.sh probe    where the launch and graph gaps go
#        (bench_cuda --launch-tma with the in-situ breakdown and the TMA copy
#        forms; bench_graph with the padded raw kernel), the pipelined TMA
#        conformance test on CUDA
#   bash tools/device/stop3_run.sh call2    the GEMM (tools/device/gemm_stop3.sh), the
#        CUDA/conformance/collective tests, launch, TMA, graph and NCCL figures
#   bash tools/device/stop3_run.sh final    every test with a CUDA group, then graph,
#        MPI all_reduce at 2/4/8 ranks, GEMM vs torch and launch while time is left
#   bash tools/device/stop3_run.sh repeat   bench_graph x3, bench_cuda --launch x2
#   bash tools/device/stop3_run.sh probe2   bench_graph --code-probe (which feature
#        of cubec's small kernel costs the graph replay)
set -uo pipefail
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/stop3-logs-XXXXXX)"
phase="${1:-probe}"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
pack() {
  step packed
  tar czf /tmp/all-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/all-logs.tgz "$dest/all-logs.tgz"
}
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,compute_cap --format=csv,noheader |
  tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

if [ "$phase" = probe ]; then
  step dialect_ops
  timeout 120 ./build-gpu/tests/test_dialect_ops >"$out/dialect_ops.log" 2>&1
  echo "test_dialect_ops rc=$?"; grep -E "pipelined|PASSED|FAILED|ERROR" "$out/dialect_ops.log" | head
  for i in 1 2; do
    step "bench_cuda --launch-tma $i"
    timeout 150 ./build-gpu/bench/bench_cuda --launch-tma >"$out/launch_tma.run$i.log" 2>&1
    echo "rc=$?"; grep -E "launch|breakdown|TMA" "$out/launch_tma.run$i.log" | head -30
    pack
  done
  for i in 1 2; do
    step "bench_graph $i"
    timeout 90 ./build-gpu/bench/bench_graph >"$out/graph.run$i.log" 2>&1
    echo "rc=$?"; grep -E "graph|ratio|padded|entry|eager" "$out/graph.run$i.log" | head -12
  done
  pack
  exit 0
fi

if [ "$phase" = call2 ]; then
  # Within one call's 10 minutes: each step runs while time is left.
  left() { [ $((SECONDS - started)) -lt "$1" ]; }
  step gemm
  OUT="$out" timeout 300 bash tools/device/gemm_stop3.sh 2>&1 | grep -vE "^\s*$" | tail -40
  pack
  if left 400; then
    step "cuda and conformance tests"
    timeout 150 ctest --test-dir build-gpu -j12 --timeout 140 -L "cuda|conformance|coll" \
      >"$out/ctest_cuda.log" 2>&1
    grep -E "tests passed|\*\*\*|Failed|Timeout" "$out/ctest_cuda.log" | head -20
    pack
  fi
  if left 450; then
    step "bench_cuda --launch-tma"
    timeout 70 ./build-gpu/bench/bench_cuda --launch-tma >"$out/launch_tma.log" 2>&1
    grep -E "launch|breakdown|TMA" "$out/launch_tma.log" | head -20
    timeout 25 ./build-gpu/bench/bench_graph --quick >"$out/graph.log" 2>&1
    grep -E "ratio|padded|entry|replay" "$out/graph.log" | head -8
    pack
  fi
  for i in 1 2; do
    if left 520; then
      step "bench_collectives $i"
      timeout 40 ./build-gpu/bench/bench_collectives --backend cuda --ranks 1 --max 268435456 \
        >"$out/bench_collectives.run$i.log" 2>&1
      grep -E "^(all_reduce|all_gather|reduce_scatter) |^host time" "$out/bench_collectives.run$i.log" | head -40
      pack
    fi
  done
  exit 0
fi

if [ "$phase" = final ]; then
  # The tree as closed, within one call: every test with a CUDA group (the
  # CPU-only rest runs in CI), then the figures while time is left.
  left() { [ $((SECONDS - started)) -lt "$1" ]; }
  step "ctest (cuda, conformance, coll, examples, failure, interop, tune)"
  timeout 200 ctest --test-dir build-gpu -j16 --output-on-failure --timeout 190 \
    -L "cuda|conformance|coll|examples|failure|interop|tune" >"$out/ctest_final.log" 2>&1
  grep -E "tests passed|\*\*\*|Failed|Not Run|Timeout" "$out/ctest_final.log" | head -30
  grep -B2 -A14 -E "FAILED  \]|ERROR   \]|^FAIL" "$out/ctest_final.log" | head -40
  pack
  if left 400; then
    step "graph"
    timeout 25 ./build-gpu/bench/bench_graph --quick >"$out/graph.log" 2>&1
    grep -E "ratio|padded|entry|replay" "$out/graph.log" | head -8
    pack
  fi
  # MPI all_reduce on the host's cores, 8 B .. 32 KiB, one run per rank count.
  if command -v mpirun >/dev/null; then
    for np in 2 4 8; do
      if left 380; then
        step "mpi all_reduce, $np ranks"
        timeout 20 mpirun --allow-run-as-root --oversubscribe -np "$np" \
          ./build-gpu/bench/bench_collectives --mpi --max 32768 >"$out/mpi_$np.log" 2>&1
        echo "rc=$?"; grep -E "all_reduce|over raw|per call" "$out/mpi_$np.log" | head -12
        pack
      fi
    done
  fi
  if left 420; then
    step "GEMM vs torch"
    PYTHONUNBUFFERED=1 timeout $((570 - (SECONDS - started))) python3 bench/reduce_gemm_torch.py \
      --bench build-gpu/bench/bench_cuda >"$out/reduce_gemm_torch.log" 2>&1
    echo "rc=$?"; grep -E "TFLOP|GEMM|RESULT gemm|epilogue" "$out/reduce_gemm_torch.log" | tail -24
    pack
  fi
  if left 540; then
    step "launch"
    timeout 25 ./build-gpu/bench/bench_cuda --launch --quick >"$out/launch.log" 2>&1
    grep -E "launch|breakdown" "$out/launch.log" | head -8
    pack
  fi
  exit 0
fi
if [ "$phase" = probe2 ]; then
  # Which feature of cubec's small kernel costs the graph replay.
  step "bench_graph --code-probe"
  timeout 60 ./build-gpu/bench/bench_graph --code-probe >"$out/code_probe.log" 2>&1
  echo "rc=$?"; grep -E "probe|raw|grid|context|both" "$out/code_probe.log" | head -8
  step "bench_graph"
  timeout 45 ./build-gpu/bench/bench_graph >"$out/graph.log" 2>&1
  grep -E "ratio|padded|entry|replay" "$out/graph.log" | head -6
  pack
  exit 0
fi
if [ "$phase" = repeat ]; then
  # Medians over runs: bench_graph x3 and bench_cuda --launch x2.
  for i in 1 2 3; do
    step "bench_graph $i"
    timeout 45 ./build-gpu/bench/bench_graph >"$out/graph.run$i.log" 2>&1
    grep -E "ratio|padded|entry|replay" "$out/graph.run$i.log" | head -6
    pack
  done
  for i in 1 2; do
    step "bench_cuda --launch $i"
    timeout 60 ./build-gpu/bench/bench_cuda --launch >"$out/launch.run$i.log" 2>&1
    grep -E "launch|breakdown" "$out/launch.run$i.log" | head -6
    pack
  done
  exit 0
fi
echo "unknown phase $phase"; exit 2
