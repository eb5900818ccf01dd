#!/usr/bin/env bash
# Issue 31's GEMM row, fourth stop: thread-block clusters and TMA multicast on
# one H200, one short call of the device tool (about 4 minutes; logs packed
# into $OUT/gemm4-logs.tgz, a summary on stdout):
#   bash tools/device/gemm_stop4.sh
# 1. build only what it runs (build-gpu: test_dialect_ops, gemm_ws, bench_cuda);
# 2. the clusters conformance case on CUDA (CTH_TEST_FILTER=test_clusters:
#    cuLaunchKernelEx with a 2x1x1 cluster, TMA multicast into both cubes,
#    remote mbarrier arrivals, a peer's shared memory after a cluster barrier,
#    a grid the cluster does not tile refused) -- their first run on a GPU;
# 3. gemm_ws at 2048^3, checked in full against the host: --cluster 2 for
#    kind 1 (bf16 A @ B) with both epilogues, kinds 0 and 2; --pingpong 1 for
#    kind 1 with both epilogues, and with --cluster 2; each under a timeout
#    (a hung pipeline is killed and the benchmark skipped);
# 4. bench/reduce_gemm_torch.py --ws-cluster: torch.matmul 8192^3, then
#    bench_cuda --ws-cluster (the current best, one cube alone, cooperative:
#    128x256x64, 3 stages, group 16, register epilogue; then clusters of two
#    at 3/4 stages, groups 16/8, and the TMA-store epilogue; then ping-pong,
#    64x256x64 per warpgroup, 4/5 stages, groups 16/32, alone and in
#    clusters), each against torch.matmul; bench_cuda --ws-cluster alone
#    without PyTorch.
set -uo pipefail
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/gemm-stop4-XXXXXX)"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
pack() { tar czf /tmp/gemm4-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/gemm4-logs.tgz "$dest/gemm4-logs.tgz"; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,compute_cap --format=csv,noheader |
  tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF &&
  cmake --build build-gpu -j"$(nproc)" --target test_dialect_ops example_gemm_ws bench_cuda) \
  >"$out/build.log" 2>&1 || { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

step "clusters conformance on CUDA"
CTH_TEST_FILTER=test_clusters timeout 60 ./build-gpu/tests/test_dialect_ops \
  >"$out/dialect_clusters.log" 2>&1
echo "test_dialect_ops (test_clusters) rc=$?"
grep -E "clusters|FAILED|ERROR|PASSED|caused|trapped" "$out/dialect_clusters.log" | head -20
pack

step "gemm_ws clusters and ping-pong on CUDA (2048^3, checked in full)"
ok=1
# kind:epilogue:cluster:pingpong
for variant in 1:0:2:0 1:1:2:0 0:0:2:0 2:0:2:0 1:0:1:1 1:1:1:1 1:0:2:1; do
  IFS=: read -r kind epi cluster pp <<<"$variant"
  log="$out/gemm_ws_kind${kind}_epi${epi}_cluster${cluster}_pp$pp.log"
  timeout 45 ./build-gpu/examples/gemm_ws --backend cuda --kind "$kind" --epilogue "$epi" \
    --cluster "$cluster" --pingpong "$pp" >"$log" 2>&1
  rc=$?; echo "gemm_ws --kind $kind --epilogue $epi --cluster $cluster --pingpong $pp rc=$rc"
  head -6 "$log"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then ok=0; break; fi
done
pack

if [ "$ok" = 1 ]; then
  step "reduce_gemm_torch.py --ws-cluster (8192^3)"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 200 python3 bench/reduce_gemm_torch.py \
      --bench build-gpu/bench/bench_cuda --ws-cluster >"$out/reduce_gemm_torch.log" 2>&1
    echo "reduce_gemm_torch --ws-cluster rc=$?"
    grep -E "torch|gemm_ws|GEMM|figure|killed|wrong" "$out/reduce_gemm_torch.log" | head -30
  else
    echo "no PyTorch with CUDA: bench_cuda --ws-cluster alone"
    timeout 150 ./build-gpu/bench/bench_cuda --ws-cluster >"$out/bench_cuda_ws_cluster.log" 2>&1
    echo "bench_cuda --ws-cluster rc=$?"; grep -E "gemm_ws|RESULT" "$out/bench_cuda_ws_cluster.log"
  fi
else
  echo "gemm_ws hung on CUDA: benchmark skipped (logs in gemm4-logs.tgz)"
fi
step finished
pack
