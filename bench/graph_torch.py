#!/usr/bin/env python3
"""The decode-step workload of bench/bench_graph.c in PyTorch: eager and CUDA graph.

Per step, 16 layers, each (hidden 4096, gemv 1024 x 256, a weight per layer):
    h = x * 0.5                 (4096)
    o = W_l @ h[:256]           (1024 x 256 gemv)
    a = silu(o)                 (1024)
    x += a broadcast over 4 x 1024
Prints steps/s for eager and for torch.cuda.CUDAGraph replay (one replay per
step), medians over repeats.

    python3 bench/graph_torch.py [--quick]
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

LAYERS, HIDDEN, ROWS, COLS = 16, 4096, 1024, 256


def main():
    quick = "--quick" in sys.argv
    steps, repeats = (20, 3) if quick else (200, 9)
    if not torch.cuda.is_available():
        print("graph_torch: CUDA unavailable, nothing measured")
        return 0
    dev = torch.device("cuda")
    torch.backends.cuda.matmul.allow_tf32 = False
    x = torch.full((HIDDEN,), 0.01, device=dev)
    h = torch.empty(HIDDEN, device=dev)
    weights = [torch.full((ROWS, COLS), 0.001, device=dev) for _ in range(LAYERS)]

    def step():
        for w in weights:
            torch.mul(x, 0.5, out=h)
            o = torch.mv(w, h[:COLS])
            x.view(HIDDEN // ROWS, ROWS).add_(F.silu(o))

    # Warm-up (cuBLAS handles, allocator) on a side stream, as CUDA graphs require.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.replay()
    torch.cuda.synchronize()

    eager, graphed = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        eager.append(steps / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        for _ in range(steps):
            graph.replay()
        torch.cuda.synchronize()
        graphed.append(steps / (time.perf_counter() - t0))
    e, g = statistics.median(eager), statistics.median(graphed)
    print(f"graph_torch on {torch.cuda.get_device_name(0)} (torch {torch.__version__}), medians")
    print(f"decode step: {LAYERS} layers x 4 ops (hidden {HIDDEN}, gemv {ROWS}x{COLS})")
    print(f"  {'':36s} {'steps/s':>12s} {'us/step':>12s}")
    print(f"  {'PyTorch eager':36s} {e:12.0f} {1e6 / e:12.2f}")
    print(f"  {'PyTorch CUDA graph':36s} {g:12.0f} {1e6 / g:12.2f}")
    print(f"  {'graph / eager':36s} {g / e:11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
