"""Where the host time of a training step goes (a diagnosis tool for a CUDA machine).

The ``train-step`` bench group reports ms/step and the GPU-busy share; this script splits the
rest. For each backend it builds the bench's language model (:mod:`mingru_cli.bench_train`),
warms up, then prints per step: the wall time with a sync per step, the wall time of a batch
of steps with one sync (what the GPU cannot hide), the GPU-busy time (union of kernel
intervals under ``torch.profiler``), the number of kernel launches, and the Python functions
and ATen ops that own the host time (``cProfile`` by own time, ``torch.profiler`` by self CPU
time).

    python3 scripts/profile_train_step.py --mixer log --backends auto,compile(triton) \
        [--shape 8,2048,512,4] [--fused-adamw] [--compile-mode reduce-overhead] [--top 20]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch
from torch.profiler import ProfilerActivity, profile

from mingru_cli import bench_profile, bench_train


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mixer", default="log")
    p.add_argument("--backends", default="auto,compile(triton)")
    p.add_argument("--shape", default="8,2048,512,4", help="B,T,d,layers")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--top", type=int, default=20)
    p.add_argument("--fused-adamw", action="store_true")
    p.add_argument("--compile-mode", default=None, help="torch.compile mode of the blocks")
    args = p.parse_args()
    B, T, d, L = map(int, args.shape.split(","))
    for backend in args.backends.split(","):
        model = bench_train.build_model(args.mixer, d, L, "cuda")
        mode, compile_mode = bench_train.parse_backend(backend)
        compile_mode = compile_mode or args.compile_mode
        if backend.startswith("compile("):
            for block in model.stack.blocks:
                block.compile(dynamic=False, mode=compile_mode)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3,
                                **({"fused": True} if args.fused_adamw else {}))
        tokens = torch.randint(0, bench_train.VOCAB, (B, T + 1), device="cuda")
        step = bench_train.make_step(model, opt, tokens, "cuda", mode,
                                     cudagraphs=compile_mode == "reduce-overhead")
        for _ in range(5):
            step()
        torch.cuda.synchronize()
        per_step = []
        for _ in range(args.steps):
            t = time.perf_counter()
            step()
            torch.cuda.synchronize()
            per_step.append((time.perf_counter() - t) * 1e3)
        t = time.perf_counter()
        for _ in range(args.steps):
            step()
        host = (time.perf_counter() - t) * 1e3 / args.steps  # before the sync: host only
        torch.cuda.synchronize()
        batch = (time.perf_counter() - t) * 1e3 / args.steps
        t = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(5):
                step()
            torch.cuda.synchronize()
        profiled = bench_profile.breakdown(prof, 5, (time.perf_counter() - t) * 1e3)
        kernels = sum(e.device_type == torch.autograd.DeviceType.CUDA for e in prof.events())
        print(f"\n##### {args.mixer} {backend} B{B} T{T} d{d} L{L}"
              f"{' fused AdamW' if args.fused_adamw else ''}"
              f"{' mode=' + compile_mode if compile_mode else ''}")
        print(f"wall/step (sync each) {statistics.median(per_step):.2f} ms; batch of "
              f"{args.steps}: {batch:.2f} ms/step, host-only {host:.2f} ms/step; GPU-busy "
              f"{profiled['busy_ms_per_step']:.2f} ms/step (under the profiler); "
              f"{kernels / 5:.0f} kernels/step; by family {profiled['families_ms_per_step']}")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top))
        # The GPU side: which kernels own the busy time (the elementwise share above all).
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=args.top))
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(10):
            step()
        torch.cuda.synchronize()
        pr.disable()
        s = io.StringIO()
        pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(args.top)
        print(s.getvalue())
        del model, opt, step
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
