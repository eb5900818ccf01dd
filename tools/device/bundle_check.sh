#!/usr/bin/env bash
# Bundles on the GPU machine (issue 32), what the CPU-only CI cannot show:
#   1. the demo recorded on CUDA, bundled as the device's cubin plus PTX, and
#      run again with NVRTC unavailable (CUBE_NVRTC_PATH=none) from a fresh
#      kernel cache: every kernel a bundle hit, none compiled;
#   2. a bundle holding only PTX for an older architecture (cuda-ptx-sm_80):
#      no cubin matches the device, the driver JIT-compiles the PTX entry;
#   3. a bundle of another architecture's cubin only (cuda-sm_80 on an sm_90
#      device: not loadable there) with NVRTC unavailable: the launch is
#      refused naming the targets held and taken;
#   4. bench_bundle --cuda (first launch: cold NVRTC vs warm disk cache vs
#      bundle without NVRTC) and the CPU figures beside it.
# Run from the repository root on the GPU machine (reuses build-gpu when
# gpu_run.sh made it):
#   bash tools/device/bundle_check.sh [nobench]   (nobench: checks 1-3 only)
# Logs under $OUT (or build-gpu/logs/bundle). Exit status 1 if a check failed.
set -uo pipefail
out="${OUT:-build-gpu/logs}/bundle"
mkdir -p "$out"
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" --target cubec_cli bench_bundle test_bundle) \
  >"$out/build.log" 2>&1 || { tail -30 "$out/build.log"; exit 1; }
cubec="$PWD/build-gpu/cubec"
work="$(mktemp -d /tmp/cubec-bundle-check-XXXXXX)"
failed=0
check() { if "$@"; then echo "  ok: $desc"; else echo "  FAILED: $desc"; failed=1; fi; }
cc_major_minor="$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d ' .')"
own="cuda-sm_${cc_major_minor}"
echo "device target: $own"

echo "==== 1. the demo from a bundle, NVRTC unavailable"
CUBE_BACKEND=cuda CUBE_TUNE=test CUBE_CACHE_DIR="$work/record" CUBE_BUNDLE_RECORD="$work/demo.manifest" \
  "$cubec" demo >"$out/record.log" 2>&1
echo "  recorded $(grep -c '^kernel ' "$work/demo.manifest") kernel builds"
"$cubec" bundle build "$work/demo.manifest" --targets "$own,cuda-ptx-sm_80" \
  --out "$work/cuda.cubebundle" >"$out/build-bundle.log" 2>&1 || cat "$out/build-bundle.log"
"$cubec" bundle list "$work/cuda.cubebundle" --verbose >"$out/list.log" 2>&1
CUBE_BACKEND=cuda CUBE_TUNE=test CUBE_NVRTC_PATH=none CUBE_CACHE_DIR="$work/run1" \
  CUBE_BUNDLE="$work/cuda.cubebundle" CUBE_LOG=debug "$cubec" demo >"$out/demo-bundle.log" 2>&1
rc=$?
tail -3 "$out/demo-bundle.log"
desc="demo exits 0 with NVRTC unavailable (rc=$rc)"; check test "$rc" = 0
desc="kernels taken from the bundle's cubin ($own)"; check grep -q "bundle hit.*target $own" "$out/demo-bundle.log"
compiled="$(grep -E "kernel '[^']+': compiled in" "$out/demo-bundle.log" | grep -vc broken_fill)"
desc="nothing compiled ($compiled)"; check test "$compiled" = 0
desc="no kernel file written"; check test -z "$(find "$work/run1" -name '*.ck' 2>/dev/null)"

echo "==== 2. PTX only: no cubin matches, the PTX entry loads"
"$cubec" bundle build "$work/demo.manifest" --targets cuda-ptx-sm_80 \
  --out "$work/ptx.cubebundle" >"$out/build-ptx.log" 2>&1
rc=$?
desc="PTX bundle built (rc=$rc; a kernel naming its own arch cannot be PTX: see the log)"
check test "$rc" = 0
CUBE_BACKEND=cuda CUBE_TUNE=test CUBE_NVRTC_PATH=none CUBE_CACHE_DIR="$work/run2" \
  CUBE_BUNDLE="$work/ptx.cubebundle" CUBE_LOG=debug "$cubec" demo >"$out/demo-ptx.log" 2>&1
rc=$?
tail -3 "$out/demo-ptx.log"
desc="demo from PTX exits 0 (rc=$rc)"; check test "$rc" = 0
desc="kernels taken from the PTX entry"; check grep -q "bundle hit.*target cuda-ptx-sm_80" "$out/demo-ptx.log"

echo "==== 3. another architecture's cubin only, NVRTC unavailable: refused with the targets"
other="cuda-sm_80"; [ "$own" = cuda-sm_80 ] && other="cuda-sm_75"
"$cubec" bundle build "$work/demo.manifest" --targets "$other" \
  --out "$work/other.cubebundle" >>"$out/build-bundle.log" 2>&1
CUBE_BACKEND=cuda CUBE_TUNE=test CUBE_NVRTC_PATH=none CUBE_CACHE_DIR="$work/run3" \
  CUBE_BUNDLE="$work/other.cubebundle" "$cubec" demo >"$out/demo-other.log" 2>&1
desc="refusal names the held target ($other) and the device's ($own)"
check grep -q "the bundles hold it for: $other.*this device takes: $own" "$out/demo-other.log"
desc="refusal says NVRTC is off"; check grep -q "CUBE_NVRTC_PATH=none" "$out/demo-other.log"

if [ "${1:-}" != nobench ]; then
echo "==== 4. figures"
./build-gpu/bench/bench_bundle --cuda --runs 7 2>&1 | tee "$out/bench-cuda.txt" | tail -8
./build-gpu/bench/bench_bundle --runs 7 2>&1 | tee "$out/bench-cpu.txt" | tail -9
fi
./build-gpu/tests/test_bundle >"$out/test_bundle.log" 2>&1
rc=$?
desc="test_bundle (CPU) passes on this machine (rc=$rc)"; check test "$rc" = 0
rm -rf "$work"
echo "bundle_check: $([ $failed = 0 ] && echo 'every check passed' || echo 'a check FAILED'); logs in $out"
exit $failed
