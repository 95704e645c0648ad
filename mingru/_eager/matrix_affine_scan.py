"""Eager block-matrix affine scan ``H_t = A_t H_{t-1} + B_t`` with an adjoint backward.

``A (B, T, n, k, k)``, ``B (B, T, n, k, v)``. Forward: the odd–even scan with ``matmul`` as
the product (``P_t = A_t ⋯ A_1``). Backward: the adjoints ``G_t = dZ_t + A_{t+1}ᵀ G_{t+1}``
and ``GP_t = dP_t + A_{t+1}ᵀ GP_{t+1}`` are one reversed scan over ``[dZ | dP]`` (``v + k``
columns); then ``dA_t = G_t Z_{t-1}ᵀ + GP_t P_{t-1}ᵀ`` (``Z_0 = 0``, ``P_0 = I``) and
``dB_t = G_t``. Only ``A``, ``P`` and ``Z`` are saved.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mingru._eager._odd_even import (
    block_matrix,
    odd_even_scan,
    reverse_scan,
    shift_next,
    shift_prev,
)


class _MatrixAffineScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, A: torch.Tensor, Bm: torch.Tensor):
        P, Z = odd_even_scan(A, Bm, block_matrix)
        ctx.save_for_backward(A, P, Z)
        ctx.set_materialize_grads(value=False)
        return P, Z

    @staticmethod
    @once_differentiable
    def backward(ctx, dP, dZ):
        A, P, Z = ctx.saved_tensors
        v = Z.shape[-1]
        dZ = torch.zeros_like(Z) if dZ is None else dZ
        dP = torch.zeros_like(P) if dP is None else dP
        At_next = shift_next(A.transpose(-1, -2), 0.0)
        G = reverse_scan(At_next, torch.cat([dZ, dP], dim=-1), block_matrix)
        eye = torch.eye(A.shape[-1], dtype=A.dtype, device=A.device)
        Z_prev = shift_prev(Z, torch.zeros_like(Z[:, :1]))
        P_prev = shift_prev(P, eye)
        dA = G[..., :v] @ Z_prev.transpose(-1, -2) + G[..., v:] @ P_prev.transpose(-1, -2)
        return dA, G[..., :v]


def matrix_affine_scan_eager(
    A: torch.Tensor, Bm: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Z)`` for ``H_t = A_t H_{t-1} + B_t``; shapes ``(B,T,n,k,k)`` and ``(B,T,n,k,v)``."""
    return _MatrixAffineScan.apply(A, Bm)
