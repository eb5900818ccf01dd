#!/usr/bin/env python3
"""Medians of bench_collectives --mpi logs: per log (each holds several runs
of one variant at one rank count), per size, the median ratio raw/cubec and
overhead per call over the runs, with their range.
   python3 tools/device/mpi_summary.py LOG...
"""
import re
import statistics
import sys


def runs(path):
    rows, cur = [], None
    for line in open(path):
        if line.startswith("# ") and "np=" in line:
            cur = {}
            rows.append(cur)
        m = re.match(r"\s*(\d+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+\S+\s+\S+\s+([\d.]+)\s+(-?[\d.]+)", line)
        if m and cur is not None:
            b = int(m.group(1))
            cur[b] = (float(m.group(3)), float(m.group(4)), float(m.group(5)), float(m.group(6)))
    return [r for r in rows if r]


def main():
    for path in sys.argv[1:]:
        rs = runs(path)
        if not rs:
            print(f"== {path}: no runs")
            continue
        print(f"== {path}: {len(rs)} runs, medians [range]")
        for b in sorted(set().union(*rs)):
            vals = [r[b] for r in rs if b in r]
            ratio = [v[2] for v in vals]
            over = [v[3] for v in vals]
            raw = statistics.median(v[0] for v in vals)
            cube = statistics.median(v[1] for v in vals)
            print(f"{b:>10} B  ratio {statistics.median(ratio):6.3f} [{min(ratio):.3f}-{max(ratio):.3f}]"
                  f"  over_us {statistics.median(over):+10.2f} [{min(over):+.2f}..{max(over):+.2f}]"
                  f"  raw_us {raw:10.2f}  cubec_us {cube:10.2f}")


if __name__ == "__main__":
    main()
