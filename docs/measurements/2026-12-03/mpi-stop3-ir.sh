#!/usr/bin/env bash
# Host instructions per all_reduce call at 2 ranks (NP=4: 4), cubec against a raw
# MPI_Allreduce in the same run (callgrind; load-independent, unlike wall
# time on a shared VM). Usage, from the repository root:
#   bash docs/measurements/2026-12-03/mpi-stop3-ir.sh BUILD_DIR [BYTES] [ITERS]
# BUILD_DIR: a Release build with -g (cmake -DCMAKE_C_FLAGS=-g), target
# bench_collectives_mpi. Per rank: the instructions outside the waits
# (cubec: cube_comm_all_reduce less wait_all; raw: MPI_Allreduce less
# ompi_request_default_wait; the waits spin for as long as the peer takes),
# and the mutex locks cubec's own code takes per call.
set -uo pipefail
build="$1" bytes="${2:-8}" iters="${3:-200}" np="${NP:-2}"
work="$(mktemp -d)"
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
(cd "$work" && timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$np" valgrind --tool=callgrind \
  --toggle-collect=cube_comm_all_reduce --toggle-collect=MPI_Allreduce --toggle-collect=PMPI_Allreduce \
  "$OLDPWD/$build/bench/bench_collectives_mpi" --min "$bytes" --max "$bytes" --iters "$iters" \
  >"$work/run.log" 2>&1) || { cat "$work/run.log"; exit 1; }
calls=$((7 * iters))  # 7 repetitions at sizes up to 4 MiB
for f in "$work"/callgrind.out.*; do
  callgrind_annotate --inclusive=yes --threshold=100 "$f" 2>/dev/null >"$f.incl"
  callgrind_annotate --tree=caller --threshold=100 "$f" 2>/dev/null >"$f.tree"
  python3 - "$f.incl" "$f.tree" "$calls" "$bytes" <<'PY'
import re, sys
incl, tree, calls, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
cost = {}
for line in open(incl):
    m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+?):(\S+)", line)
    if m:
        cost.setdefault(m.group(3), int(m.group(1).replace(",", "")))
def c(name):
    return cost.get(name, 0)
cubec = c("cube_comm_all_reduce") - c("wait_all")
raw = c("PMPI_Allreduce") - c("ompi_request_default_wait")
# Locks taken by cubec's own code (callers under src/).
locks = 0
block = []
for line in open(tree):
    block.append(line)
    if "*  " in line:
        if "pthread_mutex_lock@@" in line:
            for b in block:
                m = re.search(r"< (?:\S*/)?src/\S+:\S+ \(([\d,]+)x\)", b)
                if m and ":wait_all " not in b:
                    n = int(m.group(1).replace(",", ""))
                    locks += n
        block = []
    elif not line.strip():
        block = []
print(f"{size} B: cubec {cubec / calls:.0f} Ir/call outside waits, raw {raw / calls:.0f}, "
      f"added {(cubec - raw) / calls:.0f}; cubec's mutex locks {locks / calls:.1f}/call")
PY
done
