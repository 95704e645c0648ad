"""Eager twin of the fused minGRU cells (the twin of :mod:`mingru._eager.mingru_cell`): the
gates in JAX, then the reference scans (log space for MinGRU, the states-only recurrence for
the signed cell). Also home of the ``g`` activation the mixers share.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager.linear_recurrence import linear_recurrence_eager
from mingru_jax._eager.parallel_scan_log import parallel_scan_log_eager
from mingru_jax._packing import restart_log, segments_of

__all__ = ["g", "log_g", "mingru_cell_eager", "transitions"]


def g(x: jax.Array) -> jax.Array:
    """Positive, continuous activation: ``x + 0.5`` for ``x ≥ 0``, ``sigmoid(x)`` below."""
    pos = x >= 0
    return jnp.where(pos, jnp.where(pos, x, 0.0) + 0.5, jax.nn.sigmoid(x))


def log_g(x: jax.Array) -> jax.Array:
    """``log g(x)``, finite with a finite gradient everywhere (``x ≥ 0`` branch at 0)."""
    pos = x >= 0
    return jnp.where(pos, jnp.log(jnp.where(pos, x, 0.0) + 0.5), -jax.nn.softplus(-x))


def transitions(k: jax.Array, log_gamma: jax.Array | None, signed: bool,
                *, coupled: bool) -> jax.Array:
    """The cell's transitions ``(B, T, D)`` from its pre-activations ``k (B, T, n·D)``:
    ``a = γ tanh(k_s) [(1 − σ(k_z))]`` (signed), or ``log a = −softplus(k_z) + log γ``
    (MinGRU, whose ``a`` is positive)."""
    if signed:
        k_z, k_s, _ = jnp.split(k, 3, axis=-1)
        a = jnp.tanh(k_s)
        if coupled:
            a = (1 - jax.nn.sigmoid(k_z)) * a
        return a if log_gamma is None else a * jnp.exp(log_gamma)
    log_a = -jax.nn.softplus(jnp.split(k, 2, axis=-1)[0])
    return log_a if log_gamma is None else log_a + log_gamma


def mingru_cell_eager(
    k: jax.Array,
    initial_state: jax.Array | None,
    log_gamma: jax.Array | None,
    signed: bool,
    coupled: bool,
    return_final_state: bool = False,
    seq_id: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``h (B, T, D)`` (or ``(h, h_T)``) of the cell for ``k (B, T, n·D)``.

    With ``seq_id`` (``(T,)`` int32, packed sequences in one row, ``B = 1``) ``initial_state``
    is ``(N, D)`` or ``None`` and every sequence restarts from its own; ``h_T`` is then the
    row's last state (the caller gathers each sequence's).

    Example:
        >>> import jax.numpy as jnp
        >>> mingru_cell_eager(jnp.ones((2, 5, 6)), jnp.full((2, 3), 0.5), None, False, False).shape
        (2, 5, 3)
    """
    if signed:
        k_z, _, k_h = jnp.split(k, 3, axis=-1)
        a = transitions(k, log_gamma, signed, coupled=coupled)
        return linear_recurrence_eager(a, jax.nn.sigmoid(k_z) * k_h, initial_state,
                                       return_final_state=return_final_state, seq_id=seq_id)
    k_z, k_h = jnp.split(k, 2, axis=-1)
    log_a = transitions(k, log_gamma, signed, coupled=coupled)
    log_b = -jax.nn.softplus(-k_z) + log_g(k_h)
    B, _, D = log_a.shape
    if seq_id is not None:
        log_h0 = None if initial_state is None else jnp.log(initial_state)
        log_a, log_b = restart_log(log_a, log_b, log_h0, seg=segments_of(seq_id))
        initial_state = None
    if initial_state is None:
        log_h0 = jnp.full((B, 1, D), -jnp.inf, log_a.dtype)
    else:
        log_h0 = jnp.log(initial_state)[:, None]  # log 0 = -inf: a valid start
    h = parallel_scan_log_eager(log_a, jnp.concatenate([log_h0, log_b], axis=1))
    return (h, h[:, -1]) if return_final_state else h
