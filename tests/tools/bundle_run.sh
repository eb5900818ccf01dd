#!/usr/bin/env bash
# The demo and every example, run from a bundle on a machine "without a
# compiler": CUBE_CC is a program that always fails and PATH holds no
# compiler. First each runs once with the compiler, recording its kernels
# (CUBE_BUNDLE_RECORD, CUBE_TUNE=test so every tuning candidate is built);
# `cubec bundle build` makes one bundle of them; then each runs again from a
# fresh, empty kernel cache with the bundle and no compiler, and must pass,
# compile nothing and write no kernel file.
# usage: bundle_run.sh CUBEC EXAMPLE...
set -u
cubec="$1"
shift
work="$(mktemp -d /tmp/cubec-bundle-run-XXXXXX)"
trap 'rm -rf "$work"' EXIT
failed=0
fail() { echo "FAIL: $*"; failed=1; }

export CUBE_TUNE=test
# Under TSan the demo with every tuning candidate takes longer than the
# test's limit (tests/CMakeLists.txt sets BUNDLE_RUN_SKIP_DEMO there): the
# examples alone run from the bundle.
programs=("$cubec demo")
[ "${BUNDLE_RUN_SKIP_DEMO:-0}" = 1 ] && programs=()
# The CPU's compiler is the one taken away: on a GPU machine the demo would
# otherwise record CUDA kernels (sm_90a options no CPU build takes).
export CUBE_BACKEND=cpu
# 1. Record, with the compiler.
for program in "${programs[@]}" "$@"; do
  CUBE_CACHE_DIR="$work/record-cache" CUBE_BUNDLE_RECORD="$work/all.manifest" \
    $program >"$work/record.log" 2>&1
  rc=$?
  if [ "$rc" != 0 ] && [ "$rc" != 77 ]; then
    cat "$work/record.log"
    fail "recording $program exited $rc"
  fi
done
[ -s "$work/all.manifest" ] || { echo "FAIL: nothing recorded"; exit 1; }
echo "recorded $(grep -c '^kernel ' "$work/all.manifest") kernel builds"

# 2. Build the bundle (this ISA's baseline and x86-64-v3 by default).
"$cubec" bundle build "$work/all.manifest" --out "$work/all.cubebundle" || exit 1
"$cubec" bundle verify "$work/all.cubebundle" || exit 1

# 3. Run without a compiler.
mkdir -p "$work/empty-path"
# No compiler on PATH, only what Open MPI's singleton start needs (its
# daemon, and the agent its launcher looks for) for allreduce_mpi.
for tool in orted ssh rsh; do
  found="$(command -v "$tool" 2>/dev/null)" && ln -sf "$found" "$work/empty-path/$tool"
done
for compiler in cc gcc clang tcc; do
  [ -e "$work/empty-path/$compiler" ] && fail "a compiler is on the test's PATH"
done
printf '#!/bin/sh\necho "no compiler here" >&2\nexit 1\n' >"$work/failing-cc"
chmod +x "$work/failing-cc"
for program in "${programs[@]}" "$@"; do
  name="$(basename "${program%% *}")${program#"${program%% *}"}"
  rm -rf "$work/run-cache"
  PATH="$work/empty-path" CUBE_CC="$work/failing-cc" CUBE_CACHE_DIR="$work/run-cache" \
    CUBE_BUNDLE="$work/all.cubebundle" CUBE_LOG=info $program >"$work/run.log" 2>&1
  rc=$?
  if [ "$rc" = 77 ]; then
    echo "skip: $name (not for this backend)"
    continue
  fi
  if [ "$rc" != 0 ]; then
    tail -30 "$work/run.log"
    fail "$name exited $rc without a compiler"
    continue
  fi
  if grep -q '^cubec\[cuda' "$work/run.log"; then
    # A program that picks CUDA itself (NCCL) compiles with NVRTC, which this
    # test does not take away (tools/device/bundle_check.sh covers CUDA).
    echo "skip: $name (runs on CUDA)"
    continue
  fi
  taken=$(grep -c "taken from a bundle" "$work/run.log")
  # The demo's broken kernel is refused on purpose: it is the only compile try.
  compiled=$(grep -E "kernel '[^']+': compiled in" "$work/run.log" | grep -vc broken_fill)
  files=$(find "$work/run-cache" -name '*.ck' 2>/dev/null | wc -l)
  echo "ok: $name ($taken kernels taken from the bundle, $compiled compiled, $files kernel files)"
  [ "$taken" -gt 0 ] || fail "$name took no kernel from the bundle"
  [ "$compiled" = 0 ] || fail "$name compiled $compiled kernels"
  [ "$files" = 0 ] || fail "$name wrote $files kernel files"
