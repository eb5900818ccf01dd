#!/usr/bin/env bash
# The multi-GPU run (issue 16), in one command, on an nvidia-h200-x2 / -x4
# machine — and on the single H200 too (every stage with a world of 1).
# Run from the repository root; logs under $OUT (else build-gpu/multi-gpu):
#   bash tools/device/multi_gpu_run.sh [quick]
# Stages (each logged to its own file, a summary at the end):
#   1. nvidia-smi topo -m, GPU count, NCCL and torch versions
#   2. build (Release)
#   3. one process driving every GPU (group calls): the collectives
#      conformance suite (tests/conformance/test_collectives) and the
#      failure rules over NCCL
#   4. one process per GPU (torchrun-style RANK / WORLD_SIZE / LOCAL_RANK,
#      the NCCL unique id through a rendezvous file): tests/world/world_ranks
#      (every collective x every element type against the oracle, a stale
#      source on one rank) and examples/allreduce_nccl
#   5. benchmarks 8 B .. 4 GiB: bench_collectives (cubec against raw NCCL
#      calls made as nccl-tests makes them, same busbw factors), cubec's
#      world all_reduce one process per GPU (bench_collectives_mpi cuda),
#      and torch.distributed with the NCCL backend (bench/collectives_torch.py)
#   6. failure tests one process per GPU: a peer SIGKILLed before a
#      collective and mid-payload, a late peer (the survivors fail within
#      CUBE_COLLECTIVE_TIMEOUT_S, destinations claimed, device not poisoned,
#      the world refused afterwards)
# NVLink multicast stays off in every process (NCCL_NVLS_ENABLE=0 and the
# PyTorch / NVSHMEM switches); cubec never calls cuMulticastCreate.
set -uo pipefail
cd "$(dirname "$0")/../.."
quick="${1:-}"
out="${OUT:-build-gpu/multi-gpu}"
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ "$NCCL_NVLS_ENABLE" = 0 ] || { echo "NCCL_NVLS_ENABLE must be 0 here"; exit 1; }
started=$SECONDS
results=()
section() { printf '\n==== %s (%ds)\n' "$1" "$((SECONDS - started))" | tee -a "$out/summary.log"; }
note() { echo "$*" | tee -a "$out/summary.log"; results+=("$*"); }
: >"$out/summary.log"

section "1. machine"
{
  nvidia-smi topo -m
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "gpus", torch.cuda.device_count(), "nccl", torch.cuda.nccl.version())' 2>&1
  ldconfig -p | grep -E "libnccl|libcuda\.so" || true
  env | grep -E "^NCCL_|MULTICAST|NVLS" || true
} 2>&1 | tee "$out/machine.log"
ngpu=$(nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null | wc -l)
[ "$ngpu" -ge 1 ] || { note "no GPU: nothing to run"; exit 1; }
note "GPUs: $ngpu"

