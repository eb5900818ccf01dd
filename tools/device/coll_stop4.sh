#!/usr/bin/env bash
# Issue 31's collectives row on one H200 host, after the fourth stop's cuts
# (docs/measurements/2026-12-03/coll-stop4.md): a lone one-rank call runs
# straight through (one hold of the server's lock and one of the member's),
# and the MPI path resolves its bindings inline.
#   1. build (Release, only the targets below);
#   2. tests: cuda.test_cuda_collectives (must pass, not skip), coll.*, the
#      failure rules, the conformance suite's collectives, and the MPI world
#      tests that race (world.mpi_cancel_race, world.mpi_4_ranks);
#   3. NCCL, one rank: bench_collectives --backend cuda --ranks 1 --max 8 MiB,
#      three runs; a summary per operation: the rate against raw NCCL over
#      8 B .. 8 MiB (target >= 0.95) and the host time per call over raw
#      (target <= +0.3 us);
#   4. MPI on the host's cores: bench_collectives --mpi --max 32768 at 2, 4
#      and 8 ranks, three runs each; tools/device/mpi_summary.py's medians
#      (target: over_us <= 0.5 at 8 B .. 32 KiB).
# About 3-4 minutes. With `ab` and build-old/src.tgz (a `git archive` of the
# tree before, carried as an ignored path), the old tree is built too and
# every bench run alternates old / new in the same session (about 6 minutes):
#   bash tools/device/coll_stop4.sh [ab]
# Logs under $OUT (or build-gpu/logs), packed into all-logs.tgz; summary.txt.
set -uo pipefail
mode="${1:-}"
dest="${OUT:-build-gpu/logs}"
out="$(mktemp -d /tmp/coll-stop4-XXXXXX)"
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
echo "host: $(nproc) cores, $(mpirun --version 2>/dev/null | head -1), $(uname -r)" | tee -a "$out/gpu.txt"
launch=(mpirun --allow-run-as-root --oversubscribe)

build() {  # build SRC DIR TARGETS...
  local src="$1" dir="$2"
  shift 2
  local targets=("$@")
  cmake -S "$src" -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_FUZZ=OFF \
    >"$out/configure-$(basename "$dir").log" 2>&1 || { echo "configure of $dir failed"; return 1; }
  # The world tests' MPI shim (world.mpi_cancel_race), where CMake found
  # libmpi.so.40. (grep reads the whole list: `grep -q` leaves cmake a broken
  # pipe, which pipefail takes for a failure.)
  cmake --build "$dir" --target help 2>/dev/null | grep mpi_cancel_shim >/dev/null &&
    targets+=(mpi_cancel_shim)
  cmake --build "$dir" -j"$(nproc)" --target "${targets[@]}" -- -k \
    >"$out/build-$(basename "$dir").log" 2>&1 ||
    { echo "build of $dir failed"; grep -E 'error|Error' "$out/build-$(basename "$dir").log" | head -30; }
}

step build
build . build-gpu test_cuda_collectives test_comm_query test_collective_rules test_collectives \
  bench_collectives bench_collectives_mpi mpi_ranks world_ranks
sides=(build-gpu)
if [ "$mode" = ab ] && [ -f build-old/src.tgz ]; then
  rm -rf build-old/src && mkdir -p build-old/src && tar xzf build-old/src.tgz -C build-old/src &&
    build build-old/src build-old/b bench_collectives bench_collectives_mpi && sides=(build-old/b build-gpu)
fi
echo "sides: ${sides[*]}"
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
pack

step tests
timeout 200 ctest --test-dir build-gpu --output-on-failure --timeout 150 \
  -R '^cuda\.test_cuda_collectives$|^coll\.|^failure\.test_collective_rules$|^conformance\.test_collectives$|^world\.mpi_cancel_race$|^world\.mpi_4_ranks$' \
  >"$out/ctest.log" 2>&1
grep -E "tests passed|\*\*\*|Failed|Not Run|Skipped" "$out/ctest.log" | head -20
grep -B2 -A14 -E "FAILED  \]|ERROR   \]" "$out/ctest.log" | head -60
pack

for i in 1 2 3; do
  for side in "${sides[@]}"; do
    name=$([ "$side" = build-gpu ] && echo new || echo old)
    step "nccl one rank, $name, run $i"
    timeout 60 "./$side/bench/bench_collectives" --backend cuda --ranks 1 --max 8388608 \
      >"$out/nccl_${name}.run$i.log" 2>&1
    echo "rc=$?"
    grep -E "^host time" "$out/nccl_${name}.run$i.log"
  done
  pack
done

step "nccl summary"
for name in old new; do
  ls "$out"/nccl_${name}.run*.log >/dev/null 2>&1 || continue
  echo "-- $name"
  cat "$out"/nccl_${name}.run*.log | awk '
    function med(a, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    /^(all_reduce|all_gather|reduce_scatter) / { op = $1; s[op, ++ns[op]] = $12 }
    /^host time per/ {
      op = $4; d = $0; sub(/.*, \+/, "", d); sub(/ us.*/, "", d); h[op, ++nh[op]] = d + 0
      c = $0; sub(/.*cubec /, "", c); sub(/ us.*/, "", c); hc[op, nh[op]] = c + 0
    }
    END {
      n = split("all_reduce all_gather reduce_scatter", ops, " ")
      for (k = 1; k <= n; k++) {
        op = ops[k]; delete a
        for (i = 1; i <= ns[op]; i++) a[i] = s[op, i]
        ms = med(a, ns[op]); lo = a[1]; hi = a[ns[op]]; delete a
        for (i = 1; i <= nh[op]; i++) a[i] = h[op, i]
        mh = nh[op] ? med(a, nh[op]) : 0
        printf "%-15s 8 B-8 MiB ratio min %.3f median %.3f max %.3f %s | host +%.2f us (median of %d; %.2f..%.2f) %s\n",
          op, lo, ms, hi, (ms >= 0.95 ? "PASS (>= 0.95)" : "MISS (>= 0.95)"), mh, nh[op], a[1],
          a[nh[op]], (mh <= 0.3 ? "PASS (<= +0.3 us)" : "MISS (<= +0.3 us)")
      }
    }'
done | tee "$out/summary.txt"
pack

for np in 2 4 8; do
  for _ in 1 2 3; do
    for side in "${sides[@]}"; do
      name=$([ "$side" = build-gpu ] && echo new || echo old)
      {
        echo "# $(date -u +%FT%TZ) np=$np $side load: $(cut -d' ' -f1-3 /proc/loadavg)"
        timeout 60 "${launch[@]}" -np "$np" "$side/bench/bench_collectives" --mpi --max 32768
        echo "# exit $?"
      } >>"$out/mpi_${name}_${np}.log" 2>&1
    done
  done
  step "mpi $np ranks done"
  pack
done

step "mpi summary"
python3 tools/device/mpi_summary.py "$out"/mpi_*_[248].log | tee -a "$out/summary.txt"
cp "$out/summary.txt" "$dest/summary.txt"
pack
step finished
