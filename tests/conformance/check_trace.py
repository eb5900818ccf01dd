#!/usr/bin/env python3
"""Checks a Chrome trace written by CUBE_TRACE: valid JSON in the Trace Event
Format (what Perfetto and chrome://tracing open), with at least the slices
the program's work must have made.

    check_trace.py TRACE.json [--kernels N] [--writes N] [--reads N]

Every complete ("X") event needs name, cat, ph, pid, tid, ts >= 0 and
dur >= 0; a kernel carries bytes_read, bytes_written and a cube_count of
three positive integers; a copy carries bytes > 0; every tid has a
thread_name metadata event. Exit 0 when it holds, 1 with the reason."""
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
    args = parser.parse_args()
    try:
        with open(args.trace) as f:
            trace = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{args.trace}: not valid JSON: {e}")
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        fail("no traceEvents array")
    events = trace["traceEvents"]
    named = {e.get("tid") for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    if not any(e.get("ph") == "M" and e.get("name") == "process_name" for e in events):
        fail("no process_name metadata event")
    slices = [e for e in events if e.get("ph") == "X"]
    for e in slices:
        for key in ("name", "cat", "pid", "tid", "ts", "dur", "args"):
            if key not in e:
                fail(f"slice without {key}: {e}")
        if not isinstance(e["ts"], (int, float)) or e["ts"] < 0:
            fail(f"bad ts: {e}")
        if not isinstance(e["dur"], (int, float)) or e["dur"] < 0:
            fail(f"bad dur: {e}")
        if e["tid"] not in named:
            fail(f"tid {e['tid']} has no thread_name: {e}")
        a = e["args"]
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
    print(f"check_trace.py: {args.trace}: {len(slices)} slices ({len(kernels)} kernels, "
          f"{len(writes)} writes, {len(reads)} reads), valid")


if __name__ == "__main__":
    main()
