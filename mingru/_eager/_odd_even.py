"""Work-efficient odd–even (Brent–Kung style) scan of affine maps along dim 1.

Element t is a map ``h ↦ a_t ∘ h + b_t``; ``combine(lo, hi)`` returns the map "apply ``lo``,
then ``hi``". The scan pairs neighbours ``(2i, 2i+1)``, scans the ``T/2`` pair-composites
recursively, then fills the even positions with one more combine. Depth ``O(log T)``, work
``O(T)`` (Hillis–Steele would touch all ``T`` elements at each of the ``log T`` levels).
After the scan, element t holds the map from the start to step t: its ``a`` part is the
running product ``P_t`` and its ``b`` part the zero-start solution ``Z_t``.

Used with three algebras: diagonal (``a*b``), block matrix (``matmul``) and log-space pairs.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Pair = tuple[torch.Tensor, torch.Tensor]
Combine = Callable[[Pair, Pair], Pair]


def _interleave(even: torch.Tensor, odd: torch.Tensor) -> torch.Tensor:
    out = torch.stack([even, odd], dim=2)
    return out.reshape(out.shape[0], -1, *out.shape[3:])


def odd_even_scan(a: torch.Tensor, b: torch.Tensor, combine: Combine) -> Pair:
    """Inclusive scan of the maps ``(a_t, b_t)`` along dim 1; returns ``(P, Z)``."""
    T = a.shape[1]
    if T == 1:
        return a, b
    if T % 2:
        Pa, Pb = odd_even_scan(a[:, :-1], b[:, :-1], combine)
        la, lb = combine((Pa[:, -1:], Pb[:, -1:]), (a[:, -1:], b[:, -1:]))
        return torch.cat([Pa, la], dim=1), torch.cat([Pb, lb], dim=1)
    a_e, a_o, b_e, b_o = a[:, 0::2], a[:, 1::2], b[:, 0::2], b[:, 1::2]
    PA, PB = odd_even_scan(*combine((a_e, b_e), (a_o, b_o)), combine)
    Ea, Eb = combine((PA[:, :-1], PB[:, :-1]), (a_e[:, 1:], b_e[:, 1:]))
    Ea = torch.cat([a_e[:, :1], Ea], dim=1)
    Eb = torch.cat([b_e[:, :1], Eb], dim=1)
    return _interleave(Ea, PA), _interleave(Eb, PB)


def diagonal(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``h ↦ a ⊙ h + b`` (``b`` may have trailing dims ``a`` broadcasts over)."""
    return hi[0] * lo[0], hi[0] * lo[1] + hi[1]


def block_matrix(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``H ↦ A H + B`` with ``A (…, k, k)``, ``B (…, k, v)``."""
    return hi[0] @ lo[0], hi[0] @ lo[1] + hi[1]


def log_pair(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``h ↦ a h + b`` held as ``(log a, log b)`` with ``a, b > 0``."""
    return lo[0] + hi[0], torch.logaddexp(hi[0] + lo[1], hi[1])


def shift_next(x: torch.Tensor, fill: float) -> torch.Tensor:
    """``x[:, t+1]`` at position t, with ``fill`` at the last step (the adjoint's transition)."""
    return torch.cat([x[:, 1:], torch.full_like(x[:, :1], fill)], dim=1)


def shift_prev(x: torch.Tensor, first: torch.Tensor) -> torch.Tensor:
    """``x[:, t-1]`` at position t, with ``first`` (broadcast to one step) at t = 0."""
    return torch.cat([first.expand_as(x[:, :1]), x[:, :-1]], dim=1)


def suffix_scan(a: torch.Tensor, b: torch.Tensor, combine: Combine) -> Pair:
    """The odd–even scan run from the last step backwards: element t of the result is the
    map from the end of the sequence to step t (apply ``T-1`` first, then ``T-2``, …, ``t``).

    Same depth and work as :func:`odd_even_scan`, without flipping (copying) the inputs
    and the result as a reversed forward scan would.
    """
    T = a.shape[1]
    if T == 1:
        return a, b
    if T % 2:
        Sa, Sb = suffix_scan(a[:, 1:], b[:, 1:], combine)
        fa, fb = combine((Sa[:, :1], Sb[:, :1]), (a[:, :1], b[:, :1]))
        return torch.cat([fa, Sa], dim=1), torch.cat([fb, Sb], dim=1)
    a_e, a_o, b_e, b_o = a[:, 0::2], a[:, 1::2], b[:, 0::2], b[:, 1::2]
    SA, SB = suffix_scan(*combine((a_o, b_o), (a_e, b_e)), combine)  # maps ending at 2i
    Oa, Ob = combine((SA[:, 1:], SB[:, 1:]), (a_o[:, :-1], b_o[:, :-1]))  # ending at 2i+1
    Oa = torch.cat([Oa, a_o[:, -1:]], dim=1)
    Ob = torch.cat([Ob, b_o[:, -1:]], dim=1)
    return _interleave(SA, Oa), _interleave(SB, Ob)


def reverse_scan(a_next: torch.Tensor, g: torch.Tensor, combine: Combine) -> torch.Tensor:
    """Solve the adjoint ``G_t = g_t + a_next_t ∘ G_{t+1}`` (``G_{T+1} = 0``)."""
    return suffix_scan(a_next, g, combine)[1]
