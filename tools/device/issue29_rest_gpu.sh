#!/usr/bin/env bash
# Issue 29's last rows on a GPU machine (B7/B9, H7, H34, H27, B15), after a
# build in $BUILD (default build-gpu, as tools/device/gpu_run.sh tests leaves
# it): each new test must run its CUDA group (a "[cuda]" SKIPPED line fails
# the run, since CUDA is present there), then the CUDA tests whose paths
# these rows touched (the stream_create slot now takes a priority; the info
# cache uploads capture-window misses on a side stream), then the two tests
# that run raw kernels or capture misses under compute-sanitizer memcheck
# when it is installed. Logs under $OUT (or build-gpu/logs).
#   bash tools/device/issue29_rest_gpu.sh        (from the repository root)
set -uo pipefail
out="${OUT:-build-gpu/logs}"
build="${BUILD:-build-gpu}"
mkdir -p "$out"
export CUBE_CACHE_DIR="${CUBE_CACHE_DIR:-$PWD/$build/kernel-cache}"
fail=0
# The new tests: every group must pass, and the CUDA group must have run.
for t in test_comm_query test_profile test_info_cache test_stream_priority test_custom_info; do
  log="$out/issue29-$t.log"
  if ! "$build/tests/$t" >"$log" 2>&1; then
    echo "FAIL $t (log: $log)"; tail -30 "$log"; fail=1
  elif grep -q 'SKIPPED \].*\[cuda\]' "$log"; then
    echo "FAIL $t: its CUDA group was skipped on a GPU machine"; grep 'SKIPPED' "$log"; fail=1
  else
    echo "ok   $t ($(grep -c '^\[       OK \]' "$log") cases passed)"
  fi
done
# The CUDA tests whose paths changed.
ctest --test-dir "$build" --output-on-failure \
  -R '^(cuda\.test_cuda_backend|cuda\.test_cuda_poison|cuda\.test_cuda_collectives|cuda\.test_cuda_client|conformance\.test_graph|conformance\.test_collectives|failure\.test_collective_rules)$' \
  >"$out/issue29-ctest.log" 2>&1 || { echo "FAIL ctest (log: $out/issue29-ctest.log)"; fail=1; }
grep -E 'Test +#' "$out/issue29-ctest.log"
if command -v compute-sanitizer >/dev/null 2>&1; then
  for t in test_info_cache test_custom_info; do
    compute-sanitizer --tool memcheck --error-exitcode 3 "$build/tests/$t" \
      >"$out/issue29-memcheck-$t.log" 2>&1 ||
      { echo "FAIL memcheck $t (log: $out/issue29-memcheck-$t.log)"; fail=1; }
  done
else
  echo "compute-sanitizer not found: memcheck skipped"
fi
echo "issue29_rest_gpu.sh: $([ "$fail" = 0 ] && echo ok || echo FAILED)"
exit "$fail"
