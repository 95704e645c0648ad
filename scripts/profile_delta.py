"""Where the delta rule's GPU time goes, kernel by kernel, for ours and fla's.

Runs ``mingru.scans._delta_rule`` on the Triton kernels (and fla's ``chunk_delta_rule`` when
installed, one micro-step) under ``torch.profiler`` and prints, per shape and direction, the
CUDA time of every kernel summed over the profiled repeats, divided by the repeats: the time
of one call, split by kernel.

    python3 scripts/profile_delta.py [--shapes 128,1024,4,64 ...] [--dtype bfloat16] [--nh 1]
        [--half-slice 32,64] [--no-fla]

``--half-slice`` sweeps ``mingru_kernels.launch.delta_rule.HALF_SLICE`` (the slice width of
the per-chunk kernels and the state kernels' columns for half inputs) over the given values.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F
from torch.profiler import ProfilerActivity, profile

from mingru import dispatch
from mingru.scans import _delta_rule
from mingru_kernels.launch import delta_rule as meta


def _inputs(B: int, T: int, H: int, d: int, nh: int, dtype: torch.dtype):
    q = torch.randn(B, T, H, d, device="cuda", dtype=dtype)
    k = F.normalize(torch.randn(B, T, nh, H, d, device="cuda"), dim=-1).to(dtype)
    v = torch.randn(B, T, nh, H, d, device="cuda", dtype=dtype)
    beta = torch.rand(B, T, nh, H, device="cuda", dtype=dtype)
    return q, k, v, beta


def _ours(q, k, v, beta):
    with dispatch.use_backend("triton"):
        return _delta_rule(q, k, v, beta, None, None, 64)[0]


def _fla(q, k, v, beta):
    from fla.ops.delta_rule import chunk_delta_rule

    return chunk_delta_rule(q, k[:, :, 0], v[:, :, 0], beta[:, :, 0], scale=1.0)[0]


def _table(fn, width: int, args, bwd: bool, repeats: int) -> dict[str, float]:
    def once():
        meta.HALF_SLICE = width  # read by launch_config in the forward and the backward
        xs = [a.detach().requires_grad_(bwd) for a in args]
        o = fn(*xs)
        if bwd:
            o.float().sum().backward()

    for _ in range(3):
        once()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            once()
        torch.cuda.synchronize()
    times: dict[str, float] = defaultdict(float)
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name[:60]] += ev.device_time / repeats / 1000.0
    return dict(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["128,1024,4,64", "128,1024,4,16"],
                    help="B,T,H,d per shape")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--nh", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--half-slice", default="", help="comma-separated HALF_SLICE values")
    ap.add_argument("--no-fla", action="store_true")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    runners = {}
    for width in [int(w) for w in args.half_slice.split(",") if w] or [meta.HALF_SLICE]:
        runners[f"ours(slice {width})"] = (_ours, width)
    try:
        import fla  # noqa: F401

        if args.nh == 1 and dtype != torch.float32 and not args.no_fla:
            runners["fla"] = (_fla, meta.HALF_SLICE)
    except ImportError:
        pass
    for shape in args.shapes:
        B, T, H, d = (int(x) for x in shape.split(","))
        xs = _inputs(B, T, H, d, args.nh, dtype)
        for bwd in (False, True):
            for name, (fn, width) in runners.items():
                t = _table(fn, width, xs, bwd, args.repeats)
                total = sum(t.values())
                print(f"\n{name} B{B} T{T} H{H} d{d} nh{args.nh} {args.dtype} "
                      f"{'fwd+bwd' if bwd else 'fwd'}: {total:.3f} ms GPU-busy")
                for k_, ms in sorted(t.items(), key=lambda kv: -kv[1]):
                    print(f"  {ms:8.3f} ms  {100 * ms / total:5.1f} %  {k_}")


if __name__ == "__main__":
    main()
