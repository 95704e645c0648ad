"""Where one mixer's fwd+bwd time goes, per backend (a diagnosis tool for a CUDA machine).

For each backend of the ``mixers`` bench group it times the call the group times (``do_bench``
median), then lists the device time per call of every CUDA kernel (``torch.profiler``, kernel
durations only) by op family and the top kernels by name:

    python3 scripts/profile_mixer.py --mixer delta --precision fp32 \
        --backends triton,compile(eager) [--shape 16,4096,256] [--mode fwd+bwd] [--top 15]
"""

from __future__ import annotations

import argparse

import torch

from mingru_cli import bench_mixers, bench_profile
from mingru_cli.bench_common import fwd, fwd_bwd, time_call


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--mixer", default="delta")
    p.add_argument("--precision", default="fp32", choices=("fp32", "bf16"))
    p.add_argument("--backends", default="triton,compile(eager)")
    p.add_argument("--shape", default="16,4096,256", help="B,T,d")
    p.add_argument("--mode", default="fwd+bwd", choices=("fwd", "fwd+bwd"))
    p.add_argument("--calls", type=int, default=10)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    B, T, d = map(int, args.shape.split(","))
    for backend in args.backends.split(","):
        module = bench_mixers.build(args.mixer, d, "cuda")
        x = torch.randn(B, T, d, device="cuda", requires_grad=args.mode == "fwd+bwd")
        run = bench_mixers._runner(backend, module, args.precision, "cuda")
        call = fwd(run, (x,)) if args.mode == "fwd" else fwd_bwd(run, (x,), module)
        call()
        torch.cuda.synchronize()
        ms = time_call(call, "cuda", 3, 20)
        kernels = bench_profile.cuda_kernel_times(call, args.calls)
        busy = sum(kernels.values())
        families: dict[str, float] = {}
        for name, t in kernels.items():
            family = bench_profile.classify(name)
            families[family] = families.get(family, 0.0) + t
        print(f"== {args.mixer} {args.precision} {args.mode} B{B} T{T} d{d} {backend}: "
              f"{ms:.3f} ms do_bench, kernels {busy:.3f} ms per call")
        print("   families: " + ", ".join(f"{f} {t:.3f}" for f, t in
                                          sorted(families.items(), key=lambda kv: -kv[1])))
        for name, t in sorted(kernels.items(), key=lambda kv: -kv[1])[:args.top]:
            print(f"   {t:8.3f} ms  {bench_profile.classify(name):22s} {name[:110]}")
        del module, x, run, call
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
