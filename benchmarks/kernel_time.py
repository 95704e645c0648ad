"""Device time of the elementwise ops' own kernels, free of host time (a CUDA tool).

``triton.testing.do_bench`` brackets each call with CUDA events; where the host needs longer to
issue a call than the GPU needs to run it (short kernels, a slow host), the GPU idles inside
that bracket and the host time is counted as kernel time. This script sums the durations of the
kernels themselves from ``torch.profiler`` over many calls instead, so "% of floor" at small
shapes means the kernels' share.

    python3 benchmarks/kernel_time.py [--ops linear_recurrence,mingru_cell] [--shapes 16k,long]
"""

from __future__ import annotations

import argparse
import json

from memory_floor import SHAPES, floor_bytes, torch_inputs, torch_runner

from mingru_cli.bench_profile import cuda_kernel_times

OPS = ("parallel_scan_log", "linear_recurrence", "mingru_cell", "signed_mingru_cell")


def kernel_ms(fn, calls: int = 30) -> float:
    """Mean device milliseconds per call of every CUDA kernel ``fn`` launches."""
    return sum(cuda_kernel_times(fn, calls, warmup=5).values())


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--shapes", default="16k,long")
    p.add_argument("--modes", default="fwd,fwd+bwd")
    args = p.parse_args()
    import mingru

    for op in args.ops.split(","):
        for shape in args.shapes.split(","):
            B, T, D = SHAPES[shape]
            for mode in args.modes.split(","):
                xs = torch_inputs(op, B, T, D, mode != "fwd")
                with mingru.use_backend("triton"):
                    ms = kernel_ms(torch_runner(op, mode, xs))
                row = {"op": op, "shape": shape, "mode": mode, "kernel ms": round(ms, 4)}
                if mode == "fwd":
                    floor = floor_bytes(op, B, T, D) / 4.22e12 * 1e3
                    row["% of floor (4.22 TB/s)"] = round(100 * floor / ms, 1)
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
