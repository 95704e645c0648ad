"""The test switches of every launcher, in both frontends: one mechanism, pure Python.

Two switches exist, and nothing else changes how a launcher runs:

* **poisoned outputs** — outputs and scratch buffers are NaN-filled before the kernels run, so
  an element a kernel forgets to write fails the comparison. On in interpreter mode
  (``TRITON_INTERPRET=1``), with ``MINGRU_POISON_OUTPUTS=1``, or inside ``forced(poison=True)``.
  Off in production on a GPU: the fill costs one more pass over memory.
* **forced launch plans** — ``forced(op, **choices)`` makes the launcher of ``op`` use the
  given plan choices (the keys are that op's ``PLAN_KEYS`` in
  :mod:`mingru_kernels.launch.<op>`), e.g. the chunked strategy or short segments on tiny
  ``T``, so tests reach every code path. Results never depend on the plan, only speed does.

The state is a plain list (not a ``ContextVar``): ``torch.compile`` traces list reads, and
the launchers read the switches when they plan a call.

Example:
    >>> from mingru_kernels.launch import switches
    >>> with switches.forced("matrix_affine_scan", seg_len=4, poison=True):
    ...     switches.plan_choices("matrix_affine_scan"), switches.poison_outputs()
    ({'seg_len': 4}, True)
    >>> switches.plan_choices("matrix_affine_scan")
    {}
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from typing import Any

from mingru_kernels.launch import (
    delta_inputs,
    delta_rule,
    delta_rule_step,
    givens_recurrence,
    linear_recurrence,
    linear_scan,
    matrix_affine_scan,
    mingru_cell,
    parallel_scan_log,
)

__all__ = ["PLAN_KEYS", "forced", "plan_choices", "poison_outputs"]

PLAN_KEYS: dict[str, tuple[str, ...]] = {
    "linear_scan": linear_scan.PLAN_KEYS,
    "linear_recurrence": linear_recurrence.PLAN_KEYS,
    "mingru_cell": mingru_cell.PLAN_KEYS,
    "parallel_scan_log": parallel_scan_log.PLAN_KEYS,
    "matrix_affine_scan": matrix_affine_scan.PLAN_KEYS,
    "givens_recurrence": givens_recurrence.PLAN_KEYS,
    "delta_rule": delta_rule.PLAN_KEYS,
    "delta_inputs": delta_inputs.PLAN_KEYS,
    "delta_rule_step": delta_rule_step.PLAN_KEYS,
}
"""The plan choices each op's launcher accepts (``PLAN_KEYS`` of its launch module)."""


def _read_poison() -> str:
    return os.environ.get("MINGRU_POISON_OUTPUTS", "")


def _read_interpret() -> str:
    return os.environ.get("TRITON_INTERPRET", "")


# Stack of (op or None, choices, poison or None); the innermost entry wins per key.
_stack: list[tuple[str | None, dict[str, Any], bool | None]] = []


@contextlib.contextmanager
def forced(op: str | None = None, *, poison: bool | None = None, **choices: Any) -> Iterator[None]:
    """Force plan ``choices`` for ``op`` (and/or NaN-poisoned outputs) inside the block."""
    if choices and op is None:
        raise ValueError("forced(): plan choices need the op they apply to")
    if op is not None:
        if op not in PLAN_KEYS:
            raise ValueError(f"forced(): op must be one of {', '.join(PLAN_KEYS)}; got {op!r}")
        bad = sorted(set(choices) - set(PLAN_KEYS[op]))
        if bad:
            raise ValueError(f"forced({op!r}) takes {', '.join(PLAN_KEYS[op])}; got {bad}")
    _stack.append((op, dict(choices), poison))
    try:
        yield
    finally:
        _stack.pop()


def plan_choices(op: str) -> dict[str, Any]:
    """The plan choices forced for ``op`` now (empty outside :func:`forced`)."""
    out: dict[str, Any] = {}
    for forced_op, choices, _ in _stack:
        if forced_op == op:
            out.update(choices)
    return out


def poison_outputs() -> bool:
    """Whether launchers NaN-fill outputs and scratch before the kernels run."""
    for _, _, poison in reversed(_stack):
        if poison is not None:
            return poison
    return _read_interpret() == "1" or _read_poison() == "1"
