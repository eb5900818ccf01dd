#!/usr/bin/env bash
# Builds cubec on a GPU machine and runs the CUDA backend's tests and the whole
# ctest suite. Run from the repository root (or anywhere: it cds there).
#
#   tools/device/cuda_check.sh
#
# Logs go to $OUT/cuda_check.log when $OUT is set (else build-gpu/cuda_check.log).
# Environment:
#   CUBE_ALLOW_SKIP=1    treat "CUDA unavailable" (exit 77) as success; by
#                        default a skip fails here, since this script exists to
#                        run on a GPU.
#   CUBE_SANITIZER=1     also run test_cuda_backend under compute-sanitizer
#                        (memcheck) when it is installed.
# cmocka: used from the system, else unpacked from .deb/libcmocka*.deb
# (dpkg -x) into .deb/root.
set -uo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
build="$root/build-gpu"
mkdir -p "$build"
log_dir="${OUT:-$build}"
mkdir -p "$log_dir"
log="$log_dir/cuda_check.log"
: >"$log"
exec > >(tee -a "$log") 2>&1

started=$SECONDS
failures=()
section() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }

section "machine"
uname -a
command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi || echo "nvidia-smi: not found"
ldconfig -p 2>/dev/null | grep -E "libcuda\.so|libnvrtc\.so|libnccl\.so" || true

section "cmocka"
cmake_extra=()
if [ ! -f /usr/include/cmocka.h ]; then
  debs=$(ls "$root"/.deb/libcmocka*.deb 2>/dev/null || true)
  if [ -n "$debs" ]; then
    mkdir -p "$root/.deb/root"
    for deb in $debs; do dpkg -x "$deb" "$root/.deb/root"; done
    inc=$(dirname "$(find "$root/.deb/root" -name cmocka.h | head -n1)")
    lib=$(find "$root/.deb/root" -name 'libcmocka.so*' | head -n1)
    if [ -n "$inc" ] && [ -n "$lib" ]; then
      libdir=$(dirname "$lib")
      # A runtime-only package ships libcmocka.so.0: give the linker a name.
      [ -e "$libdir/libcmocka.so" ] || ln -sf "$(basename "$lib")" "$libdir/libcmocka.so"
      cmake_extra+=("-DCMOCKA_INCLUDE_DIR=$inc" "-DCMOCKA_LIBRARY=$libdir/libcmocka.so")
      export LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
      echo "cmocka from $inc and $libdir"
    fi
  else
    echo "warning: cmocka.h not found and no .deb/libcmocka*.deb to unpack"
  fi
else
  echo "system cmocka"
fi

section "configure + build (Release)"
if ! cmake -B "$build" -DCMAKE_BUILD_TYPE=Release "${cmake_extra[@]}"; then
  echo "configure failed"
  exit 1
fi
if ! cmake --build "$build" -j "$(nproc 2>/dev/null || echo 4)"; then
  echo "build failed"
  exit 1
fi

export CUBE_CACHE_DIR="$build/kernel-cache"
mkdir -p "$CUBE_CACHE_DIR"

run_cuda_test() {
  local name="$1"
  local exe
  exe=$(find "$build" -type f -name "$name" -perm -u+x | head -n1)
  section "$name"
  if [ -z "$exe" ]; then
    echo "$name: not built"
    failures+=("$name (not built)")
    return
  fi
  local start=$SECONDS
  timeout 900 "$exe"
  local rc=$?
  echo "$name: exit $rc after $((SECONDS - start))s"
  if [ $rc -eq 77 ]; then
    if [ "${CUBE_ALLOW_SKIP:-0}" = 1 ]; then return; fi
    failures+=("$name (skipped: CUDA unavailable)")
  elif [ $rc -ne 0 ]; then
    failures+=("$name (exit $rc)")
  fi
}

run_cuda_test test_cuda_backend
# Twice: the second run loads every kernel from the disk cache.
run_cuda_test test_cuda_backend
run_cuda_test test_cuda_poison

if [ "${CUBE_SANITIZER:-0}" = 1 ]; then
  section "compute-sanitizer"
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
  exe=$(find "$build" -type f -name test_cuda_backend -perm -u+x | head -n1)
  if [ -n "$sanitizer" ] && [ -n "$exe" ]; then
    # test_out_of_memory's failing allocation is expected; memcheck reports
    # API errors only with --report-api-errors=explicit|all.
    "$sanitizer" --tool memcheck --report-api-errors no "$exe" || failures+=("compute-sanitizer memcheck")
  else
    echo "compute-sanitizer not found"
  fi
fi

section "ctest (whole suite)"
if ! ctest --test-dir "$build" --output-on-failure -j 4; then
  failures+=("ctest")
fi

section "summary"
if ((${#failures[@]})); then
  printf 'FAILED: %s\n' "${failures[@]}"
  exit 1
fi
echo "cuda_check: all passed"
