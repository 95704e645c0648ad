"""Sweep the elementwise scans' launch plan on a CUDA GPU (a tuning tool, not a test).

For each op and shape, time the forward (and forward+backward) under forced plan choices
(:func:`mingru_kernels.launch.switches.forced`) with ``triton.testing.do_bench``, and print a
table sorted by time, so the planner's defaults can be set from measurements.

    python scripts/plan_sweep.py [--ops parallel_scan_log,linear_recurrence] [--bwd | --bwd-kernel [--dense-grad]]
        [--shapes big,16k,train,8x2048x512] [--dtype bfloat16] [--strategy walk,lookback]
        [--even 0,1] [--scalar 0,1]

Shapes are names of :data:`SHAPES` or literal ``BxTxD``. ``--dtype`` is the inputs' dtype (the
cells' pre-activations under bf16 autocast are bf16). ``--strategy`` takes a comma-separated
list: each strategy is swept over the tiles. With ``--bwd`` each row gives fwd+bwd, then the
forward alone and their difference, the backward's own time (rows sorted by it); the output
gradient is a sum's (expanded, stride 0), or with ``--dense-grad`` a dense random one. ``--even
0,1`` and ``--scalar 0,1`` time each tile under the plan's layout switches (unmasked whole
tiles; a column per thread). Forward rows also give the bandwidth floor (bytes of the inputs
and outputs at 4.22 TB/s) as a fraction of the shipped plan's time.
"""

from __future__ import annotations

import argparse
import itertools
import json

import torch
from triton.testing import do_bench

import mingru
from mingru_kernels.launch import switches

SHAPES = {
    "big": (8, 65536, 1536),
    "16k": (16, 16384, 128),
    "long": (16, 1024, 64),
    # The mixers' benchmark shapes and the training step's (a mixer's state is d wide).
    "mixer": (16, 4096, 256),
    "mixer-wide": (8, 2048, 1024),
    "train": (8, 2048, 512),
    "train-wide": (4, 4096, 1024),
}
COPY_BANDWIDTH = 4.22e12  # bytes/s, device-to-device copy on an NVIDIA H200
GRID = {
    "block_t": (16, 32, 64, 128),
    "block_d": (16, 32, 64),
    "num_warps": (2, 4, 8),
}


# The fused cells: swept under the op name of their launch plan, called by their own names.
CELL_GATES = {"mingru_cell": 2, "signed_mingru_cell": 3}
PLAN_OP = {"signed_mingru_cell": "mingru_cell"}


def parse_shape(name: str) -> tuple[int, int, int]:
    """A name of :data:`SHAPES` or a literal ``BxTxD``."""
    if name in SHAPES:
        return SHAPES[name]
    try:
        B, T, D = (int(v) for v in name.split("x"))
    except ValueError:
        raise SystemExit(f"--shapes: {name!r} is neither one of {', '.join(SHAPES)} "
                         "nor BxTxD") from None
    return B, T, D


def inputs(op, B, T, D, grad, dtype=torch.float32):
    kw = dict(device="cuda", dtype=dtype)
    if op in CELL_GATES:
        xs = (torch.randn(B, T, CELL_GATES[op] * D, **kw), torch.rand(B, D, **kw) + 0.1)
    elif op == "parallel_scan_log":
        xs = (-torch.rand(B, T, D, **kw), torch.randn(B, T + 1, D, **kw))
    else:
        xs = (torch.rand(B, T, D, **kw), torch.randn(B, T, D, **kw))
    return tuple(x.requires_grad_(grad) for x in xs)


def floor_ms(op: str, B: int, T: int, D: int, dtype: torch.dtype) -> float:
    """The forward's bandwidth floor: its inputs read and its outputs written once (linear_scan
    writes P and Z)."""
    n_in = CELL_GATES.get(op, 2)
    n_out = 2 if op == "linear_scan" else 1
    return (n_in + n_out) * B * T * D * dtype.itemsize / COPY_BANDWIDTH * 1e3


def time_call(fn, xs, bwd: bool, dense: bool = False) -> float:
    """do_bench median ms of ``fn(*xs)``, or of forward and backward with ``bwd``: the gradient
    of a sum (each output's gradient arrives expanded, stride 0, as in the benchmarks), or with
    ``dense`` a fixed random gradient per output, passed straight to autograd (a dense read, as
    in a model, with no extra kernel)."""
    cotangents: list[torch.Tensor] = []

    def run():
        if bwd:  # every output enters (linear_scan returns (P, Z))
            out = fn(*xs)
            outs = out if isinstance(out, tuple) else (out,)
            if not dense:
                sum(o.sum() for o in outs).backward()
                return
            if not cotangents:
                cotangents.extend(torch.randn_like(o) for o in outs)
            torch.autograd.backward(outs, cotangents)
        else:
            with torch.no_grad():
                fn(*xs)

    return do_bench(run, warmup=10, rep=40, return_mode="median")


