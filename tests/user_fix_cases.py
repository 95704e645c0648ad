"""What both frontends' ``test_user_fixes.py`` share, framework-free (no torch, no jax import):
the mixer cases, the offsets that break each rule of ``cu_seqlens``, the recorder of NaN
checks and the assertions whose steps are the same in both frontends (each test passes its
frontend's objects)."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

# name -> (class name, kwargs); odd sizes where the mixer allows them.
MIXERS: dict[str, tuple[str, dict[str, Any]]] = {
    "log": ("MinGRU", dict(hidden_size=5)),
    "signed": ("SignedMinGRU", dict(hidden_size=5, coupled=True)),
    "rotation": ("RotationMinGRU", dict(hidden_size=6, snap=(3,))),
    "givens": ("GivensMinGRU", dict(hidden_size=6, block_size=2, rounds=1)),
    "delta": ("DeltaMinGRU", dict(hidden_size=6, n_heads=3, d_k=1, d_v=3)),
}
IN = 7

# offsets of a row of 9 steps -> the rule they break, as the error names it
BAD_OFFSETS = [
    ([1, 4, 9], "must start at 0"),
    ([0, 6, 4, 9], "must be non-decreasing"),
    ([0, 4, 8], "must end at"),
]


def block_kwargs(name: str) -> dict[str, Any]:
    """``mixer_kwargs`` of a block of mixer ``name`` (its case without the hidden size)."""
    return {k: v for k, v in MIXERS[name][1].items() if k != "hidden_size"}


def count_no_nan(monkeypatch: pytest.MonkeyPatch, validate: ModuleType) -> list[list[str]]:
    """Record the names of the states every NaN check of initial states is given, in order
    (``validate``: the frontend's ``_validate``; the returned list fills as calls run)."""
    calls: list[list[str]] = []
    once = validate._ONCE
    real = once.no_nan

    def counting(states):
        calls.append([name for name, _ in states])
        return real(states)

    monkeypatch.setattr(once, "no_nan", counting)
    return calls


def assert_block_checks_h_0_once(block: Callable, x: Any, *, with_nan: Callable[[tuple], Any],
                                 calls: list[list[str]]) -> None:
    """``block``'s NaN ``h_0`` is a ``ValueError`` naming it, and a call checks ``h_0`` once:
    at the block's entry, not again in its mixer (``with_nan(shape)``: a state holding NaN;
    ``calls``: :func:`count_no_nan`'s record)."""
    _, state = block(x)
    calls.clear()
    with pytest.raises(ValueError, match="h_0 holds NaN"):
        block(x, h_0=with_nan(tuple(state.shape)))
    assert calls == [["h_0"]]
    calls.clear()
    block(x, h_0=state)
    assert calls == [["h_0"]]


def assert_host_check_of_offsets(check_cu_seqlens: Callable, array: Callable) -> None:
    """``check_cu_seqlens`` on offsets with values (``array(values)``: the frontend's integer
    array) passes good ones through and names each broken rule, a float dtype, a 2-D shape
    and a total length that is not an int."""
    cu = array([0, 4, 4, 9])
    assert check_cu_seqlens(cu, 9) is cu
    for offsets, message in BAD_OFFSETS:
        with pytest.raises(ValueError, match=f"cu_seqlens {message}"):
            check_cu_seqlens(array(offsets), 9)
    with pytest.raises(TypeError, match="cu_seqlens must have an integer dtype"):
        check_cu_seqlens(array([0.0, 9.0]), 9)
    with pytest.raises(ValueError, match=r"cu_seqlens must have shape \(N\+1,\)"):
        check_cu_seqlens(array([[0, 9]]), 9)
    with pytest.raises(TypeError, match="total_length must be an int"):
        check_cu_seqlens(array([0, 9]), 9.0)
