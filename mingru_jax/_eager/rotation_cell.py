"""Eager twin of the ``rotation_cell`` kernel op: RotationMinGRU's snapped angles, scale, gates
and 2×2 rotation recurrence from its one projection ``k = [k_θ | k_u | k_z | k_h]`` (the twin
of :mod:`mingru._eager.rotation_cell`)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp

from mingru_jax._eager.givens_cell import block_start
from mingru_jax._eager.givens_recurrence import givens_recurrence_eager

__all__ = ["rotation_cell_eager", "snap_angles", "split_projection"]


def snap_angles(theta: jax.Array, snap_k: jax.Array | None) -> jax.Array:
    """Round ``theta (..., n)`` to multiples of ``2π/K_j`` (half to even) with ``K_j =
    snap_k[j]``, straight-through: the value is exactly ``round(θ / (2π/K)) · (2π/K)``, the
    gradient the identity. ``snap_k = None`` returns ``theta``."""
    if snap_k is None:
        return theta
    unit = (2 * math.pi) / snap_k.astype(theta.dtype)
    snapped = jnp.round(theta / unit) * unit  # jnp.round: half to even, as torch.round
    # theta - stop_gradient(theta) is exactly 0, so the value stays exactly `snapped`.
    return jax.lax.stop_gradient(snapped) + (theta - jax.lax.stop_gradient(theta))


def split_projection(k: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``k_θ (B, T, n, 1, 1)``, ``k_u (B, T, n)``, ``k_z`` and ``k_h`` ``(B, T, n, 2)`` of
    ``k (B, T, 6n) = [k_θ | k_u | k_z | k_h]``."""
    B, T, W = k.shape
    n = W // 6
    return (k[..., :n].reshape(B, T, n, 1, 1), k[..., n:2 * n],
            k[..., 2 * n:4 * n].reshape(B, T, n, 2), k[..., 4 * n:].reshape(B, T, n, 2))


def rotation_cell_eager(k: jax.Array, h0: jax.Array | None, log_gamma: jax.Array | None,
                        snap_k: jax.Array | None) -> jax.Array:
    """``h (B, T, 2n)``: per block ``j``, ``h_t = γ_t R(θ_t) diag(1, tanh(u_t)) h_{t−1} +
    σ(k_z) ⊙ k_h`` with ``θ`` the snapped ``k_θ``, from ``k (B, T, 6n) = [k_θ | k_u | k_z |
    k_h]``, ``h0 (B, 2n)`` (zeros when ``None``), ``log_gamma (B, T, n)`` or ``None`` and
    ``snap_k (n,)`` or ``None``; in ``k``'s dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> rotation_cell_eager(jnp.ones((2, 5, 6 * 3)), None, None, None).shape
        (2, 5, 6)
    """
    k_theta, k_u, k_z, k_h = split_projection(k)
    B, T, n, _ = k_z.shape
    theta = snap_angles(k_theta[..., 0, 0], snap_k)[..., None, None]
    s = jnp.tanh(k_u)
    scale = jnp.stack([jnp.ones_like(s), s], axis=-1)
    b = jax.nn.sigmoid(k_z) * k_h
    return givens_recurrence_eager(theta, b, block_start(k, h0, n, block_size=2), scale=scale,
                                   log_gamma=log_gamma).reshape(B, T, 2 * n)
