"""Where the delta rule's GPU time goes, kernel by kernel, for ours and fla's.

Runs ``mingru.scans._delta_rule`` on the Triton kernels (and fla's ``chunk_delta_rule`` when
installed, one micro-step) under ``torch.profiler`` and prints, per shape and direction, the
CUDA time of every kernel summed over the profiled repeats, divided by the repeats: the time
of one call, split by kernel.

    python3 scripts/profile_delta.py [--shapes 128,1024,4,64 ...] [--dtype bfloat16] [--nh 1]
        [--variants "" "lp=64" "warps.fwd_prep=4;slice=32" ...] [--decay] [--no-fla] [--check]

``--check`` adds, per variant and shape, the forward output's error against the float64
eager twin (``max |o − o₆₄| / max |o₆₄|``, the tests' measure) and the forward's peak memory
above the inputs (MB): what a faster variant costs in accuracy and scratch.

``--decay`` adds a log-decay ``log γ = log(rand)`` per token and head; fla then runs
``chunk_gated_delta_product`` (its DeltaProduct, ``num_householder = nh``) instead of
``chunk_delta_rule``.

``--variants`` sweeps launch configurations: each is ``;``-separated overrides of
``mingru_kernels.launch.delta_rule.launch_config`` — ``lp=N`` (micro-steps per chunk),
``reg_state=0|1`` (the state kernels' product from registers), ``wu_in_state=0|1`` (the
state kernels form ``Wk`` and ``U`` from the saved WY inverse), ``state_vs=N`` (the state
kernels' columns per program), ``out_pass=0|1`` (the output formed by its own kernel,
parallel over chunks), ``tf32=1`` (the tensor-core tiling and precision of ``allow_tf32``), ``split=0|1``
(float32's split products, ``split_fp32``), ``half_ops=0|1`` (16-bit operands in the per-chunk kernels), ``state_half_ops=0|1`` (and in the state kernels), ``bwd_prep=0|1`` (the backward's parallel prep pass), ``fused_bwd=0|1`` (the backward in one launch), ``fused_fwd=0|1`` (the forward's walk and output pass in one launch),
``PREC=tf32x3`` (any ``tl.dot`` input precision), ``slice=N``
(``HALF_SLICE``: slice width of the per-chunk kernels and the state kernels' columns for
half inputs), ``warps.<kernel>=N``, ``stages.<kernel>=N``, ``<kernel>.<CONSTEXPR>=N`` (one kernel's
constexpr, e.g. ``bwd_grads.PREC=tf32x3;bwd_grads.KS=32``), ``<CONSTEXPR>=N`` (e.g. ``VS=32``: value columns
per slice and per state program) — applied to the forward and the backward alike; ``""`` (or ``default``) is the shipped default.
"""

from __future__ import annotations

import argparse
from collections import defaultdict

import torch
import torch.nn.functional as F

from mingru import dispatch
from mingru.scans import _delta_rule
from mingru_cli.bench_profile import cuda_kernel_times
from mingru_kernels.launch import delta_rule as meta


def _inputs(B: int, T: int, H: int, d: int, nh: int, dtype: torch.dtype):
    q = torch.randn(B, T, H, d, device="cuda", dtype=dtype)
    k = F.normalize(torch.randn(B, T, nh, H, d, device="cuda"), dim=-1).to(dtype)
    v = torch.randn(B, T, nh, H, d, device="cuda", dtype=dtype)
    beta = torch.rand(B, T, nh, H, device="cuda", dtype=dtype)
    return q, k, v, beta


def _ours(q, k, v, beta, lg=None):
    with dispatch.use_backend("triton"):
        return _delta_rule(q, k, v, beta, lg, None, 64)[0]


