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
#   bash tools/device/mpi_bench.sh algos [MAX]      at 4 and 8 ranks, libnbc's
#                                                   iallreduce algorithms 0, 2-4
#   bash tools/device/mpi_bench.sh probe            mpi_rounds_probe.c (MPI
#                                                   alone: raw against the
#                                                   record patterns), 2/4/8 ranks
#   bash tools/device/mpi_bench.sh xprobe           mpi_exchange_probe.c (cubec's
#                                                   exchange's features priced
#                                                   one by one), 4 and 8 ranks
#   bash tools/device/mpi_bench.sh ab3 [MAX]        default; nohalve (carried
#                                                   blocks never reduced in
#                                                   halves); fused16k, fused32k
#                                                   (all_reduce carried up to
#                                                   16 / 32 KiB), 3 rounds
#   bash tools/device/mpi_bench.sh ab4 [MAX]        default; nosplit (relayed
#                                                   messages never cut into
#                                                   eager parts); fused32k,
#                                                   3 rounds
#   bash tools/device/mpi_bench.sh ab5 [MAX]        default; old (build-old/src.tgz);
#                                                   fused32k (32 KiB carried,
#                                                   slices apart from 8 KiB);
#                                                   f32a4k, f32a16k (apart from
#                                                   4 / 16 KiB), 3 rounds, then
#                                                   ctest -L world
#   bash tools/device/mpi_bench.sh ab6 [MAX]        default; fused32k; st32k, st32k8
#                                                   (32 KiB carried, records
#                                                   straight to every rank on
#                                                   every world / below 8)
#   bash tools/device/mpi_bench.sh sprobe           mpi_slices_probe.c (MPI alone:
#                                                   raw against the schedules a
#                                                   mid-size all_reduce could
#                                                   take), 8/4/2 ranks, twice
#   bash tools/device/mpi_bench.sh ab7 [MAX]        copy (carried blocks copied in and
#                                                   out), inplace (default), e16k,
#                                                   e32k (vader's eager limit
#                                                   raised, parts sized to it),
#                                                   8 and 4 ranks, then ctest -L world
#   bash tools/device/mpi_bench.sh old [MAX] [N]    default against the tree in
#                                                   build-old/src.tgz, N rounds
#                                                   (default 5) at 8, 4, 2 ranks
# Variants (CMake options -DCUBE_MPI_*=N, docs/scaleout.md "Tunables", or the environment):
#   straight  CUBE_MPI_LOG_MIN_RANKS=64 (every record straight to every peer,
#             every rank reducing every carried source)
#   default   the code as it is
#   nbc0      default, with libnbc's own choice of MPI_Iallreduce algorithm
#             (OMPI_MCA_coll_libnbc_iallreduce_algorithm=0; cubec asks for
#             the ring on 2 ranks and Rabenseifner's from 4)
#   old       the tree in build-old/src.tgz (git archive of an earlier
#             commit), when there is one
#   ab2: default; fused32k (CUBE_MPI_FUSED_MAX_BYTES=32768: all_reduce up to
#   32 KiB carried in the records); inlineall (CUBE_MPI_INLINE_MAX_BYTES=2^40:
#   every collective part on the caller's thread when the stream is idle)
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
build() {  # build DIR TARGETS... ($defs: -DCUBE_MPI_*=N, the CMake options of docs/scaleout.md)
  local dir="$1"
  shift
  local targets=("$@")
  # shellcheck disable=SC2086  # $defs is a list of -D options
  cmake -S . -B "$dir" -DCMAKE_BUILD_TYPE=Release -DCUBE_BUILD_TESTS=ON -DCUBE_BUILD_FUZZ=OFF \
    $defs >"$out/configure-$(basename "$dir").log" 2>&1 || { echo "configure of $dir failed"; exit 1; }
  # The world tests' MPI shim (world.mpi_cancel_race), where CMake found
  # libmpi.so.40 to build it. (grep reads the whole list: `grep -q` leaves
  # cmake a broken pipe, which pipefail takes for a failure, and the shim
  # went unbuilt.)
  case " $* " in
  *" mpi_ranks "*) cmake --build "$dir" --target help 2>/dev/null | grep mpi_cancel_shim >/dev/null &&
    targets+=(mpi_cancel_shim) ;;
  esac
  cmake --build "$dir" -j"$jobs" --target "${targets[@]}" >"$out/build-$(basename "$dir").log" 2>&1 ||
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
variants() {  # variants NAME=DEFS...: each built (default: no defs, build-mpi;
  # old=: the tree in build-old/src.tgz), then 3 rounds at 8, 4 and 2 ranks,
  # the variants alternating
  local v names=()
  for v in default= "$@"; do
    names+=("${v%%=*}")
    if [ "${v%%=*}" = old ]; then
      mkdir -p build-old/src && tar xzf build-old/src.tgz -C build-old/src &&
        (cd build-old/src && defs="" build ../b bench_collectives bench_collectives_mpi) || exit 1
      continue
    fi
    defs="${v#*=}" build "$(vdir "${v%%=*}")" bench_collectives bench_collectives_mpi
  done
  for np in 8 4 2; do
    for round in 1 2 3; do
      for v in "${names[@]}"; do bench "$(vdir "$v")" "$np" "$out/${v}_${np}.log"; done
    done
  done
}
vdir() {
  case "$1" in
  default) echo build-mpi ;;
  old) echo build-old/b ;;
  *) echo "build-mpi-$1" ;;
  esac
}
echo "host: $(nproc) cores, $(mpirun --version | head -1), $(uname -r)" | tee "$out/host.txt"
case "$mode" in
ab)
  defs="-DCUBE_MPI_LOG_MIN_RANKS=64" build build-mpi-straight bench_collectives bench_collectives_mpi
  defs="" build build-mpi bench_collectives bench_collectives_mpi
  old=""
  if [ -f build-old/src.tgz ]; then
    mkdir -p build-old/src && tar xzf build-old/src.tgz -C build-old/src &&
      (cd build-old/src && defs="" build ../b bench_collectives bench_collectives_mpi) && old=build-old/b
  fi
  for np in 2 4 8; do
    for round in 1 2 3; do
      bench build-mpi-straight "$np" "$out/straight_${np}.log"
      bench build-mpi "$np" "$out/default_${np}.log"
      bench build-mpi "$np" "$out/nbc0_${np}.log" OMPI_MCA_coll_libnbc_iallreduce_algorithm=0
      [ -z "$old" ] || bench "$old" "$np" "$out/old_${np}.log"
    done
  done
  ;;