section "2. build"
# cmocka / xxHash from carried Debian packages when the image lacks them.
if { [ ! -f /usr/include/cmocka.h ] || [ ! -f /usr/include/xxhash.h ]; } &&
  ls .deb/*.deb >/dev/null 2>&1; then
  for f in .deb/*.deb; do dpkg -x "$f" /; done
  ldconfig
fi
if (cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release &&
  cmake --build build-gpu -j"$(nproc)" -- -k) >"$out/build.log" 2>&1; then
  note "build: ok"
else
  tail -30 "$out/build.log"
  note "build: FAILED (see build.log)"
fi
export CUBE_CACHE_DIR="$PWD/build-gpu/kernel-cache"
b=build-gpu
rdv="$(mktemp -d)"
chmod 700 "$rdv"
trap 'rm -rf "$rdv"' EXIT

# Runs |np| copies of a program, one per GPU, torchrun-style; each rank's
# output to $out/<tag>.rank<r>.log; answers the worst exit code.
per_gpu() {
  local tag="$1" np="$2" limit="$3"
  shift 3
  local pids=() rc=0
  for ((r = 0; r < np; ++r)); do
    CUBE_RENDEZVOUS_DIR="$rdv" CUBE_COMM_NAME="$tag-$$" RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r \
      timeout "$limit" "$@" >"$out/$tag.rank$r.log" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do
    wait "$p"
    local c=$?
    [ $c -gt $rc ] && rc=$c
  done
  cat "$out/$tag".rank*.log | grep -E "^PASS|^FAIL|^rank|skipped|SKIP" | head -40
  return $rc
}

section "3. one process, every GPU (group calls)"
for t in test_collectives test_collective_rules; do
  exe=$(find $b/tests -maxdepth 1 -name "$t" -type f | head -1)
  if [ -z "$exe" ]; then
    note "$t: not built"
    continue
  fi
  timeout 900 "$exe" >"$out/$t.log" 2>&1
  rc=$?
  tail -4 "$out/$t.log"
  note "$t (one process, $ngpu GPUs): exit $rc"
done

section "4. one process per GPU (environment bootstrap, rendezvous file)"
for np in $(seq 1 "$ngpu"); do
  [ "$np" = 1 ] || [ "$np" = 2 ] || [ "$np" = 4 ] || [ "$np" = "$ngpu" ] || continue
  CUBE_COLLECTIVE_TIMEOUT_S=120 per_gpu "world$np" "$np" 600 $b/tests/world_ranks conformance cuda
  note "world_ranks conformance, $np processes x 1 GPU: exit $?"
  CUBE_COLLECTIVE_TIMEOUT_S=120 per_gpu "dp$np" "$np" 300 $b/examples/allreduce_nccl
  note "examples/allreduce_nccl, $np processes: exit $?"
done

section "5. benchmarks"
max=$((4 << 30))
[ "$quick" = quick ] && max=$((256 << 20))
if [ -x $b/bench/bench_collectives ]; then
  timeout 1200 $b/bench/bench_collectives --backend cuda --ranks "$ngpu" --max "$max" 2>&1 |
    tee "$out/bench_collectives.log" | tail -40
  note "bench_collectives (cubec vs raw NCCL, one process, $ngpu GPUs): exit ${PIPESTATUS[0]}"
else
  note "bench_collectives: not built here (the collectives branch's benchmark)"
fi
CUBE_COLLECTIVE_TIMEOUT_S=300 per_gpu "bench_world$ngpu" "$ngpu" 1200 $b/bench/bench_collectives_mpi --max "$max" --cuda
note "bench_collectives_mpi --cuda (cubec world all_reduce, $ngpu processes): exit $?"
cat "$out/bench_world$ngpu.rank0.log" | tail -30
if python3 -c 'import torch' 2>/dev/null; then
  PYTHONUNBUFFERED=1 timeout 1200 torchrun --standalone --nproc-per-node "$ngpu" \
    bench/collectives_torch.py --max-bytes "$max" 2>&1 | tee "$out/collectives_torch.log" | tail -40
  note "torch.distributed (NCCL backend), $ngpu processes: exit ${PIPESTATUS[0]}"
else
  note "torch.distributed: no torch here"
fi

section "6. failure tests, one process per GPU"
if [ "$ngpu" -ge 2 ]; then
  for m in killed killed-mid timeout; do
    t0=$SECONDS
    CUBE_COLLECTIVE_TIMEOUT_S=10 per_gpu "fail-$m" "$ngpu" 120 $b/tests/world_ranks "$m" cuda
    rc=$?
    n=$(cat "$out/fail-$m".rank*.log | grep -c "^PASS world-$m rank [0-9]*:.*failed after\|^PASS world-$m rank [0-9]* (the late one)\|^PASS world-killed-mid")
    note "failure '$m' ($ngpu processes, deadline 10 s): $n PASS lines, took $((SECONDS - t0)) s (the killed rank exits 137: rc $rc)"
  done
else
  note "failure tests across processes need 2 GPUs (NCCL cannot put two ranks on one GPU); the CPU/MPI versions run in CI (ctest -L world)"
fi

section "summary"
printf '%s\n' "${results[@]}" | tee "$out/results.log"
echo "logs: $out"
