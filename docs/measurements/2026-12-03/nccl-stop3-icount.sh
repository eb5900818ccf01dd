#!/usr/bin/env bash
# Instructions per collective call on the core's path (issue 31, NCCL row),
# counted by callgrind: a count that does not move with the machine's load.
# The CPU backend runs the same core path as CUDA (coll_api.c -> coll_call.c
# -> coll_group.c -> the transport's slots); bench_collectives' one-rank CPU
# run issues each side as the CUDA run does (cubec: group_begin, the call,
# group_end; raw: the transport's own submit).
#   bash docs/measurements/2026-12-03/nccl-stop3-icount.sh [BUILD_DIR]
# BUILD_DIR (default build-cg) is configured RelWithDebInfo (-O2 -g), e.g.
#   cmake -S . -B build-cg -DCMAKE_BUILD_TYPE=RelWithDebInfo
#   cmake --build build-cg -j2 --target bench_collectives
# Prints cubec's and the raw submit's instructions per call (inclusive, over
# every call either side made) and where cube_collective_group_end's go.
set -euo pipefail
build="${1:-build-cg}"
out="$(mktemp -d /tmp/nccl-icount-XXXXXX)"
valgrind --tool=callgrind --callgrind-out-file="$out/cg.out" \
  "$build/bench/bench_collectives" --backend cpu --ranks 1 --max 8 --quick >"$out/run.log" 2>&1
callgrind_annotate --inclusive=yes --tree=calling "$out/cg.out" >"$out/tree.txt" 2>/dev/null
python3 - "$out/tree.txt" <<'PY'
import re, sys
blocks = open(sys.argv[1]).read().split('\n\n')
def block(fn):
    for b in blocks:
        lines = [l for l in b.split('\n') if l.strip()]
        for i, l in enumerate(lines):
            if re.search(r'\*\s+\S*:' + re.escape(fn) + r' \[', l):
                return int(l.split()[0].replace(',', '')), lines[i + 1:]
    return 0, []
def callees(lines):
    out = []
    for l in lines:
        m = re.match(r'\s*([\d,]+) .*>\s+\S*:(\S+) \(([\d,]+)x\)', l)
        if m: out.append((m.group(2), int(m.group(1).replace(',', '')), int(m.group(3).replace(',', ''))))
    return out
ci, cl = block('cubec_issue')
calls = sum(n for f, _, n in callees(cl) if f in ('cube_all_reduce', 'cube_all_gather', 'cube_reduce_scatter'))
ri, rl = block('raw_issue')
rcalls = sum(n for f, _, n in callees(rl) if 'submit' in f)
print(f"cubec: {ci / calls:.0f} instructions per call ({calls} calls)")
print(f"raw:   {ri / rcalls:.0f} instructions per call ({rcalls} calls)")
print(f"cubec - raw: {ci / calls - ri / rcalls:.0f}")
for fn in ('cube_collective_group_end', 'cube_coll_call_enter_and_post', 'cube_coll_call_submit_locked'):
    total, lines = block(fn)
    print(f"  {fn}: {total / calls:.0f}")
    for f, ir, n in callees(lines):
        if ir / calls >= 10: print(f"      {ir / calls:6.0f}  {f} ({n}x)")
PY
