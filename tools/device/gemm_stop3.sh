#!/usr/bin/env bash
# Issue 31's GEMM row on one H200, one call of the device tool (about 5
# minutes; logs packed into $OUT/gemm-logs.tgz, a summary on stdout):
#   bash tools/device/gemm_stop3.sh
# 1. build (build-gpu, -j$(nproc));
# 2. ptxas's view of the warp-specialised GEMM (registers, spills, and no
#    C7508 "setmaxnreg ignored"), when nvcc is on the machine;
# 3. the dialect conformance on CUDA: warpgroup MMA in its four operand kinds
#    (bf16 B n x k, bf16 B k x n, e4m3, e5m2), setmaxnreg over three
#    warpgroups, the refusals; NVRTC's compile of gemm_ws;
# 4. the examples on CUDA: gemm_ws (all kinds at 2048, 128 tiles over 42
#    cubes, checked in full against the host) and gemm_bf16_wg — each under
#    its own timeout (a hung pipeline is killed, and the benchmarks are
#    skipped); then gemm_ws --epilogue 1 (the TMA-store epilogue) for
#    kinds 1, 0, 2, each under a timeout: if one hangs or is wrong, the
#    --ws-tma benchmark run is skipped (the others still run);
#    8192^3 is checked by sampling in bench_cuda;
# 5. bench/reduce_gemm_torch.py --bench (torch.matmul, torch._scaled_mm, then
#    bench_cuda --dialect: the gemm_ws rows next to them, then bench_cuda
#    --ws-tma in a run of its own under a timeout), or bench_cuda --dialect
#    (and --ws-tma) alone when PyTorch is missing.
set -uo pipefail
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/gemm-stop3-XXXXXX)"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
pack() { tar czf /tmp/gemm-logs.tgz -C "$out" . 2>/dev/null && mv /tmp/gemm-logs.tgz "$dest/gemm-logs.tgz"; }
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,compute_cap --format=csv,noheader |
  tee "$out/gpu.txt"
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc" ]; then
  step "ptxas: gemm_ws"
  # kind 1 and 2 with the register epilogue, kind 1 with the TMA-store one.
  for variant in 1:0 2:0 1:1; do
    kind=${variant%:*} epi=${variant#*:}
    tag="kind$kind"; [ "$epi" = 0 ] || tag="kind${kind}_epi$epi"
    src="$out/gemm_ws_$tag.cu"
    {
      printf '#define CUBE__DIM_X 384\n#define CUBE__DIM_Y 1\n#define CUBE__DIM_Z 1\n'
      printf '#define CUBE_MIN_CUBES_PER_SM 1\n#define WS_KIND %s\n#define WS_EPI %s\n' "$kind" "$epi"
      [ "$epi" = 0 ] || printf '#define WS_STAGES 3\n'
      cat include/cube/dialect.h
      # The kernel text as the examples hold it: the C string literal, unescaped.
      python3 - <<'PY'
import re
text = open("examples/kernels.h").read()
body = text[text.index("#define CUBE_EXAMPLE_GEMM_WS"):]
print("".join(bytes(s, "utf-8").decode("unicode_escape") for s in re.findall(r'^\s*"(.*)"', body, re.M)))
PY
    } >"$src"
    "$nvcc" -std=c++17 -x cu -arch=sm_90a -cubin --diag-suppress=177 -Xptxas -v "$src" \
      -o "$out/gemm_ws_$tag.cubin" >"$out/ptxas_$tag.log" 2>&1
    echo "$tag rc=$?: $(grep -E 'registers|spill|C7508|error' "$out/ptxas_$tag.log" | sort -u | tr '\n' ' ')"
  done
fi

step "conformance on CUDA"
timeout 150 ./build-gpu/tests/test_dialect_ops >"$out/dialect_ops.log" 2>&1
echo "test_dialect_ops rc=$?"
grep -E "warpgroup|setmaxnreg|FAILED|ERROR|PASSED|wg_case|on cuda" "$out/dialect_ops.log" | head -20
timeout 120 ./build-gpu/tests/test_dialect_nvrtc >"$out/dialect_nvrtc.log" 2>&1
echo "test_dialect_nvrtc rc=$?"; grep -E "ws_gemm|FAILED|PASSED" "$out/dialect_nvrtc.log" | head
pack

step "examples on CUDA"
# One kind per run: a kind that fails does not hide the others; a run that
# hangs (killed by timeout: 124/137) stops the benchmarks.
ok=1
for kind in 0 1 2 3; do
  timeout 60 ./build-gpu/examples/gemm_ws --backend cuda --kind "$kind" \
    >"$out/gemm_ws_kind$kind.log" 2>&1
  rc=$?; echo "gemm_ws --kind $kind (2048) rc=$rc"; head -8 "$out/gemm_ws_kind$kind.log"
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then ok=0; break; fi
done
# The TMA-store epilogue: its own runs, after the register epilogue's.
ws_tma=1
if [ "$ok" = 1 ]; then
  for kind in 1 0 2; do
    timeout 60 ./build-gpu/examples/gemm_ws --backend cuda --kind "$kind" --epilogue 1 \
      >"$out/gemm_ws_kind${kind}_epi1.log" 2>&1
    rc=$?; echo "gemm_ws --kind $kind --epilogue 1 (2048) rc=$rc"
    head -4 "$out/gemm_ws_kind${kind}_epi1.log"
    if [ "$rc" -ne 0 ]; then ws_tma=0; fi
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then break; fi
  done
fi
[ "$ws_tma" = 1 ] || echo "gemm_ws --epilogue 1 failed or hung: bench_cuda --ws-tma skipped"
no_ws_tma=(); [ "$ws_tma" = 1 ] || no_ws_tma=(--no-ws-tma)
timeout 60 ./build-gpu/examples/gemm_bf16_wg --backend cuda >"$out/gemm_bf16_wg.log" 2>&1
echo "gemm_bf16_wg rc=$?"; tail -2 "$out/gemm_bf16_wg.log"
pack

if [ "$ok" = 1 ]; then
  step "reduce_gemm_torch.py --bench"
  if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    PYTHONUNBUFFERED=1 timeout 380 python3 bench/reduce_gemm_torch.py \
      --bench build-gpu/bench/bench_cuda ${no_ws_tma[@]+"${no_ws_tma[@]}"} >"$out/reduce_gemm_torch.log" 2>&1
    echo "reduce_gemm_torch rc=$?"
    grep -E "torch|gemm_ws|GEMM|WGMMA|ws-tma" "$out/reduce_gemm_torch.log" | head -60
  else
    echo "no PyTorch with CUDA: bench_cuda --dialect alone"
    timeout 200 ./build-gpu/bench/bench_cuda --dialect >"$out/bench_cuda_dialect.log" 2>&1
    echo "bench_cuda --dialect rc=$?"; grep -E "gemm|RESULT" "$out/bench_cuda_dialect.log" | head -30
    if [ "$ws_tma" = 1 ]; then
      timeout 150 ./build-gpu/bench/bench_cuda --ws-tma >"$out/bench_cuda_ws_tma.log" 2>&1
      echo "bench_cuda --ws-tma rc=$?"; grep -E "gemm_ws|RESULT" "$out/bench_cuda_ws_tma.log" | head
    fi
  fi
else
  echo "gemm_ws hung on CUDA: benchmarks skipped (logs in gemm-logs.tgz)"
fi
step finished
pack
