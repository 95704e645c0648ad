"""Eager states-only recurrence ``h_t = a_t h_{t-1} + b_t`` with initial and final state.

The twin of :mod:`mingru._eager.linear_recurrence`: ``h_0`` enters the first step's input
(``b_1 + a_1 h_0``) and one :func:`jax.lax.associative_scan` of the diagonal maps gives the
states; gradients by JAX's autodiff.
"""

from __future__ import annotations

import jax

from mingru_jax._eager._combine import diagonal, scan
from mingru_jax._packing import restart, segments_of

__all__ = ["linear_recurrence_eager"]


def linear_recurrence_eager(
    a: jax.Array,
    b: jax.Array,
    initial_state: jax.Array | None = None,
    return_final_state: bool = False,
    seq_id: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``h (B, T, D)`` (or ``(h, h_T (B, D))``) for ``a, b (B, T, D)``, ``initial_state (B, D)``.

    With ``seq_id`` (``(T,)`` int32, packed sequences in one row, ``B = 1``) ``initial_state``
    is ``(N, D)`` or ``None`` and every sequence restarts from its own
    (:func:`mingru_jax._packing.restart`); ``h_T`` is then the row's last state (the caller
    gathers each sequence's).

    Example:
        >>> import jax.numpy as jnp
        >>> h, h_T = linear_recurrence_eager(jnp.full((1, 3, 1), 0.5), jnp.ones((1, 3, 1)),
        ...                                  jnp.full((1, 1), 4.0), return_final_state=True)
        >>> h[0, :, 0].tolist(), h_T.tolist()
        ([3.0, 2.5, 2.25], [[2.25]])
    """
    if seq_id is not None:
        a, b = restart(a, b, initial_state, seg=segments_of(seq_id))
    elif initial_state is not None:
        b = b.at[:, 0].add(a[:, 0] * initial_state)
    _, h = scan(a, b, diagonal)
    return (h, h[:, -1]) if return_final_state else h
