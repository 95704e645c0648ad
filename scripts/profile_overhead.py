"""Where a PyTorch-side scan call spends host time on a CUDA machine.

Times (wall clock per call, no sync inside the loop, one sync at the end) and cProfiles the
public ``mingru.linear_scan`` forward and forward+backward at the benchmark's small shapes,
next to a bare Triton launch, a trivial ``autograd.Function`` round trip and, if installed,
accelerated-scan. Host overhead is what the GPU cannot hide at these shapes: the kernels
themselves take a few microseconds.

    python3 scripts/profile_overhead.py [--op linear_scan] [--shape 16,1024,64]

``--stub-kernels`` runs on the host instead: Triton's interpreter route with every kernel
launch replaced by a no-op, so what is left is this library's own Python per call (checks,
plans, allocation, autograd), next to the same trivial ``autograd.Function``, the harness's own
sums and backward, and the launcher's pieces (outputs unpoisoned, as in production). No CUDA cost is
in it (allocator, launch binding, ATen's CUDA ops), and no result is computed.

    python3 scripts/profile_overhead.py --stub-kernels --shape 2,64,8
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

if "--stub-kernels" in sys.argv:  # before triton is imported: the interpreter's host route
    os.environ["TRITON_INTERPRET"] = "1"

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

import mingru  # noqa: E402
from mingru_cli.bench_common import paired_ratio, paired_rounds  # noqa: E402

_SYNC = [torch.cuda.synchronize]


def _sync() -> None:
    _SYNC[0]()


@triton.jit
def _noop_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


class _Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def wall_us(fn, n: int = 300, rounds: int = 5, warmup: int = 20) -> float:
    """Median over rounds of host wall time per call (sync only at the round's end), after
    ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    _sync()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            fn()
        _sync()
        out.append((time.perf_counter() - t) / n * 1e6)
    return statistics.median(out)


def profile(fn, n: int = 200, top: int = 25) -> str:
    for _ in range(10):
        fn()
    _sync()
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(n):
        fn()
    _sync()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(top)
    return s.getvalue()


class _Glue(torch.autograd.Function):
    """Two inputs, two outputs, the launcher's saves, no kernels: autograd's own cost."""

    @staticmethod
    def forward(ctx, a, b):
        P, Z = torch.empty_like(a), torch.empty_like(b)
        ctx.save_for_backward(a, P, Z)
        ctx.set_materialize_grads(False)
        return P, Z

    @staticmethod
    def backward(ctx, dP, dZ):
        a, _, _ = ctx.saved_tensors
        return torch.empty_like(a), torch.empty_like(a)


def _breakdown_rows(a, b, launcher, run_fwd_bwd, P0, Z0) -> dict:
    """Rows that split ``run_fwd_bwd`` (``launcher.run`` fwd+bwd) into its parts (see
    ``--breakdown``); ``(P0, Z0)`` is the launcher's forward of ``(a, b)``."""

    def harness_one():
        a.grad = None
        a.sum().backward()

    def glue():
        a.grad = b.grad = None
        P, Z = _Glue.apply(a, b)
        (P.sum() + Z.sum()).backward()

    def run_fwd_grad():  # the forward as autograd records it, no backward
        launcher.run(a, b)

    def in_thread(fn):
        def call():
            with torch.autograd.set_multithreading_enabled(False):
                fn()
        return call

    ones = torch.ones((), device=a.device)
    dP0, dZ0 = ones.expand(P0.shape), ones.expand(Z0.shape)
    return {"harness, one sum": harness_one,
            "Function glue (empty_like body)": glue,
            "Function glue, backward in-thread": in_thread(glue),
            "harness, backward in-thread": in_thread(harness_one),
            "run() forward, grad recorded": run_fwd_grad,
            "run() fwd+bwd, backward in-thread": in_thread(run_fwd_bwd),
            "_bwd_impl, expanded grads": lambda: launcher._bwd_impl(
                a.detach(), P0, Z0, dP0, dZ0)}


def _ab_cache(a, b, rounds: int = 21, n: int = 100) -> None:
    """Each op's fwd and fwd+bwd, alternating Triton's own launch path and the cached one
    round by round (the host's speed drifts between processes and over seconds; a paired
    ratio per round does not)."""
    import importlib

    launchers = [importlib.import_module(f"mingru._launch.{name}") for name in
                 ("linear_scan", "parallel_scan_log", "linear_recurrence")]
    cached = [launcher.kernels for launcher in launchers]

    def use(variant: str) -> None:
        for launcher, kernels in zip(launchers, cached, strict=True):
            launcher.kernels = kernels if variant == "cached" else kernels._module

    la = torch.log(a.detach()).requires_grad_()
    lv = torch.cat([b.detach()[:, :1], b.detach()], 1).requires_grad_()  # log h_0, log values

    def ops():
        yield "linear_scan", lambda: mingru.linear_scan(a, b)
        yield "parallel_scan_log", lambda: mingru.parallel_scan_log(la, lv)
        yield "linear_recurrence", lambda: mingru.linear_recurrence(a, b)

    def fwd(op):
        def call():
            with torch.no_grad(), mingru.use_backend("triton"):
                op()
        return call

    def fwd_bwd(op):
        def call():
            a.grad = b.grad = la.grad = lv.grad = None
            with mingru.use_backend("triton"):
                out = op()
            out = out if isinstance(out, tuple) else (out,)
            sum(o.sum() for o in out).backward()
        return call

    print(f"interleaved A/B, {rounds} rounds of {n} calls; us per call, medians; "
          "ratio = cached / Triton's path, median of per-round ratios")
    for name, op in ops():
        for mode, fn in (("fwd", fwd(op)), ("fwd+bwd", fwd_bwd(op))):
            for variant in ("triton", "cached"):
                use(variant)
                wall_us(fn, n=20, rounds=1)  # warm-up (first launches compile or bind)

            def measure(variant, fn=fn):
                use(variant)
                return wall_us(fn, n=n, rounds=1, warmup=0)

            times = paired_rounds({"triton": "triton", "cached": "cached"}, rounds, measure)
            ratio = paired_ratio(times["cached"], times["triton"])
            print(f"  {name:18s} {mode:8s} triton path {statistics.median(times['triton']):7.1f}"
                  f"  cached {statistics.median(times['cached']):7.1f}  ratio {ratio:.3f}")
    use("cached")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--shape", default="16,1024,64")
    p.add_argument("--profile", action="store_true", help="cProfile forward and fwd+bwd")
    p.add_argument("--torch-profile", action="store_true",
                   help="torch.profiler table (CPU and CUDA time per op) of fwd+bwd")
    p.add_argument("--breakdown", action="store_true",
                   help="split fwd+bwd into harness, autograd glue, kernels and the backward "
                        "thread (single-threaded engine), and cProfile the backward in-thread")
    p.add_argument("--ab-cache", action="store_true",
                   help="interleaved A/B of Triton's own launch path against the cached "
                        "launches (mingru._launch._cached_launch) for three public ops")
    p.add_argument("--stub-kernels", action="store_true",
                   help="on the host, every kernel launch a no-op (see the module docstring)")
    args = p.parse_args()
    B, T, D = map(int, args.shape.split(","))
    from mingru._launch import linear_scan as _registers_ops  # noqa: F401
    dev = "cuda"
    if args.stub_kernels:
        from triton.runtime import interpreter

        interpreter.InterpretedFunction.run = lambda self, *a, **k: None
        dev = "cpu"
        _SYNC[0] = lambda: None
    g = torch.Generator().manual_seed(0)
    a = torch.rand(B, T, D, generator=g).to(dev).requires_grad_()
    b = torch.randn(B, T, D, generator=g).to(dev).requires_grad_()
    x = torch.randn(1024, device=dev)

    def launch():
        _noop_kernel[(1,)](x, 1024, BLOCK=1024)

    def fwd():
        with torch.no_grad(), mingru.use_backend("triton"):
            mingru.linear_scan(a, b)

    def fwd_bwd():
        a.grad = b.grad = None
        with mingru.use_backend("triton"):
            P, Z = mingru.linear_scan(a, b)
        (P.sum() + Z.sum()).backward()

    def fwd_bwd_z():
        a.grad = b.grad = None
        with mingru.use_backend("triton"):
            _, Z = mingru.linear_scan(a, b)
        Z.sum().backward()

    def twice():
        a.grad = None
        _Twice.apply(a).sum().backward()

    op = torch.ops.mingru.linear_scan_fwd  # the torch.library op torch.compile traces

    def op_fwd():
        with torch.no_grad():
            op(a, b)

    def op_fwd_bwd():
        a.grad = b.grad = None
        P, Z = op(a, b)
        (P.sum() + Z.sum()).backward()

    from mingru_kernels.launch import switches

    def chunked(fn):
        def call():
            with switches.forced("linear_scan", strategy="chunked"):
                fn()
        return call

    rows = {"bare triton launch": launch, "autograd.Function x*2 fwd+bwd": twice,
            "linear_scan fwd": fwd, "linear_scan fwd+bwd (P,Z)": fwd_bwd,
            "linear_scan fwd+bwd (Z only)": fwd_bwd_z,
            "custom op directly, fwd": op_fwd, "custom op directly, fwd+bwd": op_fwd_bwd,
            "linear_scan fwd, chunked plan": chunked(fwd),
            "linear_scan fwd+bwd, chunked plan": chunked(fwd_bwd)}
    from mingru._launch import linear_scan as launcher

    def harness():  # the fwd+bwd rows' own cost: two sums and a backward, no op
        a.grad = b.grad = None
        (a.sum() + b.sum()).backward()

    def run_fwd_bwd():  # the launcher's entry, without the public checks and dispatch
        a.grad = b.grad = None
        P, Z = launcher.run(a, b)
        (P.sum() + Z.sum()).backward()

    P0, Z0 = launcher._fwd_impl(a.detach(), b.detach())
    dP0, dZ0 = torch.ones_like(P0), torch.ones_like(Z0)
    rows.update({"harness only (sums + backward)": harness,
                 "launcher run() fwd+bwd": run_fwd_bwd,
                 "_fwd_impl alone": lambda: launcher._fwd_impl(a.detach(), b.detach()),
                 "_bwd_impl alone": lambda: launcher._bwd_impl(a.detach(), P0, Z0, dP0, dZ0)})
    if args.breakdown:
        rows.update(_breakdown_rows(a, b, launcher, run_fwd_bwd, P0, Z0))
    if args.ab_cache:
        _ab_cache(a, b)
        return
    try:
        if args.stub_kernels:
            raise RuntimeError("not with --stub-kernels")
        from accelerated_scan.scalar import scan as acc_scan

        ga = a.detach().transpose(1, 2).contiguous().requires_grad_()
        gb = b.detach().transpose(1, 2).contiguous().requires_grad_()

        def acc():
            ga.grad = gb.grad = None
            acc_scan(ga, gb).sum().backward()

        def acc_f():
            with torch.no_grad():
                acc_scan(ga, gb)

        rows["accelerated_scan fwd"] = acc_f
        rows["accelerated_scan fwd+bwd"] = acc
    except Exception as exc:  # optional peer
        print("accelerated_scan unavailable:", exc)
    print(f"host wall time per call, B{B} T{T} D{D}, fp32 (torch {torch.__version__}, "
          f"triton {triton.__version__}){', kernels stubbed on the host' if args.stub_kernels else ''}")
    # Production outputs are not NaN-poisoned; the interpreter's default poisoning (a
    # torch.full per output) would be counted otherwise.
    with switches.forced(poison=False):
        for name, fn in rows.items():
            print(f"  {name:34s} {wall_us(fn):8.1f} us")
    if args.torch_profile:
        from torch.profiler import ProfilerActivity
        from torch.profiler import profile as tprofile

        fn = rows["linear_scan fwd+bwd (P,Z)"]
        for _ in range(10):
            fn()
        _sync()
        with tprofile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(50):
                fn()
            _sync()
        print("\n==== torch.profiler: linear_scan fwd+bwd (P,Z), 50 calls")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))
    names = ["linear_scan fwd", "linear_scan fwd+bwd (P,Z)"]
    if args.breakdown:
        names.append("run() fwd+bwd, backward in-thread")
    if args.profile or args.breakdown:
        for name in names:
            print(f"\n==== cProfile: {name} (200 calls, by own time)")
            print(profile(rows[name]))


if __name__ == "__main__":
    main()
