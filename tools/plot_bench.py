#!/usr/bin/env python3
"""Draws `cubec bench --csv` output as one PNG: a panel per benchmark, cubec
against its baseline for every case, over the size sweep.

    python3 tools/plot_bench.py [--quiet-if-missing] bench.csv bench.png

`cubec bench --plot FILE.png` runs it. Needs matplotlib (Debian:
python3-matplotlib, or `pip install matplotlib`); exits 3 when it is missing,
1 on a bad CSV, 0 when the PNG was written.
"""
import csv
import sys

PANELS = [
    # benchmark, title, y label, value (from a row), log y
    ("launch", "launch: empty kernel, 256 units per cube", "time per launch (µs)",
     lambda r: float(r["ns_per_op"]) / 1e3, True),
    ("copy", "copy: write, read and device copy", "bandwidth (GB/s)",
     lambda r: float(r["gb_per_s"]), True),
    ("alloc", "alloc: allocate + free pairs (4 live)", "time per pair (ns)",
     lambda r: float(r["ns_per_op"]), True),
    ("kernel", "kernel: a copy kernel vs the device's own copy", "bandwidth (GB/s)",
     lambda r: float(r["gb_per_s"]), True),
]


def read_rows(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    need = {"benchmark", "case", "backend", "x", "x_unit", "implementation", "role",
            "ns_per_op", "gb_per_s"}
    if not rows or not need <= set(rows[0]):
        raise ValueError(f"{path}: not a cubec bench CSV (columns {sorted(need)})")
    return rows


def size_label(x, unit):
    if unit != "bytes":
        return f"{x:g}"
    for name, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= scale:
            return f"{x / scale:g} {name}"
    return f"{x:g} B"


def main(argv):
    # --quiet-if-missing: the caller tries another interpreter on exit 3.
    quiet = len(argv) > 1 and argv[1] == "--quiet-if-missing"
    if quiet:
        argv = argv[:1] + argv[2:]
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        import matplotlib.ticker as ticker
    except ImportError as e:
        if not quiet:
            print(f"plot_bench.py: matplotlib is missing ({e}): "
                  "apt-get install python3-matplotlib, or pip install matplotlib",
                  file=sys.stderr)
        return 3
    try:
        rows = read_rows(argv[1])
    except (OSError, ValueError) as e:
        print(f"plot_bench.py: {e}", file=sys.stderr)
        return 1

    backend = rows[0]["backend"]
    present = [p for p in PANELS if any(r["benchmark"] == p[0] for r in rows)]
    columns = 2 if len(present) > 1 else 1
    lines = (len(present) + columns - 1) // columns
    fig, axes = plt.subplots(lines, columns, figsize=(6.4 * columns, 4.4 * lines), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for index, (bench, title, ylabel, value, logy) in enumerate(present):
        ax = axes[index // columns][index % columns]
        mine = [r for r in rows if r["benchmark"] == bench]
        cases = list(dict.fromkeys(r["case"] for r in mine))
        unit = mine[0]["x_unit"]
        for c, case in enumerate(cases):
            color = colors[c % len(colors)]
            for role, style, marker in (("cubec", "-", "o"), ("baseline", "--", "s")):
                points = sorted((float(r["x"]), value(r), r["implementation"])
                                for r in mine if r["case"] == case and r["role"] == role)
                if not points:
                    continue
                label = "cubec" if role == "cubec" else points[0][2]
                if len(cases) > 1:
                    label = f"{case}: {label}"
                ax.plot([p[0] for p in points], [p[1] for p in points], style, color=color,
                        marker=marker, markersize=4, label=label)
        ax.set_xscale("log", base=2)
        if logy:
            ax.set_yscale("log")
            # 1-2-5 ticks with plain numbers: a narrow log range still gets labels.
            low, high = ax.get_ylim()
            subs = (1.0, 2.0, 5.0) if high / low < 1e3 else (1.0,)
            ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=subs))
            ax.yaxis.set_major_formatter(ticker.FuncFormatter(lambda v, _: f"{v:g}"))
            ax.yaxis.set_minor_formatter(ticker.NullFormatter())
        xs = sorted({float(r["x"]) for r in mine})
        ax.set_xticks(xs)
        ax.set_xticklabels([size_label(x, unit) for x in xs], rotation=30, ha="right",
                           fontsize=8)
        if not logy:
            ax.minorticks_off()
        ax.set_xlabel("cubes per launch" if unit == "cubes" else "bytes per operation")
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="major", alpha=0.3)
        ax.legend(fontsize=7)
    for index in range(len(present), lines * columns):
        axes[index // columns][index % columns].set_visible(False)
    fig.suptitle(f"cubec bench on {backend}: cubec (solid) against its baseline (dashed), "
                 "same process, medians", fontsize=11)
    fig.tight_layout()
    fig.savefig(argv[2], dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
