"""Eager twin of the fused rotation/Givens recurrence (dispatch op ``"givens_recurrence"``).

Per token ``t`` and block, the transition is

    M_t = γ_t · G_{R-1} ⋯ G_0 · diag(scale_t),      h_t = M_t h_{t-1} + b_t,

where round ``r`` rotates the disjoint planes ``(i, j)``, ``i = (r % 2 + 2m) % k``,
``j = (i + 1) % k`` (``m = 0 … k/2-1``), by ``θ = theta[..., r, m]``:
``(v_i, v_j) ← (cos θ·v_i − sin θ·v_j, sin θ·v_i + cos θ·v_j)`` (Givens rotations,
Golub & Van Loan; brick-wall layout of Clements et al. 2016 / EUNN, Jing et al. 2017).

The eager path materializes the ``k×k`` transitions and runs the block matrix scan
(:func:`mingru._eager.matrix_affine_scan.matrix_affine_scan_eager`); the Triton kernel composes the
rotations on the state vector instead. :func:`givens_step` is the O(n·k·R) one-token form.
"""

from __future__ import annotations

import torch

from mingru._eager.matrix_affine_scan import matrix_affine_scan_eager

__all__ = ["givens_recurrence_eager", "givens_step", "givens_transitions", "rotate_rows"]


def _round_plan(k: int, parity: int) -> tuple[list[int], list[int], list[int]]:
    """Row indices ``I``, ``J`` of the planes of a round, and the inverse of ``I ++ J``."""
    rows_i = [(parity + 2 * m) % k for m in range(k // 2)]
    rows_j = [(i + 1) % k for i in rows_i]
    order = rows_i + rows_j  # a permutation of 0..k-1: the planes of one round are disjoint
    inverse = [0] * k
    for pos, row in enumerate(order):
        inverse[row] = pos
    return rows_i, rows_j, inverse


def rotate_rows(X: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
    """Left-multiply ``X (..., k, c)`` by ``G_{R-1} ⋯ G_0`` built from ``theta (..., R, k/2)``.

    Out-of-place (autograd-friendly): each round gathers the ``I`` and ``J`` rows, rotates
    them, and scatters them back with one inverse permutation.
    """
    k = X.shape[-2]
    for r in range(theta.shape[-2]):
        rows_i, rows_j, inverse = _round_plan(k, r % 2)
        ang = theta[..., r, :].unsqueeze(-1)  # (..., k/2, 1)
        c, s = torch.cos(ang), torch.sin(ang)
        Xi, Xj = X[..., rows_i, :], X[..., rows_j, :]
        X = torch.cat([c * Xi - s * Xj, s * Xi + c * Xj], dim=-2)[..., inverse, :]
    return X


def givens_transitions(
    theta: torch.Tensor,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
) -> torch.Tensor:
    """The transitions ``M (B, T, n, k, k)``.

    Args:
        theta: ``(B, T, n, R, k/2)`` angles.
        scale: ``(B, T, n, k)`` diagonal applied before the rotations, or ``None`` (identity).
        log_gamma: ``(B, T, n)`` log decay on the whole transition, or ``None``.
    """
    B, T, n, _, half = theta.shape
    k = 2 * half
    if scale is None:
        M0 = torch.eye(k, dtype=theta.dtype, device=theta.device).expand(B, T, n, k, k)
    else:
        M0 = torch.diag_embed(scale)
    M = rotate_rows(M0, theta)
    if log_gamma is not None:
        M = M * log_gamma.exp()[..., None, None]
    return M


def givens_recurrence_eager(
    theta: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
) -> torch.Tensor:
    """``h (B, T, n, k)`` for ``h_t = M_t h_{t-1} + b_t`` started at ``h0 (B, n, k)``.

    Shapes: ``theta (B, T, n, R, k/2)``, ``b (B, T, n, k)``, ``scale (B, T, n, k)`` or
    ``None``, ``log_gamma (B, T, n)`` or ``None``; all one float dtype and device.

    Example:
        >>> import torch
        >>> from mingru._eager.givens_recurrence import givens_recurrence_eager
        >>> h = givens_recurrence_eager(
        ...     torch.randn(2, 5, 3, 2, 2), torch.randn(2, 5, 3, 4), torch.randn(2, 3, 4))
        >>> h.shape
        torch.Size([2, 5, 3, 4])
    """
    M = givens_transitions(theta, scale, log_gamma)
    P, Z = matrix_affine_scan_eager(M, b.unsqueeze(-1))
    return (P @ h0[:, None, :, :, None]).squeeze(-1) + Z.squeeze(-1)


def givens_step(
    h_prev: torch.Tensor,
    theta: torch.Tensor,
    b: torch.Tensor,
    *,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
) -> torch.Tensor:
    """One token: ``h (B, n, k)`` from ``h_prev (B, n, k)``, ``theta (B, n, R, k/2)``,
    ``b (B, n, k)``, ``scale (B, n, k)`` or ``None``, ``log_gamma (B, n)`` or ``None``.

    Rotates the state vector directly (no ``k×k`` matrix).
    """
    v = h_prev if scale is None else h_prev * scale
    v = rotate_rows(v.unsqueeze(-1), theta).squeeze(-1)
    if log_gamma is not None:
        v = v * log_gamma.exp().unsqueeze(-1)
    return v + b
