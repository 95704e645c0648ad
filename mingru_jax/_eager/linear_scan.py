"""Eager linear scan ``h_t = a_t h_{t-1} + b_t`` (diagonal, signed ``a``).

The twin of :mod:`mingru._eager.linear_scan`: one :func:`jax.lax.associative_scan` with the
diagonal combine ``(a₂a₁, a₂b₁ + b₂)``; gradients by JAX's autodiff.
"""

from __future__ import annotations

import jax

from mingru_jax._eager._combine import diagonal, scan


def linear_scan_eager(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(P, Z)`` for ``h_t = a_t h_{t-1} + b_t``; ``a, b`` are ``(B, T, D)`` of one float dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> P, Z = linear_scan_eager(jnp.full((1, 3, 1), -1.0), jnp.ones((1, 3, 1)))
        >>> P[0, :, 0].tolist(), Z[0, :, 0].tolist()
        ([-1.0, 1.0, -1.0], [1.0, 0.0, 1.0])
    """
    return scan(a, b, diagonal)
