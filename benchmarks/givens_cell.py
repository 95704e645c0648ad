"""GivensMinGRU on a CUDA GPU with its fused cell (``mingru.cells.givens_cell``: the angles and
gates read from the one projection in place, ``σ(k_z) ⊙ k_h`` in the kernel, the projection's
gradient written in place) against the plain form (the gate math and the angle copy around the
Givens recurrence kernel, as before the cell), forward and forward+backward, fp32 and bf16
autocast: ``triton.testing.do_bench`` medians and each row's GPU-busy time from
``torch.profiler``.

    python3 benchmarks/givens_cell.py [--shapes 16x4096x256,8x2048x1024] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import contextlib
import json

import torch
from triton.testing import do_bench

import mingru
from mingru.mixers.givens import BlockRotationBase
from mingru_cli.bench_profile import cuda_kernel_times

SHAPES = ("16x4096x256", "8x2048x1024")  # B x T x d: the mixer benchmark's shapes


@contextlib.contextmanager
def _plain():
    """GivensMinGRU's forward without the fused cell (the base class's hook declines)."""
    saved = mingru.GivensMinGRU._cell_states
    mingru.GivensMinGRU._cell_states = BlockRotationBase._cell_states
    try:
        yield
    finally:
        mingru.GivensMinGRU._cell_states = saved


def _step(m, x, bf16: bool, bwd: bool):
    def run() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16), \
                torch.set_grad_enabled(bwd), mingru.use_backend("triton"):
            h = m(x)
        if bwd:
            h.float().sum().backward()

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", default=",".join(SHAPES))
    parser.add_argument("--json", default=None, help="append one JSON line per row")
    args = parser.parse_args()
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}")
    for shape in args.shapes.split(","):
        B, T, d = (int(v) for v in shape.split("x"))
        m = mingru.GivensMinGRU(d, d, block_size=8, rounds=3).cuda()
        x = torch.randn(B, T, d, device="cuda")
        for bf16 in (False, True):
            for bwd in (False, True):
                row = {"shape": shape, "precision": "bf16" if bf16 else "fp32",
                       "mode": "fwd+bwd" if bwd else "fwd"}
                for name, ctx in (("cell", contextlib.nullcontext), ("plain", _plain)):
                    with ctx():
                        fn = _step(m, x, bf16, bwd)
                        row[f"{name}_ms"] = do_bench(fn, warmup=10, rep=50)
                        row[f"{name}_busy_ms"] = sum(cuda_kernel_times(fn, calls=5).values())
                row["plain / cell"] = row["plain_ms"] / row["cell_ms"]
                print("  ".join(f"{k} {v:.3f}" if isinstance(v, float) else f"{k} {v}"
                                for k, v in row.items()), flush=True)
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
