"""Packed sequences: several sequences laid end to end in one row, with ``cu_seqlens``.

``cu_seqlens`` is the FlashAttention convention: integer offsets ``(N+1,)`` with
``cu_seqlens[0] = 0``, non-decreasing, ``cu_seqlens[N] = T``; sequence ``n`` is the steps
``cu_seqlens[n] ≤ t < cu_seqlens[n+1]`` of a batch of ONE row (``B = 1``). Empty sequences
are allowed (their final state is their initial state).

A recurrence ``h_t = a_t h_{t-1} + b_t`` restarts at the first step of every sequence from
that sequence's own ``h_0[n]``. That is the same recurrence with the map of each first step
replaced by ``h ↦ a_t h_0[n] + b_t`` — transition 0, input ``b_t + a_t h_0[n]`` — so one scan
over the whole row, with no loop over sequences, solves all of them
(:func:`restart`). The kernels of ``linear_recurrence`` and the cells apply that rule as they
load a tile, from the per-step sequence index (:attr:`Segments.seq_id`); the eager twins and
the ops without a packed kernel apply it to their inputs.

Nothing here reads the offsets on the host except :func:`check_cu_seqlens` (one small copy
per offsets tensor, however many layers see it; skipped while ``torch.compile`` traces); the
per-step indices are built on the device. The public :func:`mingru.check_cu_seqlens` is this
check for users, plus the same rules as device-side asserts inside compiled code.
"""

from __future__ import annotations

import weakref
from typing import NamedTuple

import torch

from mingru_kernels._spec import check_cu_seqlens_values

__all__ = [
    "Segments", "check_cu_seqlens", "final_states", "restart", "restart_log", "segments",
    "segments_of",
]


class Segments(NamedTuple):
    """The per-step view of ``cu_seqlens`` on the device.

    Attributes:
        cu_seqlens: ``(N+1,)`` int64 offsets.
        seq_id: ``(T,)`` int32 index of the sequence each step belongs to.
        starts: ``(T,)`` bool, True at the first step of each non-empty sequence.
    """

    cu_seqlens: torch.Tensor
    seq_id: torch.Tensor
    starts: torch.Tensor

    @property
    def count(self) -> int:
        """``N``, the number of sequences (empty ones included)."""
        return self.cu_seqlens.shape[0] - 1


def check_cu_seqlens(cu_seqlens: object, batch: int, steps: int, device: torch.device,
                     name: str = "cu_seqlens", *, sharded: bool = False) -> torch.Tensor:
    """``cu_seqlens`` as an int64 tensor on ``device``, or a ``ValueError``/``TypeError`` naming
    it: a 1-D integer tensor ``(N+1,)``, ``N ≥ 1``, starting at 0, non-decreasing, ending at
    ``T = steps``, for a batch of ``batch = 1`` rows. ``sharded``: the offsets are those of a
    row split across ranks (they end at the total length, not at this slice's ``steps``)."""
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"{name} must be a 1-D integer torch.Tensor (N+1,) of sequence offsets; "
                        f"got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype.is_floating_point or cu_seqlens.dtype in (torch.bool, torch.complex64,
                                                                  torch.complex128):
        raise TypeError(f"{name} must have an integer dtype (int32 or int64); got "
                        f"{cu_seqlens.dtype}")
    if cu_seqlens.ndim != 1 or cu_seqlens.shape[0] < 2:
        raise ValueError(f"{name} must have shape (N+1,) with N ≥ 1 sequences; got "
                         f"{tuple(cu_seqlens.shape)}")
    if batch != 1:
        raise ValueError(f"with {name}, the sequences are packed into one row: the batch size "
                         f"must be 1; got B = {batch}")
    if torch.compiler.is_compiling():
        return cu_seqlens.to(device=device, dtype=torch.int64)
    if not _was_checked(cu_seqlens, steps):
        values = cu_seqlens.tolist()
        check_cu_seqlens_values(values, values[-1] if sharded else steps, name)
    out = cu_seqlens.to(device=device, dtype=torch.int64)
    # A stack passes the same offsets to every layer: read them on the host once.
    if len(_checked) > 256:
        _checked.clear()
    for t in (cu_seqlens, out):
        _checked[id(t)] = (weakref.ref(t), t._version, steps)
    return out


# Offsets already checked: id -> (a weak reference, so a reused id never matches, the version
# counter, so an in-place change re-checks, and T).
_checked: dict[int, tuple[weakref.ref, int, int]] = {}


def _was_checked(t: torch.Tensor, steps: int) -> bool:
    entry = _checked.get(id(t))
    return entry is not None and entry[0]() is t and entry[1:] == (t._version, steps)


def segments(cu_seqlens: torch.Tensor, steps: int) -> Segments:
    """The per-step sequence index and start flags of checked offsets (built on the device)."""
    t = torch.arange(steps, device=cu_seqlens.device)
    seq_id = torch.searchsorted(cu_seqlens[1:], t, right=True)
    starts = t == cu_seqlens[seq_id]
    return Segments(cu_seqlens, seq_id.to(torch.int32), starts)


def segments_of(seq_id: torch.Tensor) -> Segments:
    """The start flags of a per-step sequence index (offsets unknown: only what
    :func:`restart` needs)."""
    starts = torch.ones_like(seq_id, dtype=torch.bool)
    starts[1:] = seq_id[1:] != seq_id[:-1]
    return Segments(seq_id.new_zeros(0), seq_id, starts)


def restart(a: torch.Tensor, b: torch.Tensor, initial_state: torch.Tensor | None,
            *, seg: Segments) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a', b')`` whose plain recurrence restarts every sequence from its own state:
    ``a' = 0`` and ``b' = b + a·h_0[n]`` at the first step of sequence ``n``.

    ``a, b`` are ``(1, T, …)`` with the state's trailing shape; ``initial_state`` is
    ``(N, …)`` or ``None`` (zeros). Differentiable in all three.
    """
    starts = seg.starts.reshape(1, -1, *([1] * (a.ndim - 2)))
    if initial_state is not None:
        b = torch.where(starts, b + a * initial_state[seg.seq_id.long()].unsqueeze(0), b)
    return torch.where(starts, torch.zeros_like(a), a), b


def restart_log(log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor | None,
                *, seg: Segments) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`restart` in log space (``a, b > 0``): ``log a' = −∞`` and
    ``log b' = logaddexp(log b, log a + log h_0[n])`` at the first step of sequence ``n``
    (``log_h0 (N, …)``; ``None`` is ``h_0 = 0``). The log-space scans take ``−∞``
    coefficients (a product that underflowed) without NaN."""
    starts = seg.starts.reshape(1, -1, *([1] * (log_a.ndim - 2)))
    if log_h0 is not None:
        entry = torch.logaddexp(log_b, log_a + log_h0[seg.seq_id.long()].unsqueeze(0))
        log_b = torch.where(starts, entry, log_b)
    return torch.where(starts, torch.full_like(log_a, float("-inf")), log_a), log_b


def final_states(h: torch.Tensor, seg: Segments,
                 initial_state: torch.Tensor | None) -> torch.Tensor:
    """``(N, …)`` last state of each sequence from the states ``h (1, T, …)``; an empty
    sequence's is its initial state (zeros when ``None``)."""
    cu = seg.cu_seqlens
    last = h[0, (cu[1:] - 1).clamp_min(0)]
    nonempty = (cu[1:] > cu[:-1]).reshape(-1, *([1] * (last.ndim - 1)))
    before = torch.zeros_like(last) if initial_state is None else initial_state.to(last.dtype)
    return torch.where(nonempty, last, before)