def backward_call(op: str, xs: tuple[torch.Tensor, ...], dense: bool):
    """The op's backward implementation alone (its launcher's ``_bwd_impl``: the backward
    kernels and their allocations, no autograd), for ``--bwd-kernel``: the output gradient is
    a sum's (ones, expanded) or with ``dense`` a random one. The states it reads come from one
    forward on the shipped plan."""
    import importlib

    xs = tuple(x.detach() for x in xs)
    name = "mingru_cell" if op in CELL_GATES else op
    launcher = importlib.import_module(f"mingru._launch.{name}")

    def grad(like: torch.Tensor) -> torch.Tensor:
        return torch.randn_like(like) if dense else like.new_ones(()).expand(like.shape)

    if op in CELL_GATES:
        signed = op == "signed_mingru_cell"
        k, h0 = xs
        h, _ = launcher._fwd_impl(k, h0, None, signed, False)
        dh = grad(h)
        return lambda: launcher._bwd_impl(k, h, h0, None, dh, None, signed, False)
    if op == "linear_recurrence":
        a, b = xs
        h, _ = launcher._fwd_impl(a, b, None)
        dh = grad(h)
        return lambda: launcher._bwd_impl(a, h, None, None, dh, None)
    if op == "parallel_scan_log":
        la, lv = xs
        h = launcher._fwd_impl(la, lv)
        dh = grad(h)
        return lambda: launcher._bwd_impl(la, lv, h, dh)
    raise SystemExit(f"--bwd-kernel: no backward entry for {op!r}")


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ops", default="parallel_scan_log,linear_recurrence")
    parser.add_argument("--shapes", default="big,16k")
    parser.add_argument("--strategy", default=None,
                        help="force these strategies, comma-separated (walk, chunked, lookback)")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--bwd", action="store_true")
    parser.add_argument("--bwd-kernel", action="store_true",
                        help="time the backward implementation alone (its kernels, no autograd "
                             "and no forward): GPU-bound where --bwd rows are host-bound")
    parser.add_argument("--dense-grad", action="store_true",
                        help="with --bwd: a dense random output gradient instead of a sum's "
                             "expanded one (stride 0)")
    parser.add_argument("--top", type=int, default=6, help="rows printed per op and shape")
    parser.add_argument("--tiles", default=None,
                        help="only these tiles, e.g. '32x64x1,64x32x1x3' (block_t x block_d x "
                             "num_warps [x loop_stages]) instead of the grid; 'default': the "
                             "plan's own tiles")
    parser.add_argument("--even", default=None,
                        help="force the plan's even, comma-separated 0/1 (1: unmasked tiles)")
    parser.add_argument("--scalar", default=None,
                        help="force the plan's scalar, comma-separated 0/1 (1: a column per "
                             "thread)")
    args = parser.parse_args()
    evens = [int(v) for v in args.even.split(",")] if args.even else [None]
    scalars = [int(v) for v in args.scalar.split(",")] if args.scalar else [None]
    tiles = [(*t, 1) for t in itertools.product(*GRID.values())]
    if args.tiles == "default":
        tiles = [(None, None, None, None)]
    elif args.tiles:
        tiles = [(*(int(v) for v in t.split("x")), 1)[:4] for t in args.tiles.split(",")]
    dtype = getattr(torch, args.dtype)
    strategies = args.strategy.split(",") if args.strategy else [None]
    for op, shape in itertools.product(args.ops.split(","), args.shapes.split(",")):
        B, T, D = parse_shape(shape)
        xs = inputs(op, B, T, D, args.bwd, dtype)
        fn = getattr(mingru, op)

        def measure(fn=fn, xs=xs, op=op) -> float:
            """The row's time under the plan in force: the backward alone (``--bwd-kernel``),
            fwd+bwd (``--bwd``) or the forward."""
            if args.bwd_kernel:
                return do_bench(backward_call(op, xs, args.dense_grad), warmup=10, rep=40,
                                return_mode="median")
            return time_call(fn, xs, args.bwd, args.dense_grad)

        rows = []
        for strategy, (bt, bd, nw, ls), even, scalar in itertools.product(
                strategies, tiles, evens, scalars):
            layout = {k: v for k, v in (("even", even), ("scalar", scalar)) if v is not None}
            try:
                with mingru.use_backend("triton"), switches.forced(
                        PLAN_OP.get(op, op), block_t=bt, block_d=bd, num_warps=nw, loop_stages=ls,
                        **({"strategy": strategy} if strategy else {}), **layout):
                    ms = measure()
                    # With --bwd the forward too, under the same forced plan: the backward's
                    # own time is the difference (a forced tile applies to both directions).
                    fwd_ms = time_call(fn, xs, False) if args.bwd else None
            except Exception as exc:  # an unsupported combination (registers, shared memory)
                ms = fwd_ms = float("nan")
                print(f"{op} {shape} {strategy} {bt} {bd} {nw} {ls} {layout}: "
                      f"{type(exc).__name__}: {exc}"[:200])
            rows.append((ms, strategy or "auto", bt, bd, nw, ls,
                         "".join(f"{k[0]}{v}" for k, v in layout.items()) or "shipped",
                         *(() if fwd_ms is None else (fwd_ms, ms - fwd_ms))))
        with mingru.use_backend("triton"):
            default = measure()
            default_fwd = time_call(fn, xs, False) if args.bwd else None
        key = -1 if args.bwd else 0  # the backward's own time with --bwd
        rows.sort(key=lambda r: (r[key] != r[key], r[key]))  # NaN (failed) rows last
        out = {"op": op, "shape": shape, "BTD": [B, T, D], "dtype": args.dtype,
               "bwd": "kernel" if args.bwd_kernel else args.bwd,
               "grad": "dense" if args.dense_grad else "expanded",
               "default_ms": default, "best": rows[:args.top]}
        if args.bwd:
            out["default_fwd_ms"] = default_fwd
            out["default_bwd_ms"] = default - default_fwd
        if not (args.bwd or args.bwd_kernel):
            out["floor_ms"] = floor_ms(op, B, T, D, dtype)
            out["default_pct_of_floor"] = round(100 * out["floor_ms"] / default, 1)
        print(json.dumps(out), flush=True)
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
