"""The delta rule's benchmark pieces for ``gpu-delta`` and ``gpu-fused``: its nominal FLOPs,
its least HBM traffic and the FLOP/s ceilings (the rows' compute and memory floors), and the
fla peers built on the same inputs. Peers are a dozen lines each, here, not in the library.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch

from mingru_cli.bench_cases import Runner, Tensors

__all__ = ["PEAK_FLOPS", "delta_rule_bytes", "delta_rule_flops", "float64_output",
           "peer_delta_runners"]


def float64_output(make: Callable[[bool], Tensors]) -> Callable[[], torch.Tensor]:
    """The float64 output ``o`` of the delta rule on the case's inputs (the eager chunked
    form, computed once on first use): what every backend's error column is measured
    against, fla's included (same inputs, same ``o`` layout)."""
    from mingru._eager.delta_rule import delta_rule_eager

    @functools.cache
    def reference() -> torch.Tensor:
        xs = [x.detach().double() for x in make(False)]
        q, k, v, beta, *lg = xs
        return delta_rule_eager(q, k, v, beta, lg[0] if lg else None, None, 64)[0]

    return reference


def delta_rule_flops(B: int, T: int, heads: int, nh: int, dk: int, dv: int) -> dict[str, float]:
    """Nominal FLOPs of the delta rule, counted on its recurrent form: per token, head and
    micro-step ``kᵀH`` and the rank-1 update (``4·d_k·d_v``), plus the read-out ``qᵀH``
    (``2·d_k·d_v``) per token and head; backward counted as twice the forward. The chunked
    kernels do more arithmetic than this (intra-chunk products), so TFLOP/s on this count is
    the *useful* rate."""
    fwd = float(B * T * heads * (4 * nh + 2) * dk * dv)
    return {"fwd": fwd, "fwd+bwd": 3 * fwd}


def delta_rule_bytes(B: int, T: int, heads: int, nh: int, dk: int, dv: int,
                     dtype: torch.dtype, decay: bool = False) -> dict[str, float]:
    """Least HBM traffic of the delta rule: the forward reads ``q, k, v, β`` (and ``log γ``)
    and writes ``o``; the backward also reads ``dO`` and writes a gradient of each input
    (it re-reads the inputs: counted once more)."""
    size = torch.finfo(dtype).bits // 8
    inputs = B * T * heads * (dk + nh * (dk + dv + 1) + (1 if decay else 0)) * size
    out = B * T * heads * dv * size
    fwd = float(inputs + out)
    return {"fwd": fwd, "fwd+bwd": fwd + float(inputs + out + 2 * inputs)}


PEAK_FLOPS = {torch.float32: 67e12, torch.bfloat16: 790e12, torch.float16: 790e12}
"""FLOP/s ceilings on an H200: float32 on the FMA units (no tensor cores), and dense
bfloat16/float16 matrix products (measured)."""


def _fla_delta(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor) -> Tensors:
    from fla.ops.delta_rule import chunk_delta_rule

    o, _ = chunk_delta_rule(q, k, v, beta, scale=1.0)
    return (o,)


def _fla_delta_product(nh: int) -> Runner:
    def run(q, k, v, beta, g) -> Tensors:
        from fla.ops.gated_delta_product import chunk_gated_delta_product

        o, _ = chunk_gated_delta_product(q, k, v, g, beta, num_householder=nh, scale=1.0)
        return (o,)

    return run


def peer_delta_runners(make: Callable[[bool], Tensors], nh: int = 1,
                       decay: bool = False) -> dict[str, tuple[Callable, Runner]]:
    """fla on the same inputs, its layout prepared outside the timing: one micro-step without
    decay on ``chunk_delta_rule`` (the ``nh`` axis dropped); otherwise its DeltaProduct,
    ``chunk_gated_delta_product`` (``num_householder = nh``, the micro-steps of a token
    consecutive along time, ``log γ`` as its gate ``g``; zeros without decay)."""
    if nh == 1 and not decay:

        def fla_make(rg: bool) -> Tensors:
            q, k, v, beta = make(False)
            return tuple(x.contiguous().requires_grad_(rg)
                         for x in (q, k[:, :, 0], v[:, :, 0], beta[:, :, 0]))

        return {"fla": (fla_make, _fla_delta)}

    def fla_product_make(rg: bool) -> Tensors:
        q, k, v, beta, *lg = make(False)
        B, T, _, H, _ = k.shape
        g = lg[0] if lg else q.new_zeros(B, T, H)
        flat = (q, k.reshape(B, T * nh, H, -1), v.reshape(B, T * nh, H, -1),
                beta.reshape(B, T * nh, H), g.float())
        return tuple(x.contiguous().requires_grad_(rg) for x in flat)

    return {"fla": (fla_product_make, _fla_delta_product(nh))}
