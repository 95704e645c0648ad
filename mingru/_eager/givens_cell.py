"""Eager twin of the ``givens_cell`` kernel op: GivensMinGRU's gates and Givens recurrence from
its one projection ``k = [k_θ | k_z | k_h]``."""

from __future__ import annotations

import torch

from mingru._eager.givens_recurrence import givens_recurrence_eager

__all__ = ["block_start", "givens_cell_eager", "split_projection"]


def split_projection(k: torch.Tensor, block_size: int, rounds: int
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Views ``theta (B, T, n, R, k/2)``, ``k_z`` and ``k_h`` ``(B, T, n, k)`` of ``k (B, T, W)``,
    ``W = D·R/2 + 2·D``, ``n = D / block_size``, ``k = block_size``, ``R = rounds``."""
    D = 2 * k.shape[-1] // (rounds + 4)
    n = D // block_size
    k_theta, k_z, k_h = k.split([D * rounds // 2, D, D], dim=-1)
    return (k_theta.unflatten(-1, (n, rounds, block_size // 2)),
            k_z.unflatten(-1, (n, block_size)), k_h.unflatten(-1, (n, block_size)))


def block_start(k: torch.Tensor, h0: torch.Tensor | None, n: int, *, block_size: int
                ) -> torch.Tensor:
    """A block cell's start state ``(B, n, block_size)``: ``h0 (B, D)`` by block, or zeros
    in ``k``'s dtype and device when ``None``."""
    if h0 is None:
        return k.new_zeros(k.shape[0], n, block_size)
    return h0.reshape(k.shape[0], n, block_size)


def givens_cell_eager(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                      block_size: int, rounds: int) -> torch.Tensor:
    """``h (B, T, D)``: ``h_t = γ_t G(θ_t) h_{t−1} + σ(k_z) ⊙ k_h`` per block, from ``k (B, T,
    W)`` (see :func:`split_projection`), ``h0 (B, D)`` (zeros when ``None``) and
    ``log_gamma (B, T, n)`` or ``None``; in ``k``'s dtype.

    Example:
        >>> import torch
        >>> givens_cell_eager(torch.randn(2, 5, 8 * 3 // 2 + 16), None, None, 4, 3).shape
        torch.Size([2, 5, 8])
    """
    theta, k_z, k_h = split_projection(k, block_size, rounds)
    B, T, n, _ = k_z.shape
    b = torch.sigmoid(k_z) * k_h
    start = block_start(k, h0, n, block_size=block_size)
    h = givens_recurrence_eager(theta, b, start, scale=None, log_gamma=log_gamma)
    return h.reshape(B, T, n * block_size)
