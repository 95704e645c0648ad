"""Eager twin of the fused minGRU cells: the gates in PyTorch, then the reference scans.

The MinGRU cell runs in log space (``log a = −softplus(k_z) + log γ``,
``log b = −softplus(−k_z) + log g(k_h)``) on :func:`mingru._eager.parallel_scan_log`, the
library's reference formulation; the signed cell forms ``a`` and ``b`` and runs
:func:`mingru._eager.linear_recurrence`. Also home of the ``g`` activation the mixers share.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from mingru._eager.linear_recurrence import linear_recurrence_eager
from mingru._eager.parallel_scan_log import parallel_scan_log_eager
from mingru._packing import restart_log, segments_of

__all__ = ["g", "log_g", "mingru_cell_eager", "transitions"]


def g(x: torch.Tensor) -> torch.Tensor:
    """Positive, continuous activation: ``x + 0.5`` for ``x ≥ 0``, ``sigmoid(x)`` below."""
    return torch.where(x >= 0, x.clamp_min(0) + 0.5, torch.sigmoid(x))


def log_g(x: torch.Tensor) -> torch.Tensor:
    """``log g(x)``, finite with a finite gradient everywhere (``x ≥ 0`` branch at 0)."""
    return torch.where(x >= 0, torch.log(x.clamp_min(0) + 0.5), -F.softplus(-x))


def transitions(k: torch.Tensor, log_gamma: torch.Tensor | None, signed: bool,
                *, coupled: bool) -> torch.Tensor:
    """The cell's transitions from its pre-activations: ``a = γ tanh(k_s) [(1 − σ(k_z))]``
    (signed), or ``log a = −softplus(k_z) + log γ`` (MinGRU, whose ``a`` is positive)."""
    if signed:
        k_z, k_s, _ = k.chunk(3, dim=-1)
        a = torch.tanh(k_s)
        if coupled:
            a = torch.sigmoid(-k_z) * a
        return a if log_gamma is None else a * log_gamma.exp()
    log_a = -F.softplus(k.chunk(2, dim=-1)[0])
    return log_a if log_gamma is None else log_a + log_gamma


def mingru_cell_eager(
    k: torch.Tensor,
    initial_state: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
    signed: bool,
    coupled: bool,
    return_final_state: bool = False,
    seq_id: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``h (B, T, D)`` (or ``(h, h_T)``) of the cell for ``k (B, T, n·D)``.

    With ``seq_id`` (``(T,)``, packed sequences in one row) ``initial_state`` is ``(N, D)``
    and every sequence restarts from its own; ``h_T`` is then the row's last state.

    Example:
        >>> import torch
        >>> k = torch.randn(2, 5, 2 * 3)
        >>> mingru_cell_eager(k, torch.full((2, 3), 0.5), None, False, False).shape
        torch.Size([2, 5, 3])
    """
    if signed:
        k_z, _, k_h = k.chunk(3, dim=-1)
        a = transitions(k, log_gamma, signed, coupled=coupled)
        return linear_recurrence_eager(a, torch.sigmoid(k_z) * k_h, initial_state,
                                       return_final_state=return_final_state, seq_id=seq_id)
    k_z, k_h = k.chunk(2, dim=-1)
    log_a = transitions(k, log_gamma, signed, coupled=coupled)
    log_b = -F.softplus(-k_z) + log_g(k_h)
    B, _, D = log_a.shape
    if seq_id is not None:
        log_h0 = None if initial_state is None else torch.log(initial_state)
        log_a, log_b = restart_log(log_a, log_b, log_h0, seg=segments_of(seq_id))
        initial_state = None
    if initial_state is None:
        log_h0 = log_a.new_full((B, 1, D), float("-inf"))
    else:
        log_h0 = torch.log(initial_state)[:, None]  # log 0 = -inf: a valid start
    h = parallel_scan_log_eager(log_a, torch.cat([log_h0, log_b], dim=1))
    return (h, h[:, -1]) if return_final_state else h
