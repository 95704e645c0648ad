"""The blocks' LayerNorm on a CUDA GPU: PyTorch's ``nn.LayerNorm`` (and, under autocast, the
cast the next projection makes) against the fused kernel (``mingru.block.layer_norm`` on the
Triton path), forward and forward+backward, with each row's GPU-busy time from
``torch.profiler`` (host time excluded) and ``triton.testing.do_bench`` beside it.

The floor is the bytes moved at the copy bandwidth: the forward reads ``x`` and writes the
output in the output dtype; the backward reads ``x`` and ``dy`` and writes ``dx``.

    python3 benchmarks/layer_norm.py [--shapes 16384x512,8192x1024] [--json out.jsonl]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn
from triton.testing import do_bench

import mingru
from mingru.block import layer_norm
from mingru_cli.bench_profile import cuda_kernel_times

COPY_BANDWIDTH = 4.22e12  # bytes/s on an NVIDIA H200
SHAPES = ("16384x512", "16384x1024", "8192x4096")  # rows x features: B·T of the training steps


def _call(norm: nn.LayerNorm, x: torch.Tensor, fused: bool, autocast: bool, bwd: bool):
    def run() -> None:
        leaf = x.detach().requires_grad_(bwd)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast), \
                mingru.use_backend("triton" if fused else "eager"), torch.set_grad_enabled(bwd):
            y = layer_norm(norm, leaf)
            if autocast:
                y = y.to(torch.bfloat16)  # what the projection after the norm casts to
        if bwd:
            y.backward(torch.ones_like(y))

    return run


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--shapes", default=",".join(SHAPES))
    p.add_argument("--json", default=None, help="append one JSON line per row")
    args = p.parse_args()
    rows = []
    for shape in args.shapes.split(","):
        N, D = (int(v) for v in shape.split("x"))
        torch.manual_seed(0)
        norm = nn.LayerNorm(D).cuda()
        x = torch.randn(N, D, device="cuda") * 2 + 1
        for autocast in (False, True):
            out_bytes = 2 if autocast else 4
            for bwd in (False, True):
                moved = N * D * (4 + out_bytes + ((4 + out_bytes + 4) if bwd else 0))
                floor_ms = moved / COPY_BANDWIDTH * 1e3
                row = {"rows": N, "features": D, "autocast_bf16": autocast,
                       "mode": "fwd+bwd" if bwd else "fwd", "floor_ms": floor_ms}
                for name, fused in (("torch", False), ("fused", True)):
                    fn = _call(norm, x, fused, autocast, bwd)
                    busy = sum(cuda_kernel_times(fn, 20, warmup=5).values())
                    row[f"{name}_gpu_busy_ms"] = busy
                    row[f"{name}_do_bench_ms"] = do_bench(fn, warmup=10, rep=50,
                                                          return_mode="median")
                    row[f"{name}_pct_of_floor"] = round(100 * floor_ms / busy, 1)
                row["fused_speedup_gpu_busy"] = row["torch_gpu_busy_ms"] / row["fused_gpu_busy_ms"]
                print(json.dumps(row), flush=True)
                rows.append(row)
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