def _fla(q, k, v, beta, lg=None):
    if lg is None and k.shape[2] == 1:
        from fla.ops.delta_rule import chunk_delta_rule

        return chunk_delta_rule(q, k[:, :, 0], v[:, :, 0], beta[:, :, 0], scale=1.0)[0]
    from fla.ops.gated_delta_product import chunk_gated_delta_product

    B, T, nh, H, _ = k.shape  # a token's micro-steps consecutive along time, as in the bench
    g = q.new_zeros(B, T, H, dtype=torch.float32) if lg is None else lg.float()
    return chunk_gated_delta_product(q, k.reshape(B, T * nh, H, -1), v.reshape(B, T * nh, H, -1),
                                     g, beta.reshape(B, T * nh, H), num_householder=nh,
                                     scale=1.0)[0]


_SHIPPED = meta.launch_config
_SHIPPED_SLICE = meta.HALF_SLICE


_ON_OFF = {"reg_state": "reg_state", "wu_in_state": "wu_in_state", "out_pass": "out_pass",
           "wu_half": "wu_half", "saved_tm": "saved_tm", "tf32": "tf32", "split": "split_fp32",
           "half_ops": "half_ops", "state_half_ops": "state_half_ops", "bwd_prep": "bwd_prep",
           "fused_bwd": "fused_bwd", "fused_fwd": "fused_fwd"}
"""The variants' ``name=0|1`` keys and the ``launch_config`` keyword each forces."""


def _apply(variant: str) -> None:
    """Route ``meta.launch_config`` (read at every call, forward and backward) through the
    variant's overrides."""
    items = dict(kv.split("=") for kv in variant.split(";") if kv and kv != "default")
    meta.HALF_SLICE = int(items.pop("slice", _SHIPPED_SLICE))
    lp = int(items.pop("lp", 0))

    # The variant's on/off choices (its alias -> launch_config's keyword) win over the caller's.
    forced = {name: items.pop(alias) == "1" for alias, name in _ON_OFF.items() if alias in items}
    svs = int(items.pop("state_vs", 0))

    def patched(nh, dk, dv, **kwargs):
        kwargs["micro_chunk"] = kwargs.get("micro_chunk", 0) or lp
        kwargs["state_vs"] = kwargs.get("state_vs", 0) or svs
        cfg = _SHIPPED(nh, dk, dv, **{**kwargs, **forced})
        for key, val in items.items():
            if "." in key and key.split(".")[0] in ("warps", "stages"):
                table, kernel = key.split(".")
                cfg[table] = {**cfg[table], kernel: int(val)}
            elif "." in key:  # <kernel>.<CONSTEXPR>: that kernel's constexpr only
                kernel, name = key.split(".")
                one = {**cfg["overrides"].get(kernel, {}), name: val if name == "PREC" else int(val)}
                cfg["overrides"] = {**cfg["overrides"], kernel: one}
            elif key == "VS":  # no wider than the head's padded columns
                cfg[key] = min(int(val), cfg["BV"])
            elif key == "PREC":  # a dot precision: tf32, tf32x3, ieee
                cfg[key] = val
            else:  # a constexpr of every kernel
                cfg[key] = int(val)
        return cfg

    meta.launch_config = patched


def _table(fn, variant: str, args, bwd: bool, repeats: int) -> dict[str, float]:
    def once():
        _apply(variant)
        xs = [a if a is None else a.detach().requires_grad_(bwd) for a in args]
        o = fn(*xs)
        if bwd:
            o.float().sum().backward()

    times: dict[str, float] = defaultdict(float)
    for name, ms in cuda_kernel_times(once, repeats, warmup=3).items():
        times[name[:60]] += ms
    return dict(times)


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return float((x.double() - ref).abs().max() / ref.abs().max())


def _check(fn, variant: str, args, reference: tuple) -> str:
    """The forward's error against the float64 output, its peak memory above the inputs, and
    the largest error of the gradients (q, k, v, β, log γ) against the float64 ones."""
    out64, grads64, cotangent = reference
    _apply(variant)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    o = fn(*args)
    torch.cuda.synchronize()
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20
    if o.shape != out64.shape:
        return f"output {tuple(o.shape)} is not the reference's {tuple(out64.shape)}"
    line = f"err vs f64 {_rel(o, out64):.3g}, fwd peak {peak:.0f} MB"
    if grads64 is None:
        return line
    xs = [x.detach().requires_grad_() for x in args if x is not None]
    try:
        grads = torch.autograd.grad(fn(*xs, *[None] * (len(args) - len(xs))), xs,
                                    cotangent.to(o.dtype))
    except RuntimeError as err:  # fla refuses some backwards on some Tritons
        return line + f", grads refused: {str(err).splitlines()[0][:80]}"
    return line + f", grads err vs f64 {max(map(_rel, grads, grads64)):.3g}"


