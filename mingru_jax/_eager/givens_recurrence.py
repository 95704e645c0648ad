"""Eager twin of the fused rotation/Givens recurrence (dispatch op ``"givens_recurrence"``).

The twin of :mod:`mingru._eager.givens_recurrence`. Per token ``t`` and block,

    M_t = γ_t · G_{R-1} ⋯ G_0 · diag(scale_t),      h_t = M_t h_{t-1} + b_t,

where round ``r`` rotates the disjoint planes ``(i, j)``, ``i = (r % 2 + 2m) % k``,
``j = (i + 1) % k`` (``m = 0 … k/2-1``), by ``θ = theta[..., r, m]``:
``(v_i, v_j) ← (cos θ·v_i − sin θ·v_j, sin θ·v_i + cos θ·v_j)`` (Givens rotations, Golub &
Van Loan; brick-wall layout of Clements et al. 2016 / EUNN, Jing et al. 2017).

The eager path materializes the ``k×k`` transitions and runs the block matrix scan;
:func:`givens_step` is the one-token form that rotates the state vector directly.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager._combine import fp32_matmuls
from mingru_jax._eager.matrix_affine_scan import matrix_affine_scan_eager

__all__ = ["givens_recurrence_eager", "givens_step", "givens_transitions", "rotate_rows"]


def rotate_rows(X: jax.Array, theta: jax.Array) -> jax.Array:
    """Left-multiply ``X (..., k, c)`` by ``G_{R-1} ⋯ G_0`` built from ``theta (..., R, k/2)``.

    An even round rotates the row pairs ``(2m, 2m+1)``: strided slices, no gather. An odd
    round's planes ``(1,2), (3,4), …, (k-1,0)`` are the even-round pairs of the rows rolled
    up by one (row ``p`` of the rolled block is row ``p+1 mod k``), so it rolls, rotates and
    rolls back. All indices are static.
    """
    k = X.shape[-2]
    for r in range(theta.shape[-2]):
        ang = theta[..., r, :, None]  # (..., k/2, 1): plane m of this round
        c, s = jnp.cos(ang), jnp.sin(ang)
        Y = jnp.roll(X, -1, axis=-2) if r % 2 else X
        Yi, Yj = Y[..., 0::2, :], Y[..., 1::2, :]
        Y = jnp.stack([c * Yi - s * Yj, s * Yi + c * Yj], axis=-2)  # (..., k/2, 2, c)
        Y = Y.reshape(*Y.shape[:-3], k, Y.shape[-1])
        X = jnp.roll(Y, 1, axis=-2) if r % 2 else Y
    return X


def givens_transitions(
    theta: jax.Array, scale: jax.Array | None = None, log_gamma: jax.Array | None = None
) -> jax.Array:
    """The transitions ``M (B, T, n, k, k)``.

    Args:
        theta: ``(B, T, n, R, k/2)`` angles.
        scale: ``(B, T, n, k)`` diagonal applied before the rotations, or ``None``.
        log_gamma: ``(B, T, n)`` log decay on the whole transition, or ``None``.
    """
    *lead, _, half = theta.shape
    k = 2 * half
    if scale is None:
        M0 = jnp.broadcast_to(jnp.eye(k, dtype=theta.dtype), (*lead[:-1], lead[-1], k, k))
    else:
        M0 = scale[..., :, None] * jnp.eye(k, dtype=scale.dtype)
    M = rotate_rows(M0, theta)
    if log_gamma is not None:
        M = M * jnp.exp(log_gamma)[..., None, None]
    return M


@fp32_matmuls
def givens_recurrence_eager(
    theta: jax.Array,
    b: jax.Array,
    h0: jax.Array,
    scale: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
) -> jax.Array:
    """``h (B, T, n, k)`` for ``h_t = M_t h_{t-1} + b_t`` started at ``h0 (B, n, k)``.

    Shapes: ``theta (B, T, n, R, k/2)``, ``b (B, T, n, k)``, ``scale (B, T, n, k)`` or
    ``None``, ``log_gamma (B, T, n)`` or ``None``; all one float dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> h = givens_recurrence_eager(
        ...     jnp.ones((2, 5, 3, 2, 2)), jnp.ones((2, 5, 3, 4)), jnp.ones((2, 3, 4)))
        >>> h.shape
        (2, 5, 3, 4)
    """
    M = givens_transitions(theta, scale, log_gamma)
    P, Z = matrix_affine_scan_eager(M, b[..., None])
    return (P @ h0[:, None, :, :, None])[..., 0] + Z[..., 0]


def givens_step(
    h_prev: jax.Array,
    theta: jax.Array,
    b: jax.Array,
    *,
    scale: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
) -> jax.Array:
    """One token: ``h (B, n, k)`` from ``h_prev (B, n, k)``, ``theta (B, n, R, k/2)``,
    ``b (B, n, k)``, ``scale (B, n, k)`` or ``None``, ``log_gamma (B, n)`` or ``None``.

    Rotates the state vector directly (no ``k×k`` matrix).
    """
    v = h_prev if scale is None else h_prev * scale
    v = rotate_rows(v[..., None], theta)[..., 0]
    if log_gamma is not None:
        v = v * jnp.exp(log_gamma)[..., None]
    return v + b
