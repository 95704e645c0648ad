"""Packed sequences: several sequences laid end to end in one row, with ``cu_seqlens``.

The twin of :mod:`mingru._packing` (same names, same rules). ``cu_seqlens`` is the
FlashAttention convention: integer offsets ``(N+1,)`` with ``cu_seqlens[0] = 0``,
non-decreasing, ``cu_seqlens[N] = T``; sequence ``n`` is the steps
``cu_seqlens[n] ≤ t < cu_seqlens[n+1]`` of a batch of ONE row (``B = 1``). Empty sequences
are allowed (their final state is their initial state).

A recurrence ``h_t = a_t h_{t-1} + b_t`` restarts at the first step of every sequence from
that sequence's own ``h_0[n]``. That is the same recurrence with the map of each first step
replaced by ``h ↦ a_t h_0[n] + b_t`` — transition 0, input ``b_t + a_t h_0[n]`` — so one scan
over the whole row, with no loop over sequences, solves all of them (:func:`restart`). The
kernels of ``linear_recurrence`` and the cells apply that rule as they load a tile, from the
per-step sequence index (:attr:`Segments.seq_id`); the eager twins and the ops without a
packed kernel apply it to their inputs.

Nothing here reads the offsets on the host except :func:`check_cu_seqlens`, and only when they
are concrete (under :func:`jax.jit` a traced ``cu_seqlens`` gets its shape and dtype checked,
not its values); the per-step indices are built on the device. The public
:func:`mingru_jax.check_cu_seqlens` is this check for users, plus the same rules as
``checkify`` checks on traced offsets.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mingru_jax._eager._combine import logaddexp  # NaN-free derivative at (-inf, -inf)
from mingru_kernels._spec import check_cu_seqlens_values

__all__ = [
    "Segments", "check_cu_seqlens", "final_states", "restart", "restart_log", "segments",
    "segments_of",
]


class Segments(NamedTuple):
    """The per-step view of ``cu_seqlens`` on the device.

    Attributes:
        cu_seqlens: ``(N+1,)`` int32 offsets (empty when unknown, see :func:`segments_of`).
        seq_id: ``(T,)`` int32 index of the sequence each step belongs to.
        starts: ``(T,)`` bool, True at the first step of each non-empty sequence.
    """

    cu_seqlens: jax.Array
    seq_id: jax.Array
    starts: jax.Array

    @property
    def count(self) -> int:
        """``N``, the number of sequences (empty ones included)."""
        return self.cu_seqlens.shape[0] - 1


def check_cu_seqlens(cu_seqlens: object, batch: int, steps: int,
                     name: str = "cu_seqlens") -> jax.Array:
    """``cu_seqlens`` as an int32 ``jax.Array``, or a ``ValueError``/``TypeError`` naming it:
    a 1-D integer array ``(N+1,)``, ``N ≥ 1``, starting at 0, non-decreasing, ending at
    ``T = steps``, for a batch of ``batch = 1`` rows.

    The values are checked only when ``cu_seqlens`` is concrete (a tracer under
    :func:`jax.jit` has no values to read at trace time: its shape and dtype are checked).
    """
    if not isinstance(cu_seqlens, (jax.Array, np.ndarray)):
        raise TypeError(f"{name} must be a 1-D integer jax.Array (N+1,) of sequence offsets; "
                        f"got {type(cu_seqlens).__name__}")
    dtype = np.dtype(cu_seqlens.dtype)
    if dtype.kind not in "iu":
        raise TypeError(f"{name} must have an integer dtype (int32 or int64); got {dtype}")
    if cu_seqlens.ndim != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(f"{name} must have shape (N+1,) with N ≥ 1 sequences; got "
                         f"{tuple(cu_seqlens.shape)}")
    if batch != 1:
        raise ValueError(f"with {name}, the sequences are packed into one row: the batch size "
                         f"must be 1; got B = {batch}")
    if not isinstance(cu_seqlens, jax.core.Tracer):
        check_cu_seqlens_values(np.asarray(cu_seqlens).tolist(), steps, name)
    return jnp.asarray(cu_seqlens).astype(jnp.int32)


def segments(cu_seqlens: jax.Array, steps: int) -> Segments:
    """The per-step sequence index and start flags of checked offsets (built on the device):
    ``seq_id = searchsorted(cu[1:], arange(T), side='right')``."""
    t = jnp.arange(steps, dtype=jnp.int32)
    seq_id = jnp.searchsorted(cu_seqlens[1:], t, side="right").astype(jnp.int32)
    starts = t == cu_seqlens[seq_id]
    return Segments(cu_seqlens, seq_id, starts)


def segments_of(seq_id: jax.Array) -> Segments:
    """The start flags of a per-step sequence index (offsets unknown: only what
    :func:`restart` needs)."""
    starts = jnp.concatenate([jnp.ones((1,), bool), seq_id[1:] != seq_id[:-1]])
    return Segments(jnp.zeros((0,), jnp.int32), seq_id, starts)


def restart(a: jax.Array, b: jax.Array, initial_state: jax.Array | None,
            *, seg: Segments) -> tuple[jax.Array, jax.Array]:
    """``(a', b')`` whose plain recurrence restarts every sequence from its own state:
    ``a' = 0`` and ``b' = b + a·h_0[n]`` at the first step of sequence ``n``.

    ``a, b`` are ``(1, T, …)`` with the state's trailing shape; ``initial_state`` is
    ``(N, …)`` or ``None`` (zeros). Differentiable in all three.
    """
    starts = seg.starts.reshape(1, -1, *([1] * (a.ndim - 2)))
    if initial_state is not None:
        b = jnp.where(starts, b + a * initial_state[seg.seq_id][None], b)
    return jnp.where(starts, jnp.zeros_like(a), a), b


def restart_log(log_a: jax.Array, log_b: jax.Array, log_h0: jax.Array | None,
                *, seg: Segments) -> tuple[jax.Array, jax.Array]:
    """:func:`restart` in log space (``a, b > 0``): ``log a' = −∞`` and
    ``log b' = logaddexp(log b, log a + log h_0[n])`` at the first step of sequence ``n``
    (``log_h0 (N, …)``; ``None`` is ``h_0 = 0``). The log-space scans take ``−∞``
    coefficients (a product that underflowed) without NaN, forward and backward."""
    starts = seg.starts.reshape(1, -1, *([1] * (log_a.ndim - 2)))
    if log_h0 is not None:
        entry = logaddexp(log_b, log_a + log_h0[seg.seq_id][None])
        log_b = jnp.where(starts, entry, log_b)
    return jnp.where(starts, jnp.full_like(log_a, -jnp.inf), log_a), log_b


def final_states(h: jax.Array, seg: Segments, initial_state: jax.Array | None) -> jax.Array:
    """``(N, …)`` last state of each sequence from the states ``h (1, T, …)``; an empty
    sequence's is its initial state (zeros when ``None``)."""
    cu = seg.cu_seqlens
    last = h[0, jnp.maximum(cu[1:] - 1, 0)]
    nonempty = (cu[1:] > cu[:-1]).reshape(-1, *([1] * (last.ndim - 1)))
    before = jnp.zeros_like(last) if initial_state is None else initial_state.astype(last.dtype)
    return jnp.where(nonempty, last, before)
