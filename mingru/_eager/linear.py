"""Eager twin of the ``linear`` kernel op: a decode step's GEMM, optionally followed by GELU."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["linear"]


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
           *, gelu: bool = False) -> torch.Tensor:
    """``x Wᵀ + b`` for ``x (..., K)``, ``W (N, K)``, ``b (N,)`` or ``None``, then PyTorch's
    exact GELU when ``gelu``: ``(..., N)``.

    Example:
        >>> import torch
        >>> linear(torch.randn(3, 4), torch.randn(5, 4), gelu=True).shape
        torch.Size([3, 5])
    """
    y = F.linear(x, weight, bias)
    return F.gelu(y) if gelu else y
