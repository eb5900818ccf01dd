#!/usr/bin/env python3
"""PyTorch's side of bench_cuda's dialect section, in the same call.

Measures torch.sum over 1 GiB of float32 (GB/s), torch.matmul of two
8192x8192 bf16 matrices and torch._scaled_mm of their e4m3 roundings
(TFLOP/s) with CUDA events (medians), then, given
--bench, runs `bench_cuda --dialect` and prints cubec's figures next to
PyTorch's with the issue's targets:
  dialect reduction over 1 GiB   >= 0.9x torch.sum
  dialect bf16 GEMM 8192^3       >= 0.5x torch.matmul
  warp-specialised bf16 GEMM     >= 0.95x torch.matmul (A @ B, row-major)
  warp-specialised e4m3 GEMM     >= 0.95x torch._scaled_mm (reported)

Then, unless --no-ws-tma, `bench_cuda --ws-tma` in a run of its own (under a
timeout: a variant that hangs or fails costs only its own figures): the
warp-specialised GEMM with the TMA-store epilogue; each warp-specialised
figure is the better of the two runs.

With --ws-cluster, only `bench_cuda --ws-cluster` runs after PyTorch (a
short call): the warp-specialised GEMM in clusters of two (B multicast), with
ping-pong consumers, and the best single-cube cooperative shape, each against
torch.matmul.

  python3 bench/reduce_gemm_torch.py [--bench build-gpu/bench/bench_cuda] [--quick]
                                     [--no-ws-tma] [--ws-cluster]
"""
import argparse
import statistics
import subprocess
import sys


def timed(torch, fn, repeats, batch):
    """Median device milliseconds of one call of fn over |repeats| batches."""
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(batch):
            fn()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / batch)
    return statistics.median(samples)


def measure_torch(quick):
    import torch

    if not torch.cuda.is_available():
        print("reduce_gemm_torch: no CUDA device for PyTorch")
        return None
    dev = torch.device("cuda")
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
    x = torch.rand(1 << 28, device=dev, dtype=torch.float32)  # 1 GiB
    ms = timed(torch, lambda: torch.sum(x), 5 if quick else 11, 10)
    sum_gbs = (1 << 30) / (ms * 1e-3) / 1e9
    print(f"  torch.sum over 1 GiB float32: {ms:.3f} ms, {sum_gbs:.0f} GB/s")
    del x
    size = 4096 if quick else 8192
    a = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    b = torch.randn(size, size, device=dev, dtype=torch.bfloat16)
    ms = timed(torch, lambda: torch.matmul(a, b), 3 if quick else 7, 5)
    tflops = 2.0 * size**3 / (ms * 1e-3) / 1e12
    print(f"  torch.matmul bf16 {size}^3: {ms:.3f} ms, {tflops:.1f} TFLOP/s")
    # The layout of cubec's WGMMA GEMM: B given n x k (a linear layer's
    # weight), C = A @ B.T; cuBLAS picks its kernel for that layout.
    bt = b.t().contiguous()
    ms_t = timed(torch, lambda: torch.matmul(a, bt.t()), 3 if quick else 7, 5)
    tflops_t = 2.0 * size**3 / (ms_t * 1e-3) / 1e12
    print(f"  torch.matmul bf16 {size}^3, A @ B.T (B n x k): {ms_t:.3f} ms, {tflops_t:.1f} TFLOP/s")
    results = {"torch_sum_gbs": sum_gbs, "torch_matmul_tflops": tflops,
               "torch_matmul_nt_tflops": tflops_t}
    scaled = measure_scaled_mm(torch, a, bt, size, quick)
    if scaled:
        results["torch_scaled_mm_tflops"] = scaled
    return results


def measure_scaled_mm(torch, a, bt, size, quick):
    """torch._scaled_mm on e4m3 A (m x k) and B (n x k, passed column-major
    as the function requires), bf16 out, unit scales: the FP8 GEMM cubec's
    gemm_ws e4m3 row is compared with. None when this torch lacks it."""
    if not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        print("  torch._scaled_mm: not in this torch")
        return None
    try:
        a8 = a.to(torch.float8_e4m3fn)
        b8 = bt.to(torch.float8_e4m3fn).t()  # k x n, column-major
        one = torch.ones((), device=a.device, dtype=torch.float32)

        def call():
            out = torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
            return out[0] if isinstance(out, tuple) else out  # torch < 2.4: (out, amax)

        ms = timed(torch, call, 3 if quick else 7, 5)
    except (RuntimeError, TypeError) as e:
        print(f"  torch._scaled_mm: failed ({e})")
        return None
    tflops = 2.0 * size**3 / (ms * 1e-3) / 1e12
    print(f"  torch._scaled_mm e4m3 {size}^3 (bf16 out): {ms:.3f} ms, {tflops:.1f} TFLOP/s")
    return tflops