ab2)
  variants fused32k=-DCUBE_MPI_FUSED_MAX_BYTES=32768 inlineall=-DCUBE_MPI_INLINE_MAX_BYTES=1099511627776
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
algos)
  defs="" build build-mpi bench_collectives bench_collectives_mpi
  for np in 4 8; do
    for round in 1 2 3; do
      for alg in 0 2 3 4; do
        bench build-mpi "$np" "$out/alg${alg}_${np}.log" OMPI_MCA_coll_libnbc_iallreduce_algorithm=$alg
      done
    done
  done
  ;;
probe)
  mpicc -O2 -o "$out/mpi_rounds_probe" tools/device/mpi_rounds_probe.c || exit 1
  for np in 2 4 8; do
    timeout 120 "${launch[@]}" -np "$np" "$out/mpi_rounds_probe" 8 128 512 2048 8192 32768 \
      >"$out/probe_${np}.txt" 2>&1
    cat "$out/probe_${np}.txt"
  done
  tar czf "$dest/logs.tgz" -C "$out" --exclude mpi_rounds_probe .
  exit 0
  ;;
ab3)
  variants nohalve=-DCUBE_MPI_HALVING_MIN_BYTES=1073741824 fused16k=-DCUBE_MPI_FUSED_MAX_BYTES=16384 fused32k=-DCUBE_MPI_FUSED_MAX_BYTES=32768
  ;;
ab4)
  variants nosplit=-DCUBE_MPI_PART_BYTES=1073741824 fused32k=-DCUBE_MPI_FUSED_MAX_BYTES=32768
  ;;
ab5)
  variants old= fused32k=-DCUBE_MPI_FUSED_MAX_BYTES=32768 \
    f32a4k="-DCUBE_MPI_FUSED_MAX_BYTES=32768 -DCUBE_MPI_APART_MIN_BYTES=4096" \
    f32a16k="-DCUBE_MPI_FUSED_MAX_BYTES=32768 -DCUBE_MPI_APART_MIN_BYTES=16384"
  defs="" build build-mpi mpi_ranks world_ranks test_bootstrap
  timeout 300 ctest --test-dir build-mpi -L world --output-on-failure >"$out/ctest_world.log" 2>&1
  tail -12 "$out/ctest_world.log"
  ;;
