"""How much of a mixer's forward+backward any cell kernel can remove: MinGRU and SignedMinGRU
compiled with their cell replaced by its memory floor, against the real mixers.

The fused-cell issue asks the two mixers' fwd+bwd (``.float().sum().backward()``, as the
``mixers`` group of ``mingru bench`` times it) on the Triton path to take at most 0.65× the
time of ``torch.compile`` of the eager mixer in fp32 and 0.5× under bf16 autocast, and 0.6× the
peer-built mixer. A mixer is one projection GEMM and the cell; ``compile(floor)`` keeps the
GEMM and replaces the cell by :func:`train_step_paired.floor_cell` (``σ(k_z)·k_h``, no
recurrence: the cell's bytes at the copy bandwidth), which inductor fuses into one kernel per
direction. Its time over ``compile(eager)``'s (or the peer's) is the lowest ratio a cell kernel
can reach: what is left is the GEMM's.

Rows: ``compile(eager)``, ``compile(floor)``, ``triton`` (the library's default on CUDA), the
peer (fla's ``chunk_hgrn`` for MinGRU, accelerated-scan for SignedMinGRU, when installed);
each timed with ``triton.testing.do_bench`` (median), in ``--rounds`` alternating rounds;
ratios are medians of per-round ratios.

    python3 benchmarks/mixer_floor.py [--mixers log,signed] [--shapes 16x4096x256,8x2048x1024]
        [--precisions fp32,bf16] [--rounds 3] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable
from typing import Any

import torch
from train_step_paired import emit, with_floor_cell

from mingru_cli import bench_mixers
from mingru_cli.bench_common import fwd_bwd, paired_ratio, paired_rounds, time_call

FLOOR = "compile(floor)"
PEERS = {"log": ("fla", bench_mixers.FlaMinGRU), "signed": ("accelerated_scan",
                                                           bench_mixers.AccelSignedMinGRU)}


def runners(mixer: str, module: torch.nn.Module, x: torch.Tensor, precision: str,
            device: str) -> dict[str, Callable[[], None]]:
    """The timed fwd+bwd call of every row (the floor's compiled and run with the stand-in)."""
    calls: dict[str, Callable[[], None]] = {}
    for backend in ("compile(eager)", FLOOR, "triton"):
        compiled = "compile(eager)" if backend == FLOOR else backend
        call = fwd_bwd(bench_mixers._runner(compiled, module, precision, device), (x,), module)
        calls[backend] = with_floor_cell(mixer, call) if backend == FLOOR else call
    name, peer_cls = PEERS[mixer]
    try:
        peer = peer_cls(module)
        calls[name] = fwd_bwd(bench_mixers._runner(name, peer, precision, device), (x,), module)
        calls[name]()
    except Exception as exc:  # a peer not installed here: its row is left out
        print(f"# {name}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
        calls.pop(name, None)
    return calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mixers", default="log,signed")
    p.add_argument("--shapes", default="16x4096x256,8x2048x1024", help="BxTxd,...")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--json", default=None, help="append one JSON line per row")
    p.add_argument("--device", default="cuda", help="cuda, or cpu for a smoke run")
    args = p.parse_args()
    gpu = torch.cuda.get_device_name() if args.device == "cuda" else args.device
    print(f"{gpu}; torch {torch.__version__}; fwd+bwd ms "
          "(do_bench median), ratios: medians of per-round ratios", flush=True)
    for shape in args.shapes.split(","):
        B, T, d = (int(v) for v in shape.split("x"))
        for mixer in args.mixers.split(","):
            module = bench_mixers.build(mixer, d, args.device)
            g = torch.Generator().manual_seed(1)
            x = torch.randn(B, T, d, generator=g).to(args.device).requires_grad_()
            for precision in args.precisions.split(","):
                calls = runners(mixer, module, x, precision, args.device)
                for call in calls.values():  # compiles
                    call()
                times = paired_rounds(calls, args.rounds,
                                      lambda call: time_call(call, args.device, 3, 20))
                row: dict[str, Any] = {"mixer": mixer, "shape": shape, "precision": precision,
                                       "gpu": gpu,
                                       "torch": torch.__version__}
                for backend, ts in times.items():
                    row[f"{backend} ms"] = statistics.median(ts)
                for base in ("compile(eager)", PEERS[mixer][0]):
                    if base not in times:
                        continue
                    for backend in (FLOOR, "triton"):
                        row[f"{backend} / {base}"] = paired_ratio(times[backend], times[base])
                del calls
                emit(row, args.json, args.device)
            del module, x


if __name__ == "__main__":
    main()
