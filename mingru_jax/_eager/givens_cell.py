"""Eager twin of the ``givens_cell`` kernel op: GivensMinGRU's gates and Givens recurrence from
its one projection ``k = [k_θ | k_z | k_h]`` (the twin of :mod:`mingru._eager.givens_cell`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager.givens_recurrence import givens_recurrence_eager

__all__ = ["block_start", "givens_cell_eager", "split_projection"]


def split_projection(k: jax.Array, block_size: int, rounds: int
                     ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``theta (B, T, n, R, k/2)``, ``k_z`` and ``k_h`` ``(B, T, n, k)`` of ``k (B, T, W)``,
    ``W = D·R/2 + 2·D``, ``n = D / block_size``, ``k = block_size``, ``R = rounds``."""
    B, T, W = k.shape
    D = 2 * W // (rounds + 4)
    n = D // block_size
    a = D * rounds // 2
    return (k[..., :a].reshape(B, T, n, rounds, block_size // 2),
            k[..., a:a + D].reshape(B, T, n, block_size),
            k[..., a + D:].reshape(B, T, n, block_size))


def block_start(k: jax.Array, h0: jax.Array | None, n: int, *, block_size: int) -> jax.Array:
    """A block cell's start state ``(B, n, block_size)``: ``h0 (B, D)`` by block, or zeros in
    ``k``'s dtype when ``None``."""
    if h0 is None:
        return jnp.zeros((k.shape[0], n, block_size), k.dtype)
    return h0.reshape(k.shape[0], n, block_size)


def givens_cell_eager(k: jax.Array, h0: jax.Array | None, log_gamma: jax.Array | None,
                      block_size: int, rounds: int) -> jax.Array:
    """``h (B, T, D)``: ``h_t = γ_t G(θ_t) h_{t−1} + σ(k_z) ⊙ k_h`` per block, from ``k (B, T,
    W)`` (see :func:`split_projection`), ``h0 (B, D)`` (zeros when ``None``) and
    ``log_gamma (B, T, n)`` or ``None``; in ``k``'s dtype.

    Example:
        >>> import jax.numpy as jnp
        >>> givens_cell_eager(jnp.ones((2, 5, 8 * 3 // 2 + 16)), None, None, 4, 3).shape
        (2, 5, 8)
    """
    theta, k_z, k_h = split_projection(k, block_size, rounds)
    B, T, n, _ = k_z.shape
    b = jax.nn.sigmoid(k_z) * k_h
    start = block_start(k, h0, n, block_size=block_size)
    h = givens_recurrence_eager(theta, b, start, scale=None, log_gamma=log_gamma)
    return h.reshape(B, T, n * block_size)
