"""The training step with its backward on the autograd engine's device thread (PyTorch's
default) against the calling thread (``torch.autograd.set_multithreading_enabled(False)``),
alternated round by round in one process, per backend.

The ``train-step`` group of ``mingru bench`` runs each setting in its own process
(``--backward-in-thread``); hosts drift by a third between processes, so this script pairs
the two settings in the same process, on the same model and optimizer.

    python3 scripts/train_step_threads.py [--mixers log,signed] [--rounds 15] [--steps 10]
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch

from mingru_cli import bench_train
from mingru_cli.bench_common import paired_ratio, paired_rounds


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mixers", default="log,signed")
    p.add_argument("--backends", default="auto,compile(eager),compile(triton)")
    p.add_argument("--shape", default="8,2048,512,4", help="B,T,d,layers")
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--steps", type=int, default=10, help="timed steps per round and setting")
    args = p.parse_args()
    B, T, d, L = map(int, args.shape.split(","))
    print(f"B{B} T{T} d{d} L{L}, bf16 autocast, AdamW; ms/step = median over rounds of each "
          f"round's median of {args.steps} steps (CUDA events); ratio = calling thread / "
          "device thread, median of per-round ratios")
    for name in args.mixers.split(","):
        for backend in args.backends.split(","):
            model, opt, tokens = bench_train.build_training(name, backend, B, T, d, L, "cuda")
            mode = bench_train.parse_backend(backend)[0]
            steps = {thread: bench_train.make_step(model, opt, tokens, "cuda", mode,
                                                   backward_in_thread=thread == "calling")
                     for thread in ("device", "calling")}
            for step in steps.values():  # compiles, optimizer state, both paths warm
                for _ in range(3):
                    step()
            times = paired_rounds(steps, args.rounds, lambda step: statistics.median(
                bench_train.time_steps(step, "cuda", args.steps, wall=False)[0]))
            row = {"mixer": name, "backend": backend,
                   "device_thread_ms": statistics.median(times["device"]),
                   "calling_thread_ms": statistics.median(times["calling"]),
                   "ratio": paired_ratio(times["calling"], times["device"])}
            print(json.dumps(row), flush=True)
            del model, opt, steps
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
