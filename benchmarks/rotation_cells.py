"""GivensMinGRU and RotationMinGRU on a CUDA GPU with their fused cells
(``mingru.cells.givens_cell`` / ``rotation_cell``: the transition's and the gates'
pre-activations read from the one projection in place, the gate math in the kernel, the
projection's gradient written in place) against the plain form (the gate math and the column
copies around the Givens recurrence kernel, as before the cells), forward and forward+backward,
fp32 and bf16 autocast: ``triton.testing.do_bench`` medians and each row's GPU-busy time from
``torch.profiler``.

    python3 benchmarks/rotation_cells.py [--shapes 16x4096x256,8x2048x1024] [--json out.jsonl]
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
def _plain(cls):
    """``cls``'s forward without its fused cell (the base class's hook declines)."""
    saved = cls._cell_states
    cls._cell_states = BlockRotationBase._cell_states
    try:
        yield
    finally:
        cls._cell_states = saved


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
    mixers = {"givens": lambda d: mingru.GivensMinGRU(d, d, block_size=8, rounds=3),
              "rotation": lambda d: mingru.RotationMinGRU(d, d)}
    for shape in args.shapes.split(","):
        B, T, d = (int(v) for v in shape.split("x"))
        x = torch.randn(B, T, d, device="cuda")
        for mixer, build in mixers.items():
            m = build(d).cuda()
            for bf16, bwd in ((False, False), (False, True), (True, False), (True, True)):
                row = {"mixer": mixer, "shape": shape, "precision": "bf16" if bf16 else "fp32",
                       "mode": "fwd+bwd" if bwd else "fwd"}
                for name, ctx in (("cell", contextlib.nullcontext()), ("plain", _plain(type(m)))):
                    with ctx:
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
