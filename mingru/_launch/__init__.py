"""Thin Triton launchers, one module per op, imported only by :mod:`mingru.dispatch`.

``LAUNCHERS`` maps an op name to the module that launches its kernel. Importing this package
never imports Triton; a launcher module is imported only when dispatch routes a call to it.

Each launcher module provides:

* ``unsupported_reason(*args, **kwargs) -> str | None`` — why the kernel cannot run this call
  (dtype, block size, ...), or ``None``;
* ``prefer_over_eager(*args, **kwargs) -> bool`` (optional) — whether ``auto`` should pick
  the kernel for this shape class (``False`` where it measured slower than eager);
* ``run(*args, **kwargs)`` — the op, differentiable, registered as a ``torch.library`` op.
"""

LAUNCHERS: dict[str, str] = {
    "matrix_affine_scan": "mingru._launch.matrix_affine_scan",
    "givens_recurrence": "mingru._launch.givens_recurrence",
    "linear_scan": "mingru._launch.linear_scan",
    "parallel_scan_log": "mingru._launch.parallel_scan_log",
}
