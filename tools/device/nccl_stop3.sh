#!/usr/bin/env bash
# Issue 31's NCCL row on one H200, after the collectives' host path was cut
# (docs/measurements/2026-12-03/nccl-stop3.md): build, the collectives'
# tests on CUDA (cuda.test_cuda_collectives, which must pass, not skip) and
# on the CPU (coll.*, the failure rules, the conformance suite), then
# bench_collectives at one rank three times (8 B .. 256 MiB), printing each
# run's rates and host-time lines and a summary per operation: the ratio to
# raw NCCL over 8 B .. 8 MiB (target >= 0.95) and at >= 128 MiB, and the host
# time per call over raw (target <= +0.3 us). With two GPUs or more, one
# two-rank run follows (its enqueue goes through NCCL's own thread). About
# 4-5 minutes; one call of the device tool. Logs under $OUT (or
# build-gpu/logs), packed into all-logs.tgz. Run from the repository root:
#   bash tools/device/nccl_stop3.sh
set -uo pipefail
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/nccl-stop3-XXXXXX)"
mkdir -p "$dest"
started=$SECONDS
step() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))"; }
pack() { tar czf "$dest/all-logs.tgz" -C "$out" . 2>/dev/null; }
# cmocka and xxHash from Debian's packages carried in .deb/ (the GPU image
# has no registry).
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader | tee "$out/gpu.txt"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

step build
# Only what this script runs: the whole tree takes longer on 16 cores.
(cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF >/dev/null &&
  cmake --build build-gpu -j"$(nproc)" --target test_cuda_collectives test_comm_query \
    test_collective_rules test_collectives bench_collectives -- -k) >"$out/build.log" 2>&1 ||
  { grep -E 'error|Error' "$out/build.log" | head -40; }
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"

step tests
timeout 240 ctest --test-dir build-gpu --output-on-failure --timeout 200 \
  -R '^cuda\.test_cuda_collectives$|^coll\.|^failure\.test_collective_rules$|^conformance\.test_collectives$' \
  >"$out/ctest.log" 2>&1
grep -E "tests passed|\*\*\*|Failed|Not Run|Skipped" "$out/ctest.log" | head -20
grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest.log" | head -60
pack

for i in 1 2 3; do
  step "bench_collectives --ranks 1, run $i"
  timeout 60 ./build-gpu/bench/bench_collectives --backend cuda --ranks 1 --max 268435456 \
    >"$out/bench_collectives.run$i.log" 2>&1
  echo "rc=$?"
  grep -E "^(all_reduce|all_gather|reduce_scatter) |^host time" "$out/bench_collectives.run$i.log"
  pack
done

step summary
# Per operation over the three runs: the ratio's min / median / max over
# 8 B .. 8 MiB and >= 128 MiB, and the host time over raw.
cat "$out"/bench_collectives.run*.log | awk '
  function med(a, n,   i, j, t) {
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
  }
  /^(all_reduce|all_gather|reduce_scatter) / {
    op = $1; bytes = $2; ratio = $12
    if (bytes <= 8388608) { s[op, ++ns[op]] = ratio }
    else if (bytes >= 134217728) { l[op, ++nl[op]] = ratio }
  }
  /^host time per/ {
    op = $4; d = $0; sub(/.*, \+/, "", d); sub(/ us.*/, "", d); h[op, ++nh[op]] = d + 0
  }
  END {
    n = split("all_reduce all_gather reduce_scatter", ops, " ")
    for (k = 1; k <= n; k++) {
      op = ops[k]; delete a
      for (i = 1; i <= ns[op]; i++) a[i] = s[op, i]
      ms = med(a, ns[op]); lo = a[1]; hi = a[ns[op]]; delete a
      for (i = 1; i <= nl[op]; i++) a[i] = l[op, i]
      ml = nl[op] ? med(a, nl[op]) : 0; delete a
      for (i = 1; i <= nh[op]; i++) a[i] = h[op, i]
      mh = nh[op] ? med(a, nh[op]) : 0
      printf "%-15s 8 B-8 MiB ratio min %.3f median %.3f max %.3f %s | >=128 MiB median %.3f | host +%.2f us (median of %d; %.2f..%.2f) %s\n",
        op, lo, ms, hi, (ms >= 0.95 ? "PASS (>= 0.95)" : "MISS (>= 0.95)"), ml, mh, nh[op], a[1],
        a[nh[op]], (mh <= 0.3 ? "PASS (<= +0.3 us)" : "MISS (<= +0.3 us)")
    }
  }' | tee "$out/summary.txt"
pack

if [ "${gpus:-1}" -ge 2 ]; then
  step "bench_collectives --ranks 2 (NCCL enqueues a group on a thread of its own)"
  timeout 60 ./build-gpu/bench/bench_collectives --backend cuda --ranks 2 --max 16777216 \
    >"$out/bench_collectives.ranks2.log" 2>&1
  echo "rc=$?"
  grep -E "^(all_reduce|all_gather|reduce_scatter) |^host time" "$out/bench_collectives.ranks2.log"
  pack
fi
step done
