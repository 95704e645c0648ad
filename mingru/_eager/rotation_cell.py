"""Eager twin of the ``rotation_cell`` kernel op: RotationMinGRU's snapped angles, scale, gates
and 2×2 rotation recurrence from its one projection ``k = [k_θ | k_u | k_z | k_h]``."""

from __future__ import annotations

import math

import torch

from mingru._eager.givens_cell import block_start
from mingru._eager.givens_recurrence import givens_recurrence_eager

__all__ = ["rotation_cell_eager", "snap_angles", "split_projection"]


def snap_angles(theta: torch.Tensor, snap_k: torch.Tensor | None) -> torch.Tensor:
    """Round ``theta (..., n)`` to multiples of ``2π/K_j`` (half to even) with ``K_j =
    snap_k[j]``, straight-through: the value is exactly ``round(θ / (2π/K)) · (2π/K)``, the
    gradient the identity. ``snap_k = None`` returns ``theta``."""
    if snap_k is None:
        return theta
    unit = (2 * math.pi) / snap_k.to(theta.dtype)
    snapped = torch.round(theta / unit) * unit
    # theta - theta.detach() is exactly 0, so the value stays exactly `snapped`.
    return snapped.detach() + (theta - theta.detach())


def split_projection(k: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views ``k_θ (B, T, n, 1, 1)``, ``k_u (B, T, n)``, ``k_z`` and ``k_h`` ``(B, T, n, 2)``
    of ``k (B, T, 6n) = [k_θ | k_u | k_z | k_h]``."""
    n = k.shape[-1] // 6
    k_theta, k_u, k_z, k_h = k.split([n, n, 2 * n, 2 * n], dim=-1)
    return (k_theta.unflatten(-1, (n, 1, 1)), k_u, k_z.unflatten(-1, (n, 2)),
            k_h.unflatten(-1, (n, 2)))


def rotation_cell_eager(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                        snap_k: torch.Tensor | None) -> torch.Tensor:
    """``h (B, T, 2n)``: per block ``j``, ``h_t = γ_t R(θ_t) diag(1, tanh(u_t)) h_{t−1} +
    σ(k_z) ⊙ k_h`` with ``θ`` the snapped ``k_θ``, from ``k (B, T, 6n) = [k_θ | k_u | k_z |
    k_h]`` (``n`` columns each for ``θ`` and ``u``, ``2n`` for the gates), ``h0 (B, 2n)``
    (zeros when ``None``), ``log_gamma (B, T, n)`` or ``None`` and ``snap_k (n,)`` or
    ``None``; in ``k``'s dtype.

    Example:
        >>> import torch
        >>> rotation_cell_eager(torch.randn(2, 5, 6 * 3), None, None, None).shape
        torch.Size([2, 5, 6])
    """
    k_theta, k_u, k_z, k_h = split_projection(k)
    B, T, n, _ = k_z.shape
    # snap_angles works on (..., n): the angle view's two trailing unit axes go and come back
    theta = snap_angles(k_theta[..., 0, 0], snap_k)[..., None, None]
    s = torch.tanh(k_u)
    scale = torch.stack([torch.ones_like(s), s], dim=-1)
    b = torch.sigmoid(k_z) * k_h
    return givens_recurrence_eager(theta, b, block_start(k, h0, n, block_size=2), scale=scale,
                                   log_gamma=log_gamma).reshape(B, T, 2 * n)
