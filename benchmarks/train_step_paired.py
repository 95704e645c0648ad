"""Training-step backends timed paired in one process, among them the step whose mixer cell
costs only its memory floor: how much of a compiled step any mixer kernel can remove.

The fused-cell issue asks ``compile(triton)`` (every block compiled, the mixer's cell on our
kernels) to take at most half the time of ``compile(eager)`` (every block compiled, the cell
on the eager scans traced by inductor). Only the cell differs between the two: the
projections, norms, MLP, embedding, head and AdamW are the same code, compiled the same way.
So no cell kernel can beat a cell that costs its memory floor, and this script builds that
floor: ``compile(floor)`` replaces the cell by ``h = σ(k_z)·k_h`` (no recurrence): one read of
the projection output and one write of the states forward, and the same backward traffic a
fused cell has. Inductor fuses it into one kernel per direction.

``compile(floor) / compile(eager)`` is then the lowest ratio a cell kernel can reach on this
step and GPU; if it is above the target, the target needs the rest of the step (GEMMs,
optimizer, norms) to get faster than inductor makes it, not a faster mixer.

Any backend of the ``train-step`` group can be listed too (e.g. ``auto,triton``: the library's
default against it plus the kernels ``auto`` does not pick at that size, such as the fused
LayerNorm), and any backend with ``+fused-adamw`` (e.g. ``auto,auto+fused-adamw``): the same
step with ``torch.optim.AdamW(..., fused=True)`` instead of PyTorch's default AdamW.
Hosts drift by a third between processes, so the backends are built side by side (each with
its own AdamW, the same initial weights and tokens), warmed up, then timed round by round in
alternating order; each round gives the median of ``--steps`` steps (CUDA events), and the
ratios to the first backend are medians of per-round ratios.

    python3 benchmarks/train_step_paired.py [--mixers log,signed] [--shape 8,2048,512,4]
        [--backends "compile(eager),compile(floor),compile(triton)"] [--rounds 9]
        [--steps 10] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import json
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mingru_cli import bench_profile, bench_train
from mingru_cli.bench_common import free_memory, paired_ratio, paired_rounds

BACKENDS = ("compile(eager)", "compile(floor)", "compile(triton)")
FLOOR = "compile(floor)"
FUSED_ADAMW = "+fused-adamw"
CELLS = {"log": ("mingru.mixers.log", "mingru_cell", 2),
         "signed": ("mingru.mixers.signed", "signed_mingru_cell", 3)}


def floor_cell(k: torch.Tensor, initial_state: Any = None, log_gamma: Any = None,
               return_final_state: bool = False, *, parts: int, **kwargs: Any) -> Any:
    """A stand-in for the MinGRU (``parts = 2``) and signed (``parts = 3``) cells at their
    memory floor: ``σ(k_z)·k_h`` from ``k (B, T, parts·D)`` (``k_z`` the first ``D`` features,
    ``k_h`` the last), no recurrence. The cells' signature, shapes and dtype (``(h, h[:, -1])``
    when asked for the final state); not their values (this is for timing only)."""
    D = k.shape[-1] // parts
    h = torch.sigmoid(k[..., :D]) * k[..., -D:]
    return (h, h[:, -1]) if return_final_state else h


_STAND_INS: dict[str, Callable[..., Any]] = {}


@contextlib.contextmanager
def cell_replaced(mixer: str) -> Iterator[None]:
    """The mixer module's cell replaced by :func:`floor_cell` inside the block."""
    module_name, attr, parts = CELLS[mixer]
    module = importlib.import_module(module_name)
    real = getattr(module, attr)
    # One stand-in object per mixer: dynamo guards on the global's identity, and a new object
    # per step would recompile every step.
    stand_in = _STAND_INS.setdefault(mixer, functools.partial(floor_cell, parts=parts))
    setattr(module, attr, stand_in)
    try:
        yield
    finally:
        setattr(module, attr, real)


