#!/usr/bin/env python3
"""Merges the Chrome traces of several processes (CUBE_TRACE=trace-%r.json
on each rank, or trace-%p.json) into one file Perfetto opens as one
timeline:

    tools/trace_merge.py -o merged.json trace-0.json trace-1.json ...

Each file's events keep their process (pid) and are shifted onto one clock:
cubec writes the wall-clock time of each trace's origin
(otherData.clock_origin_unix_ns), and the earliest becomes 0. Processes of
different hosts that share a pid get distinct pids; flow ids (the failure
chains) are renumbered so that no two files' flows join. Files without an
origin (not written by cubec) are merged unshifted."""
import argparse
import json
import sys


def load(path):
    try:
        with open(path) as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        sys.exit(f"trace_merge.py: {path}: not a JSON trace: {e}")
    if isinstance(trace, list):  # the bare array form of the format
        trace = {"traceEvents": trace}
    if not isinstance(trace.get("traceEvents"), list):
        sys.exit(f"trace_merge.py: {path}: no traceEvents array")
    return trace


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", help="the traces to merge")
    parser.add_argument("-o", "--output", required=True, help="the merged trace")
    args = parser.parse_args()
    traces = [load(path) for path in args.traces]
    origins = [t.get("otherData", {}).get("clock_origin_unix_ns") for t in traces]
    known = [o for o in origins if isinstance(o, int)]
    base = min(known) if known else 0
    events, used_pids, flow_ids, others = [], set(), {}, []
    for index, (trace, origin) in enumerate(zip(traces, origins)):
        shift_us = (origin - base) / 1000.0 if isinstance(origin, int) else 0.0
        # One pid per file's process; a pid already taken by another file
        # (another host) moves to a free one.
        pids = {}
        for e in trace["traceEvents"]:
            pid = e.get("pid")
            if pid is not None and pid not in pids:
                new = pid
                while new in used_pids:
                    new += 1 << 22  # above any Linux pid
                pids[pid] = new
        used_pids.update(pids.values())
        for e in trace["traceEvents"]:
            e = dict(e)
            if "pid" in e:
                e["pid"] = pids[e["pid"]]
            if isinstance(e.get("ts"), (int, float)) and e.get("ph") != "M":
                e["ts"] = round(e["ts"] + shift_us, 3)
            if e.get("ph") in ("s", "t", "f") and "id" in e:
                e["id"] = flow_ids.setdefault((index, e["id"]), len(flow_ids) + 1)
            events.append(e)
        other = dict(trace.get("otherData", {}))
        other["file"] = args.traces[index]
        other["shift_us"] = shift_us
        others.append(other)
    merged = {"displayTimeUnit": "ns", "otherData": {"merged": others}, "traceEvents": events}
    with open(args.output, "w") as f:
        json.dump(merged, f, separators=(",", ":"))
        f.write("\n")
    print(f"trace_merge.py: {len(traces)} traces, {len(events)} events, "
          f"{len(used_pids)} processes -> {args.output}")


if __name__ == "__main__":
    main()
