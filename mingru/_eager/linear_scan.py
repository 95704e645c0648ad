"""Eager linear scan ``h_t = a_t h_{t-1} + b_t`` (diagonal, signed ``a``) with an adjoint backward.

Forward: the odd–even scan (``O(log T)`` depth, ``O(T)`` work). Backward: the adjoints
``G_t = dZ_t + a_{t+1} G_{t+1}`` and ``GP_t = dP_t + a_{t+1} GP_{t+1}`` are one reversed scan
over the stacked pair, so only ``a``, ``P`` and ``Z`` are saved. Then
``da_t = G_t Z_{t-1} + GP_t P_{t-1}`` (``Z_0 = 0``, ``P_0 = 1``) and ``db_t = G_t``.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mingru._eager._odd_even import diagonal, odd_even_scan, reverse_scan, shift_next, shift_prev


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor):
        P, Z = odd_even_scan(a, b, diagonal)
        ctx.save_for_backward(a, P, Z)
        ctx.set_materialize_grads(value=False)
        return P, Z

    @staticmethod
    @once_differentiable
    def backward(ctx, dP, dZ):
        a, P, Z = ctx.saved_tensors
        dZ = torch.zeros_like(Z) if dZ is None else dZ
        dP = torch.zeros_like(P) if dP is None else dP
        G = reverse_scan(shift_next(a, 0.0)[..., None], torch.stack([dZ, dP], dim=-1), diagonal)
        Z_prev = shift_prev(Z, torch.zeros_like(Z[:, :1]))
        P_prev = shift_prev(P, torch.ones_like(P[:, :1]))
        da = G[..., 0] * Z_prev + G[..., 1] * P_prev
        return da, G[..., 0]


def linear_scan_eager(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Z)`` for ``h_t = a_t h_{t-1} + b_t``; ``a, b`` are ``(B, T, D)`` of one float dtype."""
    return _LinearScan.apply(a, b)
