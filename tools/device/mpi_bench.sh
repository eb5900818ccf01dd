#!/usr/bin/env bash
# cubec's all_reduce over MPI against a raw MPI_Allreduce on the device
# host's CPUs (bench_collectives --mpi), at 2, 4 and 8 ranks, interleaving
# builds that differ in one constant so that each difference is measured in
# the same session on the same host. $OUT (or build-mpi/logs) gets
# logs.tgz (every log) and summary.txt (tools/device/mpi_summary.py).
#   bash tools/device/mpi_bench.sh ab [MAX_BYTES]   the variants, 3 rounds
#   bash tools/device/mpi_bench.sh full             the default build to 256 MiB,
#                                                   3 runs a rank count, and
#                                                   ctest -L world
# Variants (-D of cpu_mpi.c / cpu_mpi_transport.c, or the environment):
#   straight  CUBE_MPI_LOG_MIN_RANKS=64 (every record straight to every peer)
#   default   the code as it is
#   inline64k CUBE_MPI_INLINE_MAX_BYTES=65536 (parts past 64 KiB on the stream
#             thread)
#   ring      default, with libnbc's MPI_Iallreduce forced to its ring
#             (OMPI_MCA_coll_libnbc_iallreduce_algorithm=1; on 2 ranks cubec
#             asks for it itself)
#   relayed8k CUBE_MPI_FUSED_RELAYED_BYTES=8192 (from 4 ranks, all_reduce up
#             to 8 KiB carried in the relayed records, not 2 KiB)
# xxHash and cmocka come from .deb/ (the GPU image has no registry).
set -uo pipefail
mode="${1:-ab}" max="${2:-33554432}"
# The logs are written to a scratch folder; what comes back is logs.tgz and
# summary.txt in $OUT (the device returns only a few files).
dest="${OUT:-build-mpi/logs}"
mkdir -p "$dest"
out="$(mktemp -d)"
for f in .deb/libxxhash*.deb .deb/libcmocka*.deb; do [ -f "$f" ] && dpkg -x "$f" /; done
ldconfig
jobs="$(nproc)"
launch=(mpirun --allow-run-as-root --oversubscribe)
build() {  # build DIR TARGETS... (CFLAGS from $defs)
  local dir="$1"
  shift
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_TESTS=ON -DCUBE_BUILD_FUZZ=OFF \
    -DCMAKE_C_FLAGS="$defs" >"$out/configure-$(basename "$dir").log" 2>&1 &&
    cmake --build "$dir" -j"$jobs" --target "$@" >"$out/build-$(basename "$dir").log" 2>&1 ||
    { echo "build of $dir failed"; tail -30 "$out/build-$(basename "$dir").log"; exit 1; }
}
bench() {  # bench DIR NP LOG [ENV...]
  local dir="$1" np="$2" log="$3"
  shift 3
  {
    echo "# $(date -u +%FT%TZ) np=$np $dir $* load: $(cut -d' ' -f1-3 /proc/loadavg)"
    env "$@" timeout 240 "${launch[@]}" -np "$np" "$dir/bench/bench_collectives" --mpi --max "$max"
    echo "# exit $?"
  } >>"$log" 2>&1
}
echo "host: $(nproc) cores, $(mpirun --version | head -1), $(uname -r)" | tee "$out/host.txt"
case "$mode" in
ab)
  defs="-DCUBE_MPI_LOG_MIN_RANKS=64" build build-mpi-straight bench_collectives bench_collectives_mpi
  defs="" build build-mpi bench_collectives bench_collectives_mpi
  defs="-DCUBE_MPI_INLINE_MAX_BYTES=65536" build build-mpi-inline64k bench_collectives bench_collectives_mpi
  defs="-DCUBE_MPI_FUSED_RELAYED_BYTES=8192" build build-mpi-relayed8k bench_collectives bench_collectives_mpi
  for np in 2 4 8; do
    for round in 1 2 3; do
      bench build-mpi-straight "$np" "$out/straight_${np}.log"
      bench build-mpi "$np" "$out/default_${np}.log"
      bench build-mpi-inline64k "$np" "$out/inline64k_${np}.log"
      bench build-mpi "$np" "$out/ring_${np}.log" OMPI_MCA_coll_libnbc_iallreduce_algorithm=1
      [ "$np" = 2 ] || bench build-mpi-relayed8k "$np" "$out/relayed8k_${np}.log"
    done
  done
  ;;
full)
  max=268435456
  defs="" build build-mpi bench_collectives bench_collectives_mpi mpi_ranks world_ranks test_bootstrap
  for np in 2 4 8; do
    for round in 1 2 3; do bench build-mpi "$np" "$out/full_${np}.log"; done
  done
  timeout 400 ctest --test-dir build-mpi -L world --output-on-failure >"$out/ctest_world.log" 2>&1
  tail -15 "$out/ctest_world.log"
  ;;
*) echo "mpi_bench.sh: ab or full"; exit 2 ;;
esac
python3 tools/device/mpi_summary.py "$out"/*_[0-9].log >"$out/summary.txt" 2>&1
tar czf "$dest/logs.tgz" -C "$out" .
cp "$out/summary.txt" "$dest/"
ls -la "$out" "$dest"
