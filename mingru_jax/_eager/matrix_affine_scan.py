"""Eager block-matrix affine scan ``H_t = A_t H_{t-1} + B_t``.

The twin of :mod:`mingru._eager.matrix_affine_scan`: one :func:`jax.lax.associative_scan` with the
block-matrix combine ``(A₂A₁, A₂B₁ + B₂)``; ``A (B, T, n, k, k)``, ``B (B, T, n, k, v)``.
Gradients by JAX's autodiff.
"""

from __future__ import annotations

import jax

from mingru_jax._eager._combine import block_matrix, fp32_matmuls, scan


@fp32_matmuls
def matrix_affine_scan_eager(A: jax.Array, Bm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(P, Z)`` for ``H_t = A_t H_{t-1} + B_t``; shapes ``(B,T,n,k,k)`` and ``(B,T,n,k,v)``.

    Example:
        >>> import jax.numpy as jnp
        >>> P, Z = matrix_affine_scan_eager(jnp.ones((2, 5, 3, 4, 4)), jnp.ones((2, 5, 3, 4, 1)))
        >>> P.shape, Z.shape
        ((2, 5, 3, 4, 4), (2, 5, 3, 4, 1))
    """
    return scan(A, Bm, block_matrix)