def run_bench(path, quick, mode="--dialect", timeout=None):
    args = [path, mode] + (["--quick"] if quick else [])
    print(f"running {' '.join(args)}")
    sys.stdout.flush()
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        sys.stdout.write(out)
        print(f"bench_cuda {mode}: killed after {timeout} s (a hung kernel?)")
        return None
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"bench_cuda exited with {proc.returncode}")
        return None
    results = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "RESULT":
            results[parts[1]] = float(parts[2])
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bench", help="bench_cuda to run with --dialect after PyTorch")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-ws-tma", action="store_true",
                        help="skip bench_cuda --ws-tma (the TMA-store epilogue variants)")
    parser.add_argument("--ws-cluster", action="store_true",
                        help="only bench_cuda --ws-cluster (gemm_ws in clusters of two)")
    opts = parser.parse_args()
    torch_results = measure_torch(opts.quick)
    if not opts.bench:
        return 0 if torch_results else 1
    if opts.ws_cluster:
        cubec = run_bench(opts.bench, opts.quick, "--ws-cluster", 240)
        if not torch_results or not cubec:
            return 1
        print("\nfigure                                     cubec      baseline   ratio  target")
        for what, ours in (("bf16 GEMM ws, one cube vs torch.matmul", "gemm_bf16_ws_tflops"),
                           ("bf16 GEMM ws, clusters of 2 vs torch.matmul",
                            "gemm_bf16_ws_cluster_tflops"),
                           ("bf16 GEMM ws, ping-pong vs torch.matmul",
                            "gemm_bf16_ws_pingpong_tflops")):
            theirs = torch_results["torch_matmul_tflops"]
            if ours in cubec and theirs > 0:
                ratio = cubec[ours] / theirs
                verdict = "PASS" if ratio >= 0.95 else "MISS"
                print(f"{what:40s} {cubec[ours]:9.1f} {theirs:10.1f} {ratio:7.3f}  >= 0.95 {verdict}")
        return 0
    cubec = run_bench(opts.bench, opts.quick)
    if not torch_results or not cubec:
        return 1
    tma = None if opts.no_ws_tma else run_bench(opts.bench, opts.quick, "--ws-tma", 150)
    for key in ("gemm_bf16_ws_tflops", "gemm_bf16_ws_nt_tflops", "gemm_e4m3_ws_tflops"):
        other = (tma or {}).get(key.replace("_ws_", "_ws_tma_"))
        if other is None:
            continue
        print(f"  {key}: register epilogue {cubec.get(key, 0):.1f}, --ws-tma run {other:.1f}")
        cubec[key] = max(cubec.get(key, 0), other)
    print("\nfigure                                     cubec      baseline   ratio  target")
    rows = [
        ("reduction 1 GiB (GB/s) vs torch.sum", "reduce_line4_gbs", "torch_sum_gbs", 0.9),
        ("reduction 1 GiB (GB/s) vs CUDA by hand", "reduce_line4_gbs", "reduce_cuda_gbs", 0.9),
        ("bf16 GEMM (TFLOP/s) vs torch.matmul", "gemm_bf16_tflops", "torch_matmul_tflops", 0.5),
        ("bf16 GEMM WGMMA vs torch A @ B.T", "gemm_bf16_wg_tflops", "torch_matmul_nt_tflops",
         0.5),
        ("bf16 GEMM WGMMA vs torch.matmul A @ B", "gemm_bf16_wg_tflops", "torch_matmul_tflops",
         0.5),
        ("bf16 GEMM warp-spec. vs torch.matmul A @ B", "gemm_bf16_ws_tflops",
         "torch_matmul_tflops", 0.95),
        ("bf16 GEMM warp-spec. vs torch A @ B.T", "gemm_bf16_ws_nt_tflops",
         "torch_matmul_nt_tflops", 0.95),
        ("e4m3 GEMM warp-spec. vs torch._scaled_mm", "gemm_e4m3_ws_tflops",
         "torch_scaled_mm_tflops", 0.95),
        ("line-4 copy (GB/s) vs float4 CUDA", "copy_line4_gbs", "copy_float4_gbs", 0.97),
        ("line-4 copy (GB/s) vs cuMemcpyDtoD", "copy_line4_gbs", "copy_dtod_gbs", 0.97),
    ]
    merged = dict(cubec)
    merged.update(torch_results)
    for what, ours, theirs, target in rows:
        if ours in merged and theirs in merged and merged[theirs] > 0:
            ratio = merged[ours] / merged[theirs]
            verdict = "PASS" if ratio >= target else "MISS"
            print(f"{what:40s} {merged[ours]:9.1f} {merged[theirs]:10.1f} {ratio:7.3f}  "
                  f">= {target} {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
