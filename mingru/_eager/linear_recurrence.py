"""Eager states-only recurrence ``h_t = a_t h_{t-1} + b_t`` with initial and final state.

``h_0`` enters the first step's input (``b_1 + a_1 h_0``), so the states are the zero-start
solution of the linear scan (:func:`mingru._eager.linear_scan.linear_scan_eager`, whose
adjoint backward then gives ``da``, ``db`` and, through the fold, ``dh_0``). ``h_T`` is the last
state.
"""

from __future__ import annotations

import torch

from mingru._eager.linear_scan import linear_scan_eager
from mingru._packing import restart, segments_of

__all__ = ["linear_recurrence_eager"]


def linear_recurrence_eager(
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
    seq_id: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``h (B, T, D)`` (or ``(h, h_T (B, D))``) for ``a, b (B, T, D)``, ``initial_state (B, D)``.

    With ``seq_id`` (``(T,)``, packed sequences in one row) ``initial_state`` is ``(N, D)`` and
    every sequence restarts from its own (:func:`mingru._packing.restart`); ``h_T`` is then
    the row's last state (the caller gathers each sequence's).

    Example:
        >>> import torch
        >>> h, h_T = linear_recurrence_eager(torch.full((1, 3, 1), 0.5), torch.ones(1, 3, 1),
        ...                                  torch.full((1, 1), 4.0), return_final_state=True)
        >>> h[0, :, 0].tolist(), h_T.tolist()
        ([3.0, 2.5, 2.25], [[2.25]])
    """
    if seq_id is not None:
        a, b = restart(a, b, initial_state, seg=segments_of(seq_id))
    elif initial_state is not None:
        b = torch.cat([b[:, :1] + a[:, :1] * initial_state[:, None], b[:, 1:]], dim=1)
    _, h = linear_scan_eager(a, b)
    return (h, h[:, -1]) if return_final_state else h
