#!/usr/bin/env bash
# Compiles every dialect conformance kernel and the examples' kernels with nvcc
# (the prelude included, as the CUDA backend builds them, -std=c++17) for
# sm_80 and sm_90a, and prints ptxas's register and spill report for the GEMM.
# No GPU needed. tests/cuda/test_dialect_nvrtc does the same through NVRTC
# inside ctest; this is the nvcc view (host-compiler pass included).
#
#   tools/device/dialect_nvcc.sh [build-dir]     (default: build)
set -uo pipefail
cd "$(dirname "$0")/../.."
build="${1:-build}"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || { echo "dialect_nvcc: nvcc not found"; exit 77; }
exe=$(find "$build" -type f -name test_dialect_nvrtc -perm -u+x | head -n1)
[ -n "$exe" ] || { echo "dialect_nvcc: build $build first (test_dialect_nvrtc)"; exit 1; }
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
"$exe" --dump "$dir" || exit 1
failed=0
for arch in sm_80 sm_90a; do
  for f in "$dir"/*.cu; do
    if ! "$nvcc" -std=c++17 -x cu -arch="$arch" -c --diag-suppress=177 "$f" -o "$f.$arch.o" \
        2>"$f.$arch.log"; then
      echo "FAILED: $(basename "$f") for $arch"; cat "$f.$arch.log"; failed=$((failed + 1))
    fi
  done
  echo "$arch: $(ls "$dir"/*.cu | wc -l) kernels compiled, $failed failed so far"
done
echo "gemm_bf16 (the H200 shape) on sm_90a:"
"$nvcc" -std=c++17 -x cu -arch=sm_90a -c --diag-suppress=177 -Xptxas -v "$dir/gemm_bf16.cu" \
  -o "$dir/gemm.o" 2>&1 | grep -E "registers|spill" | sort -u
[ "$failed" -eq 0 ]