def with_floor_cell(mixer: str, call: Callable[[], Any]) -> Callable[[], Any]:
    """``call`` run with the mixer's cell replaced (also while it compiles, so its compiled
    graph holds the stand-in)."""
    def run() -> Any:
        with cell_replaced(mixer):
            return call()

    return run


def make_steps(mixer: str, shape: tuple[int, int, int, int], device: str,
               backends: tuple[str, ...] = BACKENDS) -> dict[str, Callable[[], Any]]:
    """One step function per backend; the floor's runs with the cell replaced."""
    B, T, d, L = shape
    steps = {}
    for backend in backends:
        base, fused = backend.removesuffix(FUSED_ADAMW), backend.endswith(FUSED_ADAMW)
        compiled = "compile(eager)" if base == FLOOR else base
        model, opt, tokens = bench_train.build_training(mixer, compiled, B, T, d, L, device,
                                                        fused_adamw=fused)
        step = bench_train.make_step(model, opt, tokens, device,
                                     bench_train.parse_backend(compiled)[0])
        steps[backend] = with_floor_cell(mixer, step) if base == FLOOR else step
    return steps


def emit(row: dict[str, Any], json_path: str | None, device: str) -> None:
    """Print ``row`` as JSON, append it to ``json_path`` (if given), and hand the finished
    case's memory back to the GPU before the next."""
    print(json.dumps(row), flush=True)
    if json_path:
        with open(json_path, "a") as f:
            f.write(json.dumps(row) + "\n")
    free_memory(device)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mixers", default="log,signed")
    p.add_argument("--shape", default="8,2048,512,4", help="B,T,d,layers")
    p.add_argument("--backends", default=",".join(BACKENDS),
                   help=f"train-step backends and {FLOOR}; ratios are to the first")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--steps", type=int, default=10, help="timed steps per round and backend")
    p.add_argument("--profile-steps", type=int, default=0,
                   help="then profile this many steps per backend: GPU-busy ms/step and its "
                        "split by op family (torch.profiler), and the loop's own ms/step")
    p.add_argument("--json", default=None, help="append one JSON line per mixer")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run (wall clock)")
    args = p.parse_args()
    shape = tuple(int(v) for v in args.shape.split(","))
    backends = tuple(args.backends.split(","))
    first = backends[0]
    B, T, d, L = shape
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"{gpu}; torch {torch.__version__}; B{B} T{T} d{d} L{L}, "
          "bf16 autocast, AdamW; ms/step: median over rounds of each round's median "
          f"({args.steps} steps, CUDA events); ratios: median of per-round ratios to "
          f"{first}", flush=True)
    for mixer in args.mixers.split(","):
        steps = make_steps(mixer, shape, args.device, backends)
        for step in steps.values():  # compiles, optimizer state
            for _ in range(3):
                step()
        times = paired_rounds(steps, args.rounds, lambda step: statistics.median(
            bench_train.time_steps(step, args.device, args.steps,
                                   wall=args.device != "cuda")[0]))
        base = times[first]
        row: dict[str, Any] = {"mixer": mixer, "shape": list(shape),
                               "gpu": gpu, "torch": torch.__version__}
        for backend in backends:
            row[f"{backend} ms"] = statistics.median(times[backend])
            row[f"{backend} / {first}"] = paired_ratio(times[backend], base)
        if args.profile_steps:
            for backend in backends:
                # One sync at each end: max(host, GPU) per step, against GPU-busy below.
                _, loop_ms = bench_train.time_steps(steps[backend], args.device,
                                                    args.profile_steps, wall=False)
                prof = bench_profile.profile_steps(steps[backend], args.device,
                                                   args.profile_steps)
                row[f"{backend} profile"] = {
                    "loop_ms_per_step": loop_ms,
                    **{key: prof.get(key) for key in ("busy_ms_per_step", "wall_ms_per_step",
                                                      "families_ms_per_step", "error")
                       if key in prof}}
        del steps
        emit(row, args.json, args.device)


if __name__ == "__main__":
    main()
