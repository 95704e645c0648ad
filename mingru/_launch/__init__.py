"""Thin Triton launchers, one module per op, imported only by :mod:`mingru.dispatch`.

``LAUNCHERS`` maps an op name to a loader returning the module that launches its kernel, and
``REGISTRY`` is that map as the shared seam reads it (:class:`mingru_kernels._seam.Registry`,
as in ``mingru_jax._launch``, whose loaders import by name). Importing this package never
imports Triton; a launcher module is imported only when dispatch routes a call to it.

Each launcher module provides:

* ``unsupported_reason(*args, **kwargs) -> str | None`` — why the kernel cannot run this call
  (dtype, block size, ...), or ``None``;
* ``prefer_over_eager(*args, **kwargs) -> bool`` (optional) — whether ``auto`` should pick
  the kernel for this shape class (``False`` where eager is the faster path);
* ``run(*args, **kwargs)`` — the op, differentiable (``delta_rule_step`` is inference-only:
  calls that need gradients are unsupported there), registered as a ``torch.library`` op.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from mingru_kernels._seam import Registry

# Static import statements, one loader per op: torch.compile(fullgraph=True) can trace a
# plain ``from … import …`` on the first call, but not importlib/__import__ with a name.


def _linear_scan() -> ModuleType:
    from mingru._launch import linear_scan

    return linear_scan


def _linear_recurrence() -> ModuleType:
    from mingru._launch import linear_recurrence

    return linear_recurrence


def _parallel_scan_log() -> ModuleType:
    from mingru._launch import parallel_scan_log

    return parallel_scan_log


def _matrix_affine_scan() -> ModuleType:
    from mingru._launch import matrix_affine_scan

    return matrix_affine_scan


def _givens_recurrence() -> ModuleType:
    from mingru._launch import givens_recurrence

    return givens_recurrence


def _mingru_cell() -> ModuleType:
    from mingru._launch import mingru_cell

    return mingru_cell


def _delta_rule() -> ModuleType:
    from mingru._launch import delta_rule

    return delta_rule


def _givens_cell() -> ModuleType:
    from mingru._launch import givens_cell

    return givens_cell


def _rotation_cell() -> ModuleType:
    from mingru._launch import rotation_cell

    return rotation_cell


def _delta_rule_step() -> ModuleType:
    from mingru._launch import delta_rule_step

    return delta_rule_step


def _delta_inputs() -> ModuleType:
    from mingru._launch import delta_inputs

    return delta_inputs


def _linear() -> ModuleType:
    from mingru._launch import linear

    return linear


def _layer_norm() -> ModuleType:
    from mingru._launch import layer_norm

    return layer_norm


LAUNCHERS: dict[str, Callable[[], ModuleType]] = {
    "linear_scan": _linear_scan,
    "linear_recurrence": _linear_recurrence,
    "parallel_scan_log": _parallel_scan_log,
    "matrix_affine_scan": _matrix_affine_scan,
    "givens_recurrence": _givens_recurrence,
    "delta_rule": _delta_rule,
    "delta_inputs": _delta_inputs,
    "delta_rule_step": _delta_rule_step,
    "givens_cell": _givens_cell,
    "rotation_cell": _rotation_cell,
    "mingru_cell": _mingru_cell,
    "layer_norm": _layer_norm,
    "linear": _linear,
}

REGISTRY = Registry("mingru", LAUNCHERS)
