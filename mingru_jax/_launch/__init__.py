"""Thin jax-triton launchers, one module per op, imported only by :mod:`mingru_jax.dispatch`.

``LAUNCHERS`` maps an op name to a loader returning the module that launches its kernel from
``mingru_kernels``, and ``REGISTRY`` is that map as the shared seam reads it
(:class:`mingru_kernels._seam.Registry`; ``mingru._launch`` is built the same way). Importing
this package never imports Triton or jax-triton; a launcher module is imported only when
dispatch routes a call to it.

Each launcher module provides (the same protocol as ``mingru._launch``):

* ``unsupported_reason(*args, **kwargs) -> str | None`` — why the kernel cannot run this call
  (dtype, block size, ...), or ``None``;
* ``prefer_over_eager(*args, **kwargs) -> bool`` (optional) — whether ``auto`` should pick
  the kernel for this shape class (``False`` where eager is the faster path);
* ``run(*args, **kwargs)`` — the op with the eager twin's outputs; jit-, grad- (a
  ``jax.custom_vjp`` over the backward kernel) and vmap-compatible.
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

from mingru_jax._launch._jax_triton import import_jax_triton
from mingru_kernels._seam import Registry

# One loader per op, a static import each (as in mingru._launch).


def _linear_scan() -> ModuleType:
    from mingru_jax._launch import linear_scan

    return linear_scan


def _linear_recurrence() -> ModuleType:
    from mingru_jax._launch import linear_recurrence

    return linear_recurrence


def _parallel_scan_log() -> ModuleType:
    from mingru_jax._launch import parallel_scan_log

    return parallel_scan_log


def _matrix_affine_scan() -> ModuleType:
    from mingru_jax._launch import matrix_affine_scan

    return matrix_affine_scan


def _givens_recurrence() -> ModuleType:
    from mingru_jax._launch import givens_recurrence

    return givens_recurrence


def _delta_rule() -> ModuleType:
    from mingru_jax._launch import delta_rule

    return delta_rule


def _mingru_cell() -> ModuleType:
    from mingru_jax._launch import mingru_cell

    return mingru_cell


def _givens_cell() -> ModuleType:
    from mingru_jax._launch import givens_cell

    return givens_cell


def _rotation_cell() -> ModuleType:
    from mingru_jax._launch import rotation_cell

    return rotation_cell


LAUNCHERS: dict[str, Callable[[], ModuleType]] = {
    "linear_scan": _linear_scan,
    "linear_recurrence": _linear_recurrence,
    "parallel_scan_log": _parallel_scan_log,
    "matrix_affine_scan": _matrix_affine_scan,
    "givens_recurrence": _givens_recurrence,
    "delta_rule": _delta_rule,
    "mingru_cell": _mingru_cell,
    "givens_cell": _givens_cell,
    "rotation_cell": _rotation_cell,
}

REGISTRY = Registry("mingru_jax", LAUNCHERS)