ab6)
  variants fused32k=-DCUBE_MPI_FUSED_MAX_BYTES=32768 \
    st32k="-DCUBE_MPI_FUSED_MAX_BYTES=32768 -DCUBE_MPI_LOG_MIN_RANKS=64" \
    st32k8="-DCUBE_MPI_FUSED_MAX_BYTES=32768 -DCUBE_MPI_LOG_MIN_RANKS=8"
  ;;
sprobe)
  mpicc -O2 -o "$out/mpi_slices_probe" tools/device/mpi_slices_probe.c || exit 1
  for np in 8 4 2; do
    for round in 1 2; do
      OMPI_MCA_coll_libnbc_iallreduce_algorithm=$([ "$np" = 2 ] && echo 1 || echo 3) timeout 120 \
        "${launch[@]}" -np "$np" "$out/mpi_slices_probe" 8192 16384 32768 131072 524288 \
        >>"$out/sprobe_${np}.txt" 2>&1
    done
    cat "$out/sprobe_${np}.txt"
  done
  tar czf "$dest/sprobe.tgz" -C "$out" --exclude mpi_slices_probe .
  exit 0
  ;;
xprobe)
  mpicc -O2 -o "$out/mpi_exchange_probe" tools/device/mpi_exchange_probe.c || exit 1
  for np in 8 4; do
    timeout 120 "${launch[@]}" -np "$np" "$out/mpi_exchange_probe" >"$out/xprobe_${np}.txt" 2>&1
    cat "$out/xprobe_${np}.txt"
  done
  tar czf "$dest/logs.tgz" -C "$out" --exclude mpi_exchange_probe .
  exit 0
  ;;
old)
  [ -f build-old/src.tgz ] || { echo "mpi_bench.sh old: no build-old/src.tgz"; exit 2; }
  rounds="${3:-5}"
  defs="" build build-mpi bench_collectives bench_collectives_mpi
  mkdir -p build-old/src && tar xzf build-old/src.tgz -C build-old/src &&
    (cd build-old/src && defs="" build ../b bench_collectives bench_collectives_mpi) || exit 1
  for np in 8 4 2; do
    for round in $(seq "$rounds"); do
      bench build-mpi "$np" "$out/new_${np}.log"
      bench build-old/b "$np" "$out/old_${np}.log"
    done
  done
  ;;
ab7)
  # copy (the block copied into the comm's buffer and out), inplace (the
  # default: reduced in the core's records), and inplace with vader's eager
  # limit raised to 16 / 32 KiB (both sides of the run; parts sized to it).
  defs="-DCUBE_MPI_CARRY_IN_PLACE=0" build build-mpi-copy bench_collectives bench_collectives_mpi
  defs="" build build-mpi bench_collectives bench_collectives_mpi mpi_ranks world_ranks test_bootstrap
  defs="-DCUBE_MPI_PART_BYTES=16320" build build-mpi-p16k bench_collectives bench_collectives_mpi
  defs="-DCUBE_MPI_PART_BYTES=32704" build build-mpi-p32k bench_collectives bench_collectives_mpi
  for np in 8 4; do
    for round in 1 2 3; do
      bench build-mpi-copy "$np" "$out/copy_${np}.log"
      bench build-mpi "$np" "$out/inplace_${np}.log"
      bench build-mpi-p16k "$np" "$out/e16k_${np}.log" OMPI_MCA_btl_vader_eager_limit=16384
      bench build-mpi-p32k "$np" "$out/e32k_${np}.log" OMPI_MCA_btl_vader_eager_limit=32768
    done
  done
  timeout 300 ctest --test-dir build-mpi -L world --output-on-failure >"$out/ctest_world.log" 2>&1
  tail -12 "$out/ctest_world.log"
  ;;
*) echo "mpi_bench.sh: ab, ab2, ab3, ab4, ab5, ab6, ab7, full, algos, probe, sprobe, xprobe or old"; exit 2 ;;
esac
python3 tools/device/mpi_summary.py "$out"/*_[0-9].log >"$out/summary.txt" 2>&1
tar czf "$dest/logs.tgz" -C "$out" .
cp "$out/summary.txt" "$dest/"
ls -la "$out" "$dest"