def _float64_reference(xs, grads: bool) -> tuple:
    """The float64 eager output, and with ``grads`` the float64 gradients for a fixed random
    cotangent (the same one every variant's backward receives)."""
    from mingru._eager.delta_rule import delta_rule_eager

    xs64 = [x.double().requires_grad_(grads) for x in xs if x is not None]
    lg = xs64[4] if len(xs64) == 5 else None
    out = delta_rule_eager(*xs64[:4], lg, None, 64)[0]
    if not grads:
        return out.detach(), None, None
    cotangent = torch.randn_like(out)
    return out.detach(), torch.autograd.grad(out, xs64, cotangent), cotangent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["128,1024,4,64", "128,1024,4,16"],
                    help="B,T,H,d per shape")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--nh", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--variants", nargs="*", default=[""], help="launch overrides (see above)")
    ap.add_argument("--decay", action="store_true", help="a log-decay per token and head")
    ap.add_argument("--no-fla", action="store_true")
    ap.add_argument("--check", action="store_true",
                    help="each variant's error vs float64 and forward peak memory")
    ap.add_argument("--check-grads", action="store_true",
                    help="with --check: also the gradients' largest error vs float64")
    ap.add_argument("--once", action="store_true",
                    help="one forward+backward per variant and shape, no profiler and no fla "
                         "(to run under compute-sanitizer)")
    args = ap.parse_args()
    dtype = getattr(torch, args.dtype)
    runners = {}
    for variant in args.variants:
        runners[f"ours({variant or 'default'})"] = (_ours, variant)
    try:
        import fla  # noqa: F401

        if dtype != torch.float32 and not args.no_fla and (args.nh == 1 or args.decay):
            runners["fla"] = (_fla, "")
    except ImportError:
        pass
    for shape in args.shapes:
        B, T, H, d = (int(x) for x in shape.split(","))
        xs = (*_inputs(B, T, H, d, args.nh, dtype),
              torch.rand(B, T, H, device="cuda").clamp_min(1e-3).log().to(dtype)
              if args.decay else None)
        if args.once:
            for variant in args.variants:
                _apply(variant)
                leaves = [x if x is None else x.detach().requires_grad_() for x in xs]
                _ours(*leaves).float().sum().backward()
                torch.cuda.synchronize()
                print(f"ours({variant or 'default'}) B{B} T{T} H{H} d{d} nh{args.nh}"
                      f"{' decay' * args.decay} {args.dtype}: forward and backward ran")
            continue
        if args.check:
            reference = _float64_reference(xs, args.check_grads)
            for name, (fn, variant) in runners.items():
                print(f"\n{name} B{B} T{T} H{H} d{d} nh{args.nh}{' decay' * args.decay} "
                      f"{args.dtype} check: {_check(fn, variant, xs, reference)}")
            del reference
        for bwd in (False, True):
            for name, (fn, variant) in runners.items():
                try:
                    t = _table(fn, variant, xs, bwd, args.repeats)
                except RuntimeError as err:  # fla refuses some backwards on some Tritons
                    print(f"\n{name} B{B} T{T} {'fwd+bwd' if bwd else 'fwd'}: refused: "
                          f"{str(err).splitlines()[0][:120]}")
                    continue
                total = sum(t.values())
                print(f"\n{name} B{B} T{T} H{H} d{d} nh{args.nh}{' decay' * args.decay} "
                      f"{args.dtype} "
                      f"{'fwd+bwd' if bwd else 'fwd'}: {total:.3f} ms GPU-busy")
                for k_, ms in sorted(t.items(), key=lambda kv: -kv[1]):
                    print(f"  {ms:8.3f} ms  {100 * ms / total:5.1f} %  {k_}")


if __name__ == "__main__":
    main()
