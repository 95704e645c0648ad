"""Thin jax-triton launchers, one module per op, imported only by :mod:`mingru_jax.dispatch`.

``LAUNCHERS`` maps an op name to a loader returning the module that launches its kernel from
``mingru_kernels``, and ``REGISTRY`` is that map as the shared seam reads it
(:class:`mingru_kernels._seam.Registry`, as in ``mingru._launch``; here the loaders import by
name, :func:`mingru_kernels._seam.import_loaders`). Importing this package never imports
Triton or jax-triton; a launcher module is imported only when dispatch routes a call to it.

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
from mingru_kernels._seam import Registry, import_loaders

# Loaders that import by name: jax.jit traces plain Python, so the static imports that
# mingru._launch needs for torch.compile are not needed here.
LAUNCHERS: dict[str, Callable[[], ModuleType]] = import_loaders("mingru_jax._launch", (
    "linear_scan", "linear_recurrence", "parallel_scan_log", "matrix_affine_scan",
    "givens_recurrence", "delta_rule", "mingru_cell", "givens_cell", "rotation_cell",
))

REGISTRY = Registry("mingru_jax", LAUNCHERS)
