"""Sequence parallelism, measured: a MinGRUStack language-model step with T split over ranks.

Each rank holds ``T / world`` steps of one batch and runs forward + backward with
``sequence_group=`` (one all-gather of the per-slice maps per layer, :mod:`mingru._sharding`).
Reported per world size: ms per step (median), tokens/s, peak memory per rank (CUDA), and the
time spent in the exchange itself (the all-gathers and their backward, timed around the
collective on every rank). With ``world = 1`` it is the unsharded step on one device.

CPU (gloo, processes spawned here; one thread per rank so ranks do not share cores):

    python benchmarks/sequence_parallel.py --backend gloo --worlds 1,2,4 --tokens 16384

GPUs (NCCL, one rank per GPU, launched by torchrun):

    torchrun --nproc-per-node 2 benchmarks/sequence_parallel.py --backend nccl --tokens 262144
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import mingru
from mingru import _sharding


def _step_fn(args, device, group):
    torch.manual_seed(0)
    model = mingru.MinGRUStack(args.d_model, args.d_model, args.layers, mixer=args.mixer,
                               mlp_expansion=2).to(device)
    head = torch.nn.Linear(args.d_model, args.vocab).to(device)
    world = 1 if group is None else dist.get_world_size(group)
    steps = args.tokens // world
    x = torch.randn(1, steps, args.d_model, device=device)
    y = torch.randint(0, args.vocab, (1, steps), device=device)
    params = [*model.parameters(), *head.parameters()]

    def step():
        for p in params:
            p.grad = None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.bf16):
            out, _ = model(x, sequence_group=group)
            loss = torch.nn.functional.cross_entropy(head(out).flatten(0, 1).float(), y[0])
        loss.backward()
        if group is not None:  # the parameter gradients are per-rank partials
            for p in params:
                dist.all_reduce(p.grad, group=group)

    return step


class _ExchangeClock:
    """Wall time inside the sequence-parallel all-gathers (forward and backward)."""

    def __init__(self, device):
        self.total = 0.0
        self.device = device
        self._forward = _sharding._AllGather.forward
        self._backward = _sharding._AllGather.backward

    def _sync(self):
        if self.device.type == "cuda":
            torch.cuda.synchronize()

    def __enter__(self):
        clock = self

        def timed(fn):
            def wrapper(ctx, *args):
                clock._sync()
                t0 = time.perf_counter()
                out = fn(ctx, *args)
                clock._sync()
                clock.total += time.perf_counter() - t0
                return out
            return wrapper

        _sharding._AllGather.forward = staticmethod(timed(self._forward))
        _sharding._AllGather.backward = staticmethod(timed(self._backward))
        return self

    def __exit__(self, *exc):
        _sharding._AllGather.forward = staticmethod(self._forward)
        _sharding._AllGather.backward = staticmethod(self._backward)


def measure(args, device, group) -> dict:
    step = _step_fn(args, device, group)
    for _ in range(args.warmup):
        step()
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats(device)
    times, exchange = [], []
    for _ in range(args.repeats):
        with _ExchangeClock(device) as clock:
            if group is not None:
                dist.barrier(group)
            t0 = time.perf_counter()
            step()
            if device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        exchange.append(clock.total)
    ms = 1e3 * statistics.median(times)
    world = 1 if group is None else dist.get_world_size(group)
    row = dict(world=world, mixer=args.mixer, tokens=args.tokens, d_model=args.d_model,
               layers=args.layers, ms_per_step=ms, tokens_per_s=args.tokens / (ms / 1e3),
               exchange_ms=1e3 * statistics.median(exchange),
               exchange_bytes_per_layer_per_rank=2 * args.d_model * 4)
    if device.type == "cuda":
        row["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30
    return row


def _spawned(rank, world, init, args, queue):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world)
    try:
        row = measure(args, torch.device("cpu"), dist.group.WORLD)
        if rank == 0:
            queue.put(row)
    finally:
        dist.barrier()
        dist.destroy_process_group()
        os._exit(0)  # gloo threads may abort at interpreter exit after the work is done


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--backend", default="gloo", choices=("gloo", "nccl"))
    p.add_argument("--worlds", default="1,2,4", help="gloo: the world sizes to spawn")
    p.add_argument("--tokens", type=int, default=16384)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--mixer", default="log")
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args()
    rows = []
    if args.backend == "nccl":  # under torchrun: one rank per GPU
        dist.init_process_group("nccl")
        rank = dist.get_rank()
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
        group = dist.group.WORLD if dist.get_world_size() > 1 else None
        rows.append(measure(args, device, group))
        dist.destroy_process_group()
        if rank != 0:
            return 0
    else:
        for world in (int(w) for w in args.worlds.split(",")):
            if world == 1:
                torch.set_num_threads(1)
                rows.append(measure(args, torch.device("cpu"), None))
                continue
            ctx = mp.get_context("spawn")
            queue = ctx.SimpleQueue()
            with tempfile.TemporaryDirectory() as tmp:
                mp.spawn(_spawned, args=(world, f"file://{tmp}/rdv", args, queue),
                         nprocs=world, join=True)
            rows.append(queue.get())
    for r in rows:
        print(json.dumps(r), flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(rows=rows, torch=torch.__version__), f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
