"""Eager twin of the ``delta_rule_step`` kernel op: one token of the delta-rule mixer, from its
one projection and the previous state to the output and the new state."""

from __future__ import annotations

import functools

import torch

from mingru._eager.delta_inputs import delta_inputs

__all__ = ["delta_rule_step", "step_dtype"]


def step_dtype(p: torch.Tensor, log_gamma: torch.Tensor | None, h_prev: torch.Tensor | None
               ) -> torch.dtype:
    """The dtype of the step's outputs: the promotion of its inputs' dtypes (all one dtype in
    the mixer; ``p`` lower than the state under autocast)."""
    return functools.reduce(torch.promote_types,
                            [x.dtype for x in (log_gamma, h_prev) if x is not None], p.dtype)


def delta_rule_step(p: torch.Tensor, log_gamma: torch.Tensor | None = None,
                    h_prev: torch.Tensor | None = None, *, n_heads: int, nh: int, d_k: int,
                    d_v: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of the delta rule: ``(o (B, H, d_v), S (B, H, d_k, d_v))``.

    ``p (B, W)`` is the mixer's projection, ``W = H·d_k + nh·H·(d_k + d_v + 1)`` with columns
    ``[q | k | v | β-logits]`` (:func:`mingru._eager.delta_inputs.delta_inputs` splits it);
    ``log_gamma (B, H)`` or ``(B, 1)`` (one rate for every head), or ``None``; ``h_prev (B, H,
    d_k, d_v)``, or ``None`` for zeros. ``S ← γ S``, then for each micro-step ``j``:
    ``err = v_j − Sᵀk_j``, ``S ← S + β_j k_j errᵀ``; then ``o = Sᵀq``. Outputs in
    :func:`step_dtype`.

    Example:
        >>> import torch
        >>> H, nh, dk, dv = 2, 2, 4, 3
        >>> p = torch.randn(5, H * dk + nh * H * (dk + dv + 1))
        >>> o, S = delta_rule_step(p, n_heads=H, nh=nh, d_k=dk, d_v=dv, eps=1e-6)
        >>> o.shape, S.shape
        (torch.Size([5, 2, 3]), torch.Size([5, 2, 4, 3]))
    """
    q, k, v, beta = delta_inputs(p, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v, eps=eps)
    S = p.new_zeros(p.shape[0], n_heads, d_k, d_v) if h_prev is None else h_prev
    if log_gamma is not None:
        S = log_gamma.exp()[..., None, None] * S
    for j in range(nh):
        kj = k[:, j]
        err = v[:, j] - torch.einsum("bhk,bhkv->bhv", kj, S)  # v − Sᵀk
        S = S + beta[:, j, :, None, None] * kj.unsqueeze(-1) * err.unsqueeze(-2)
    o = torch.einsum("bhk,bhkv->bhv", q, S)
    dtype = step_dtype(p, log_gamma, h_prev)
    return o.to(dtype), S.to(dtype)
