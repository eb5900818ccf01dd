#!/usr/bin/env python3
"""Checks a Chrome trace written by CUBE_TRACE: valid JSON in the Trace Event
Format (what Perfetto and chrome://tracing open), with at least the slices
the program's work must have made.

    check_trace.py TRACE.json [--kernels N] [--writes N] [--reads N]
                   [--chains N] [--memory] [--processes N]

Every complete ("X") event needs name, cat, ph, pid, tid, ts >= 0 and
dur >= 0; a kernel carries bytes_read, bytes_written and a cube_count of
three positive integers; a copy carries bytes > 0; a failure step carries
its failure id and step; every (pid, tid) has a thread_name metadata event
and every pid a process_name; pids are the writers' real ones (never 1).
--chains N: at least N failures drawn as a chain: a "failed" step, a
"skipped" one and a "reported" one, joined by flow events (s, then t,
then f bound to its enclosing slice) that sit on those steps' slices.
--memory: a "memory in use" counter track with byte counts.
--processes N: the events of exactly N processes (a merged trace).
Exit 0 when it holds, 1 with the reason."""
import argparse
import json
import sys


def fail(message):
    print(f"check_trace.py: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("trace")
    parser.add_argument("--kernels", type=int, default=1)
    parser.add_argument("--writes", type=int, default=1)
    parser.add_argument("--reads", type=int, default=1)
    parser.add_argument("--chains", type=int, default=0)
    parser.add_argument("--memory", action="store_true")
    parser.add_argument("--processes", type=int, default=0)
    args = parser.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{args.trace}: not valid JSON: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail("no traceEvents array")
    events = trace["traceEvents"]
    named = {(e.get("pid"), e.get("tid")) for e in events
             if e.get("ph") == "M" and e.get("name") == "thread_name"}
    processes = {e.get("pid") for e in events
                 if e.get("ph") == "M" and e.get("name") == "process_name"}
    if not processes:
        fail("no process_name metadata event")
    for e in events:
        if e.get("pid") not in processes:
            fail(f"pid {e.get('pid')} has no process_name: {e}")
    if 1 in processes:
        fail("pid 1: not the process's real id")
    if args.processes and len(processes) != args.processes:
        fail(f"events of {len(processes)} processes, expected {args.processes}")
    slices = [e for e in events if e.get("ph") == "X"]
    for e in slices:
        for key in ("name", "cat", "pid", "tid", "ts", "dur", "args"):
            if key not in e:
                fail(f"slice without {key}: {e}")
        if not isinstance(e["ts"], (int, float)) or e["ts"] < 0:
            fail(f"bad ts: {e}")
        if not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
            fail(f"bad dur: {e}")
        if (e["pid"], e["tid"]) not in named:
            fail(f"tid {e['tid']} has no thread_name: {e}")
        a = e["args"]
        if e["cat"] == "failure":
            if not isinstance(a.get("failure"), int) or a.get("step") not in (
                    "failed", "skipped", "reported"):
                fail(f"failure slice without its failure id and step: {e}")
            continue
        for key in ("bytes_read", "bytes_written"):
            if not isinstance(a.get(key), int) or a[key] < 0:
                fail(f"slice without a {key} count: {e}")
        if e["cat"] == "kernel":
            count = a.get("cube_count")
            if (not isinstance(count, list) or len(count) != 3
                    or not all(isinstance(c, int) and c > 0 for c in count)):
                fail(f"kernel slice without a cube_count of three positive integers: {e}")
            if a.get("cubes") != count[0] * count[1] * count[2]:
                fail(f"kernel slice whose cubes is not the product of cube_count: {e}")
            if a["bytes_read"] + a["bytes_written"] == 0:
                fail(f"kernel slice that reads and writes no bytes: {e}")
        elif e["cat"] == "copy":
            if not isinstance(a.get("bytes"), int) or a["bytes"] <= 0:
                fail(f"copy slice without bytes: {e}")
    kernels = [e for e in slices if e["cat"] == "kernel"]
    writes = [e for e in slices if e["name"].startswith("write")]
    reads = [e for e in slices if e["name"].startswith("read")]
    for what, have, want in (("kernel", kernels, args.kernels), ("write", writes, args.writes),
                             ("read", reads, args.reads)):
        if len(have) < want:
            fail(f"{len(have)} {what} slices, expected at least {want}")
    chains = check_chains(events, slices)
    if chains < args.chains:
        fail(f"{chains} failure chains drawn with flows, expected at least {args.chains}")
    counters = [e for e in events if e.get("ph") == "C" and e.get("name") == "memory in use"]
    for e in counters:
        if not isinstance(e.get("args", {}).get("bytes"), int) or e["args"]["bytes"] < 0:
            fail(f"memory counter without bytes: {e}")
    if args.memory and (not counters or not any(e["args"]["bytes"] > 0 for e in counters)):
        fail("no memory in use counter track (or it never rose above 0)")
    print(f"check_trace.py: {args.trace}: {len(slices)} slices ({len(kernels)} kernels, "
          f"{len(writes)} writes, {len(reads)} reads), {chains} failure chains, "
          f"{len(counters)} memory samples, {len(processes)} process(es), valid")


def check_chains(events, slices):
    """The failures whose steps failed -> skipped -> reported are joined by
    one flow (same id): s, t..., f with bp=e, each at a step slice's ts on
    its (pid, tid). Returns how many such chains there are."""
    steps = {}
    for e in slices:
        if e["cat"] == "failure":
            steps.setdefault((e["pid"], e["args"]["failure"]), []).append(e)
    flows = {}
    for e in events:
        if e.get("ph") in ("s", "t", "f"):
            if "id" not in e:
                fail(f"flow event without an id: {e}")
            flows.setdefault(e["id"], []).append(e)
    for fid, flow in flows.items():
        phases = [e["ph"] for e in flow]
        if phases[0] != "s" or phases[-1] != "f" or any(p != "t" for p in phases[1:-1]):
            fail(f"flow {fid} is not s, t..., f: {phases}")
        if flow[-1].get("bp") != "e":
            fail(f"flow {fid} does not end bound to its enclosing slice: {flow[-1]}")
        for e in flow:
            if not any(s["pid"] == e["pid"] and s["tid"] == e["tid"] and
                       s["ts"] <= e["ts"] <= s["ts"] + s["dur"] and s["cat"] == "failure"
                       for s in slices):
                fail(f"flow event outside any failure step slice: {e}")
    chains = 0
    for (pid, failure), chain in steps.items():
        kinds = [e["args"]["step"] for e in sorted(chain, key=lambda e: e["ts"])]
        if kinds[0] != "failed" or "skipped" not in kinds or "reported" not in kinds:
            continue
        drawn = [f for f in flows.values() if f[0]["pid"] == pid and
                 len(f) == len(chain) and f[0]["name"] == f"failure #{failure}"]
        if drawn:
            chains += 1
    return chains


if __name__ == "__main__":
    main()
