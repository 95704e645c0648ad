"""Sweep the elementwise scans' launch plan on a CUDA GPU (a tuning tool, not a test).

For each op and shape, time the forward (and forward+backward) under forced plan choices
(:func:`mingru_kernels.launch.switches.forced`) with ``triton.testing.do_bench``, and print a
table sorted by time, so the planner's defaults can be set from measurements.

    python scripts/plan_sweep.py [--ops parallel_scan_log,linear_recurrence] [--bwd]
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
from triton.testing import do_bench

import mingru
from mingru_kernels.launch import switches

SHAPES = {"big": (8, 65536, 1536), "16k": (16, 16384, 128)}
GRID = {
    "block_t": (16, 32, 64, 128),
    "block_d": (16, 32, 64),
    "num_warps": (2, 4, 8),
}


# The fused cells: swept under the op name of their launch plan, called by their own names.
CELL_GATES = {"mingru_cell": 2, "signed_mingru_cell": 3}
PLAN_OP = {"signed_mingru_cell": "mingru_cell"}


def inputs(op, B, T, D, grad):
    if op in CELL_GATES:
        xs = (torch.randn(B, T, CELL_GATES[op] * D, device="cuda"),
              torch.rand(B, D, device="cuda") + 0.1)
    elif op == "parallel_scan_log":
        xs = (-torch.rand(B, T, D, device="cuda"), torch.randn(B, T + 1, D, device="cuda"))
    else:
        xs = (torch.rand(B, T, D, device="cuda"), torch.randn(B, T, D, device="cuda"))
    return tuple(x.requires_grad_(grad) for x in xs)


def time_call(fn, xs, bwd: bool) -> float:
    def run():
        if bwd:
            fn(*xs).sum().backward()
        else:
            with torch.no_grad():
                fn(*xs)

    return do_bench(run, warmup=10, rep=40, return_mode="median")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="parallel_scan_log,linear_recurrence")
    parser.add_argument("--shapes", default="big,16k")
    parser.add_argument("--strategy", default=None, help="force walk or chunked")
    parser.add_argument("--bwd", action="store_true")
    parser.add_argument("--top", type=int, default=6, help="rows printed per op and shape")
    parser.add_argument("--tiles", default=None,
                        help="only these tiles, e.g. '32x64x1,64x32x1x3' (block_t x block_d x "
                             "num_warps [x loop_stages]) instead of the grid")
    args = parser.parse_args()
    tiles = [(*t, 1) for t in itertools.product(*GRID.values())]
    if args.tiles:
        tiles = [(*(int(v) for v in t.split("x")), 1)[:4] for t in args.tiles.split(",")]
    for op, shape in itertools.product(args.ops.split(","), args.shapes.split(",")):
        B, T, D = SHAPES[shape]
        xs = inputs(op, B, T, D, args.bwd)
        fn = getattr(mingru, op)
        rows = []
        for bt, bd, nw, ls in tiles:
            try:
                with mingru.use_backend("triton"), switches.forced(
                        PLAN_OP.get(op, op), block_t=bt, block_d=bd, num_warps=nw, loop_stages=ls,
                        **({"strategy": args.strategy} if args.strategy else {})):
                    ms = time_call(fn, xs, args.bwd)
            except Exception as exc:  # an unsupported combination (registers, shared memory)
                ms = float("nan")
                print(f"{op} {shape} {bt} {bd} {nw} {ls}: {type(exc).__name__}: {exc}"[:200])
            rows.append((ms, bt, bd, nw, ls))
        with mingru.use_backend("triton"):
            default = time_call(fn, xs, args.bwd)
        rows.sort()
        print(json.dumps({"op": op, "shape": shape, "bwd": args.bwd, "default_ms": default,
                          "best": rows[:args.top]}), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
