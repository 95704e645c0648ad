"""The ``mingru bench`` flags, in pure Python (no torch), so ``mingru --help`` and
``mingru bench --help`` work with either framework alone. :mod:`mingru_cli.bench` runs them."""

from __future__ import annotations

import argparse

__all__ = ["add_arguments"]


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The ``mingru bench`` flags."""
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where to run (default: cuda if available, else cpu)")
    p.add_argument("--quick", action="store_true",
                   help="small shapes, few repeats, no torch.compile (a smoke run)")
    p.add_argument("--dtype", choices=("float32", "bfloat16", "float16"), default="float32")
    p.add_argument("--groups", default=None,
                   help="comma-separated groups to run (default: all for the device); "
                        "cpu: cpu-mixers,cpu-scans; cuda: gpu-scans,gpu-huge,gpu-fused,"
                        "gpu-delta,gpu-mixers,gpu-memory")
    p.add_argument("--ops", default=None,
                   help="comma-separated op or mixer names: run only the cases whose name "
                        "contains one of them (default: every case of the groups)")
    p.add_argument("--backends", default=None,
                   help="comma-separated backends (default: all that can run): "
                        "loop,eager,compile,triton,jax,jax-triton,accelerated_scan,fla")
    p.add_argument("--timer", choices=("events", "wall"), default="events",
                   help="on CUDA: 'events' times PyTorch with triton.testing.do_bench (JAX is "
                        "always timed by wall clock); 'wall' times every backend by wall clock "
                        "with a device sync per call, so PyTorch and JAX rows compare directly")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed repeats for wall-clock timing (median)")
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls on CPU")
    p.add_argument("--threads", type=int, default=None,
                   help="torch CPU threads (default: torch's default)")
    p.add_argument("--out", default="mingru-bench",
                   help="directory for bench.json, bench.md and bench.png (default ./mingru-bench)")
