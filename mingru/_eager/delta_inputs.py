"""Eager twin of the ``delta_inputs`` kernel op: the delta-rule mixer's ``q``, L2-normalised
``k``, ``v`` and ``β = 2σ(·)`` from its one projection."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["delta_inputs"]


def delta_inputs(p: torch.Tensor, n_heads: int, nh: int, d_k: int, d_v: int, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Split ``p (..., W)`` with ``W = H·d_k + nh·H·(d_k + d_v + 1)`` (columns
    ``[q | k | v | β-logits]``) into ``q (..., H, d_k)``, ``k (..., nh, H, d_k)`` normalised
    per head (``k / max(‖k‖, eps)``), ``v (..., nh, H, d_v)`` and ``β (..., nh, H)`` in
    ``(0, 2)``, all in ``p``'s dtype.

    Example:
        >>> import torch
        >>> q, k, v, beta = delta_inputs(torch.randn(2, 5, 2 * 4 + 2 * (4 + 3 + 1)),
        ...                              n_heads=2, nh=1, d_k=4, d_v=3, eps=1e-6)
        >>> q.shape, k.shape, v.shape, beta.shape
        (torch.Size([2, 5, 2, 4]), torch.Size([2, 5, 1, 2, 4]), torch.Size([2, 5, 1, 2, 3]), torch.Size([2, 5, 1, 2]))
    """
    lead = p.shape[:-1]
    H = n_heads
    q, k, v, beta = p.split([H * d_k, nh * H * d_k, nh * H * d_v, nh * H], dim=-1)
    k = F.normalize(k.reshape(*lead, nh, H, d_k), dim=-1, eps=eps)
    beta = 2.0 * torch.sigmoid(beta.reshape(*lead, nh, H))
    return (q.reshape(*lead, H, d_k), k.to(p.dtype), v.reshape(*lead, nh, H, d_v),
            beta.to(p.dtype))