done

# 4. The same bundle damaged: refused whole, naming the reason, nothing run.
cp "$work/all.cubebundle" "$work/damaged.cubebundle"
# The byte's complement: writing a fixed value changes nothing where the byte
# already holds it (an object's zero padding).
byte=$(od -An -tu1 -j5000 -N1 "$work/all.cubebundle" | tr -d ' ')
printf "\\$(printf '%03o' $((255 - byte)))" |
  dd of="$work/damaged.cubebundle" bs=1 seek=5000 conv=notrunc 2>/dev/null
cmp -s "$work/all.cubebundle" "$work/damaged.cubebundle" && fail "the bundle was not damaged"
if PATH="$work/empty-path" CUBE_CC="$work/failing-cc" CUBE_CACHE_DIR="$work/run-cache" \
    CUBE_BUNDLE="$work/damaged.cubebundle" "$cubec" demo >"$work/damaged.log" 2>&1; then
  fail "the demo ran from a damaged bundle"
fi
grep -q "hash mismatch" "$work/damaged.log" || { cat "$work/damaged.log"; fail "no reason given"; }
"$cubec" bundle verify "$work/damaged.cubebundle" >/dev/null 2>&1 && fail "verify passed a damaged bundle"
# 5. CUDA targets need NVRTC, not a GPU: with NVRTC switched off the build
# is refused, saying so; with it (where installed) the cubin and PTX build.
if CUBE_NVRTC_PATH=none "$cubec" bundle build "$work/all.manifest" --targets cuda-sm_90 \
    --out "$work/cuda.cubebundle" >"$work/cuda.log" 2>&1; then
  fail "a CUDA bundle was built with NVRTC switched off"
fi
grep -q "NVRTC is switched off (CUBE_NVRTC_PATH=none)" "$work/cuda.log" ||
  { cat "$work/cuda.log"; fail "the refusal does not say NVRTC is off"; }
# gemm_bf16_wg's wgmma needs sm_90a: its cubin is arch-specific, and it has
# no PTX for compute_80 (left out of the PTX build).
awk 'BEGIN { keep = 1 } /^kernel / { keep = ($2 != "gemm_bf16_wg") } keep || /^cubec-manifest/' \
  "$work/all.manifest" >"$work/ptx.manifest"
if "$cubec" bundle build "$work/all.manifest" --targets cuda-sm_90a \
    --out "$work/cuda.cubebundle" >"$work/cuda.log" 2>&1 &&
  "$cubec" bundle build "$work/ptx.manifest" --targets cuda-ptx-sm_80 \
    --out "$work/ptx.cubebundle" >>"$work/cuda.log" 2>&1; then
  "$cubec" bundle list "$work/ptx.cubebundle" | grep -q "cuda-ptx-sm_80" ||
    fail "the PTX bundle lists no PTX entry"
  echo "ok: CUDA bundles (cubins sm_90a, PTX compute_80) built without a GPU"
else
  grep -q "without NVRTC" "$work/cuda.log" || { cat "$work/cuda.log"; fail "CUDA bundle build"; }
  echo "skip: no NVRTC here, CUDA targets refused as they should be"
fi
exit $failed
