"""Thin jax-triton launchers, one module per op, imported only by :mod:`mingru_jax.dispatch`.

``LAUNCHERS`` maps an op name (``"parallel_scan_log"``, ``"linear_scan"``,
``"linear_recurrence"``, ``"matrix_affine_scan"``, ``"givens_recurrence"``, ``"delta_rule"``,
``"mingru_cell"``, ``"givens_cell"``, ``"rotation_cell"``) to the module that
launches its kernel from ``mingru_kernels``. Importing this package never imports Triton or
jax-triton; a launcher module is imported only when dispatch routes a call to it.

Each launcher module provides (the same protocol as ``mingru._launch``):

* ``unsupported_reason(*args, **kwargs) -> str | None`` — why the kernel cannot run this call
  (dtype, block size, ...), or ``None``;
* ``prefer_over_eager(*args, **kwargs) -> bool`` (optional) — whether ``auto`` should pick
  the kernel for this shape class (``False`` where eager is the faster path);
* ``run(*args, **kwargs)`` — the op with the eager twin's outputs; jit-, grad- (a
  ``jax.custom_vjp`` over the backward kernel) and vmap-compatible.
"""

import os
from typing import Any


def import_jax_triton() -> Any:
    """Import jax-triton without letting it break PyTorch's Triton in the same process.

    jax-triton 0.3 sets ``TRITON_CACHE_DIR=""`` when imported; after that every Triton kernel
    that PyTorch compiles in this process fails with "Could not create or locate cache dir"
    (one process that runs both frontends). jax-triton's own launches do not use that cache,
    so the variable is put back as it was.
    """
    had = "TRITON_CACHE_DIR" in os.environ
    before = os.environ.get("TRITON_CACHE_DIR")
    try:
        import jax_triton
    finally:
        if had:
            os.environ["TRITON_CACHE_DIR"] = before
        else:
            os.environ.pop("TRITON_CACHE_DIR", None)
    return jax_triton


LAUNCHERS: dict[str, str] = {
    "linear_scan": "mingru_jax._launch.linear_scan",
    "linear_recurrence": "mingru_jax._launch.linear_recurrence",
    "parallel_scan_log": "mingru_jax._launch.parallel_scan_log",
    "matrix_affine_scan": "mingru_jax._launch.matrix_affine_scan",
    "givens_recurrence": "mingru_jax._launch.givens_recurrence",
    "delta_rule": "mingru_jax._launch.delta_rule",
    "mingru_cell": "mingru_jax._launch.mingru_cell",
    "givens_cell": "mingru_jax._launch.givens_cell",
    "rotation_cell": "mingru_jax._launch.rotation_cell",
}
