#!/usr/bin/env bash
# CUBE_TRACE=trace-%r.json on two ranks: each rank writes its own file (the
# rank from the launcher's variables), and tools/trace_merge.py makes one
# trace of both processes with both failure chains drawn as flows.
#   trace_ranks.sh env|mpi TRACE_CHAIN_BINARY WORKDIR
# env: the ranks are two processes given cubec's CUBE_RANK / CUBE_WORLD_SIZE;
# mpi: Open MPI's mpirun starts them (exit 77 without it).
set -uo pipefail
mode="$1" bin="$2" work="$3"
here="$(cd "$(dirname "$0")" && pwd)"
rm -rf "$work" && mkdir -p "$work" || exit 1
export CUBE_TRACE="$work/trace-%r.json"
if [ "$mode" = mpi ]; then
  command -v mpirun >/dev/null 2>&1 || { echo "SKIP: no mpirun (apt-get install openmpi-bin libopenmpi-dev)"; exit 77; }
  mpirun --version 2>/dev/null | grep -q "Open MPI" || { echo "SKIP: this test drives Open MPI's mpirun"; exit 77; }
  [ "${CUBE_TSAN_BUILD:-0}" = 1 ] && { echo "SKIP: Open MPI is not ThreadSanitizer-clean"; exit 77; }
  export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
  timeout 240 mpirun --allow-run-as-root --oversubscribe -np 2 -x CUBE_TRACE -x CUBE_CACHE_DIR \
    "$bin" || { echo "FAIL: mpirun -np 2 trace_chain"; exit 1; }
else
  pids=()
  for rank in 0 1; do
    CUBE_RANK=$rank CUBE_WORLD_SIZE=2 "$bin" & pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "FAIL: a rank failed"; exit 1; }; done
fi
for rank in 0 1; do
  [ -s "$work/trace-$rank.json" ] || { echo "FAIL: rank $rank wrote no $work/trace-$rank.json"; ls "$work"; exit 1; }
  python3 "$here/check_trace.py" "$work/trace-$rank.json" --kernels 0 --writes 1 --reads 0 --chains 1 || exit 1
  grep -q "\"rank\":$rank," "$work/trace-$rank.json" || { echo "FAIL: trace-$rank.json does not say rank $rank"; exit 1; }
done
python3 "$here/../../tools/trace_merge.py" -o "$work/merged.json" "$work/trace-0.json" "$work/trace-1.json" || exit 1
python3 "$here/check_trace.py" "$work/merged.json" --kernels 0 --writes 2 --reads 0 --chains 2 --processes 2
# Two files of one pid (two hosts' processes can share one): still two
# processes, two chains, no flow joining the files.
python3 "$here/../../tools/trace_merge.py" -o "$work/same.json" "$work/trace-0.json" "$work/trace-0.json" >/dev/null &&
  python3 "$here/check_trace.py" "$work/same.json" --kernels 0 --writes 2 --reads 0 --chains 2 --processes 2
