#!/usr/bin/env bash
# Interop on the H200 (docs/interop.md): build; the CUDA interop test, the
# CPU interop and NVTX tests; the C example importing a cuMemAlloc buffer and
# a CUstream; the PyTorch DLPack example (when torch is importable);
# bench_interop on CUDA and CPU; compute-sanitizer memcheck and racecheck on
# the CUDA interop test and memcheck on the example; and, when nsys is
# present, the example under Nsight Systems with its NVTX ranges listed.
# Logs under $OUT (or build-gpu/logs/interop). From the repository root:
#   bash tools/device/interop_run.sh
set -uo pipefail
out="${OUT:-build-gpu/logs}/interop"
mkdir -p "$out"
fail=0
step() { printf '\n==== %s\n' "$1"; }
run() {  # run NAME COMMAND...: logs to $out/NAME.log, prints its tail, counts failures
  local name="$1"
  shift
  "$@" >"$out/$name.log" 2>&1
  local rc=$?
  tail -n 12 "$out/$name.log"
  echo "[$name] exit $rc"
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then fail=$((fail + 1)); fi
  if [ "$rc" -eq 77 ]; then echo "[$name] SKIPPED (no GPU seen?)"; fail=$((fail + 1)); fi
}
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
step build
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
step tests
run test_cuda_interop build-gpu/tests/test_cuda_interop
run test_interop build-gpu/tests/test_interop
run test_nvtx build-gpu/tests/test_nvtx
run test_nvtx_no_tool build-gpu/tests/test_nvtx --no-tool
step examples
run interop_import build-gpu/examples/interop_import
run interop_dlpack_cpu build-gpu/examples/interop_dlpack_cpu
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
  run interop_torch python3 examples/interop_torch.py build-gpu/libcubec.so
else
  echo "interop_torch: no PyTorch with CUDA here: not run"
fi
step bench
run bench_interop_cuda build-gpu/bench/bench_interop --cuda
run bench_interop_cpu build-gpu/bench/bench_interop
step compute-sanitizer
cs="$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)"
if [ -n "$cs" ]; then
  run memcheck_test "$cs" --tool memcheck --error-exitcode 3 build-gpu/tests/test_cuda_interop
  run racecheck_test "$cs" --tool racecheck --error-exitcode 3 build-gpu/tests/test_cuda_interop
  run memcheck_example "$cs" --tool memcheck --error-exitcode 3 build-gpu/examples/interop_import
else
  echo "compute-sanitizer not found: not run"
  fail=$((fail + 1))
fi
step nsys
if command -v nsys >/dev/null; then
  run nsys_profile nsys profile -t nvtx,cuda -o "$out/interop_import" --force-overwrite true \
    build-gpu/examples/interop_import
  run nsys_stats nsys stats -r nvtx_sum "$out/interop_import.nsys-rep"
  grep -q import_double "$out/nsys_stats.log" && echo "nsys: cubec's kernel range is there" ||
    { echo "nsys: no import_double range"; fail=$((fail + 1)); }
else
  echo "nsys not found: the NVTX ranges are checked by test_nvtx's own tool only"
fi
echo
echo "interop_run: $fail failure(s); logs in $out"
exit $((fail > 0))
