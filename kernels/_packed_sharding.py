"""The offset arithmetic of a packed row split along T (packed AND sharded calls: see
``mingru._packed_sharding`` and ``mingru_jax._packed_sharding``), written once for both
frontends: which sequences a slice holds, which of its segments restarts from the carry of the
slices before, whether its outgoing state depends on its incoming one, and where each
sequence's final state lives.

Framework-free: each function takes its frontend's array module as ``xp`` (``torch`` or
``jax.numpy``) and uses only what both spell alike (``xp.where``,
``xp.searchsorted(..., side=)``, ``xp.zeros_like``, comparisons, ``&``, ``~``, indexing,
``.any()``, ``.clip()``). This module imports neither.

Example (with NumPy, which spells them alike too):
    >>> import numpy as np
    >>> from mingru_kernels._packed_sharding import slice_sequences
    >>> cu = np.array([0, 4, 4, 9])             # sequences of 4, 0 and 5 steps
    >>> seq_id, opens = slice_sequences(np, cu, 3 + np.arange(3))   # the slice of steps 3..5
    >>> seq_id.tolist(), bool(opens)            # step 3 continues sequence 0: the carry's row
    ([3, 2, 2], True)
"""

from __future__ import annotations

from typing import Any

__all__ = ["slice_final_states", "slice_sequences"]


def slice_sequences(xp: Any, cu_seqlens: Any, step: Any) -> tuple[Any, Any]:
    """The sequences of one slice of a packed row.

    Args:
        xp: the array module (``torch`` or ``jax.numpy``).
        cu_seqlens: ``(N+1,)`` offsets of the WHOLE row (starting at 0, non-decreasing).
        step: ``(T_local,)`` the slice's global step indices (its start plus ``arange``).

    Returns:
        ``(seq_id, opens)``: ``seq_id (T_local,)`` the local per-step sequence index: the
        global one, except that the slice's first segment, when it continues a sequence from
        the slice before, gets index ``N`` (its initial state is the carry, row ``N`` of the
        table of initial states); ``opens`` (a scalar bool) whether any sequence opens in the
        slice, i.e. whether its outgoing state no longer depends on its incoming one.
    """
    n_seq = cu_seqlens.shape[0] - 1
    seq = xp.searchsorted(cu_seqlens[1:], step, side="right")
    starts = step == cu_seqlens[seq]
    continued = (seq == seq[0]) & ~starts[0]
    return xp.where(continued, n_seq, seq), starts.any()


def slice_final_states(xp: Any, h: Any, cu_seqlens: Any, *, start: Any, initial_state: Any,
                       first: Any) -> Any:
    """``(N, D)`` one slice's share of every sequence's final state: the last state of each
    sequence that ends in the slice, the initial state of each empty sequence on the first
    slice, zeros elsewhere. Summed over the slices, every sequence's final state, each
    counted once.

    Args:
        xp: the array module (``torch`` or ``jax.numpy``).
        h: ``(1, T_local, D)`` the slice's states.
        cu_seqlens: ``(N+1,)`` offsets of the WHOLE row.
        start: the global index of the slice's first step.
        initial_state: ``(N, D)`` each sequence's initial state, in ``h``'s dtype.
        first: whether this is the first slice (a bool, or a scalar bool array).
    """
    steps = h.shape[1]
    last_step = cu_seqlens[1:] - 1 - start
    nonempty = cu_seqlens[1:] > cu_seqlens[:-1]
    here = nonempty & (last_step >= 0) & (last_step < steps)
    last = h[0, last_step.clip(0, steps - 1)]
    mine = xp.where(here[:, None], last, xp.zeros_like(last))
    return xp.where((~nonempty & first)[:, None], initial_state, mine)
