"""torch.distributed (NCCL backend) collectives, timed the way nccl-tests
times them: the baseline cubec's bench_collectives is compared against on
the multi-GPU machine (tools/device/multi_gpu_run.sh).

    torchrun --standalone --nproc-per-node N bench/collectives_torch.py [--max-bytes B]

Per operation (all_reduce, all_gather, reduce_scatter) and size (8 B .. B,
x4): warm-up 5, then `iters` calls between two CUDA events on the current
stream; time per call = elapsed / iters; algbw = S / t (S: the bytes of the
full array: for all_gather and reduce_scatter count * n * 4); busbw = algbw x
2(n-1)/n for all_reduce, (n-1)/n for all_gather and reduce_scatter (nccl-tests
doc/PERFORMANCE.md); host overhead = host time to issue one call of the
smallest size (no sync inside the loop). NCCL_NVLS_ENABLE=0 is required.
"""
import argparse
import os
import time

import torch
import torch.distributed as dist


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-bytes", type=int, default=4 << 30)
    args = parser.parse_args()
    if os.environ.get("NCCL_NVLS_ENABLE") != "0":
        raise SystemExit("set NCCL_NVLS_ENABLE=0 (NVLink multicast must stay off here)")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    n = dist.get_world_size()
    rank = dist.get_rank()
    factors = {"all_reduce": 2.0 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n}
    if rank == 0:
        print(f"torch {torch.__version__} nccl {torch.cuda.nccl.version()} ranks {n}")
        print(f"{'op':>15} {'bytes':>12} {'iters':>6} {'us':>10} {'algbw':>9} {'busbw':>9}")
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        size = 8
        while size <= args.max_bytes:
            count = max(size // 4, 1)
            if op == "all_reduce":
                x = torch.ones(count, device="cuda")
                call = lambda: dist.all_reduce(x)
                full = count * 4
            elif op == "all_gather":
                chunk = max(count // n, 1)
                x = torch.ones(chunk, device="cuda")
                y = torch.empty(chunk * n, device="cuda")
                call = lambda: dist.all_gather_into_tensor(y, x)
                full = chunk * n * 4
            else:
                chunk = max(count // n, 1)
                x = torch.ones(chunk * n, device="cuda")
                y = torch.empty(chunk, device="cuda")
                call = lambda: dist.reduce_scatter_tensor(y, x)
                full = chunk * n * 4
            iters = 20 if size <= (256 << 20) else 5
            for _ in range(5):
                call()
            torch.cuda.synchronize()
            dist.barrier()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(iters):
                call()
            end.record()
            end.synchronize()
            t = start.elapsed_time(end) / 1e3 / iters
            algbw = full / t / 1e9
            if rank == 0:
                print(f"{op:>15} {full:>12} {iters:>6} {t * 1e6:>10.2f} {algbw:>9.2f} {algbw * factors[op]:>9.2f}")
            del x
            if op != "all_reduce":
                del y
            size *= 4
    # Host overhead per call: issue 1000 small all_reduces, no sync inside.
    x = torch.ones(2, device="cuda")
    for _ in range(10):
        dist.all_reduce(x)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(1000):
        dist.all_reduce(x)
    issued = (time.perf_counter() - t0) / 1000
    torch.cuda.synchronize()
    if rank == 0:
        print(f"host overhead per all_reduce call (8 B, issue only): {issued * 1e6:.2f} us")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
