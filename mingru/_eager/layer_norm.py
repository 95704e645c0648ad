"""Eager twin of the ``layer_norm`` kernel op: LayerNorm over the last axis in float32, the
result in the caller's output dtype (what a block's norm feeds its projection under autocast)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

__all__ = ["layer_norm"]


def layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
               eps: float, out_dtype: torch.dtype) -> torch.Tensor:
    """``LayerNorm(x)`` over the last axis (``weight``, ``bias`` ``(D,)`` or ``None``), computed
    in float32 and returned as ``out_dtype``; ``x (..., D)``.

    Example:
        >>> import torch
        >>> y = layer_norm(torch.randn(2, 3, 8), torch.ones(8), None, 1e-5, torch.bfloat16)
        >>> y.dtype, y.shape
        (torch.bfloat16, torch.Size([2, 3, 8]))
    """
    with torch.autocast(x.device.type, enabled=False):
        y = F.layer_norm(x.float(), (x.shape[-1],), None if weight is None else weight.float(),
                         None if bias is None else bias.float(), eps)
    return y.to(out_dtype)
