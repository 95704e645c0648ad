"""mingru_jax — the Flax NNX frontend of mingru-scans: the same mixers, scans and numbers as
the PyTorch frontend :mod:`mingru`, with optional Triton kernels through jax-triton.

``import mingru_jax`` imports neither Triton nor jax-triton (nor flax, until a module class
is first used); :func:`available` is the first call that may import Triton.

Example:
    >>> import jax, mingru_jax
    >>> from flax import nnx
    >>> mixer = mingru_jax.MinGRU(input_size=8, hidden_size=16, rngs=nnx.Rngs(0))
    >>> mixer(jax.numpy.ones((2, 10, 8))).shape
    (2, 10, 16)
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# JAX and Flax are an extra, not dependencies. Checked without importing them.
_missing = [name for name in ("jax", "flax") if importlib.util.find_spec(name) is None]
if _missing:
    raise ImportError(
        f"mingru_jax is the Flax frontend of mingru-scans and needs {' and '.join(_missing)}: "
        "install the extra with pip install '.[jax]' from a checkout of this repository (the "
        "PyTorch frontend is mingru, extra '.[torch]')"
    )

# Public name -> defining module. Resolved on first attribute access so that importing the
# package stays cheap and never pulls in optional backends.
_EXPORTS: dict[str, str] = {
    "available": "mingru_jax.dispatch",
    "use_backend": "mingru_jax.dispatch",
    "scan_mode": "mingru_jax.dispatch",
    "MinGRUFallbackWarning": "mingru_jax.dispatch",
    "parallel_scan_log": "mingru_jax.scans",
    "linear_scan": "mingru_jax.scans",
    "linear_recurrence": "mingru_jax.scans",
    "matrix_scan": "mingru_jax.scans",
    "matrix_affine_scan": "mingru_jax.scans",
    "check_cu_seqlens": "mingru_jax.scans",
    "mingru_cell": "mingru_jax.cells",
    "signed_mingru_cell": "mingru_jax.cells",
    "givens_cell": "mingru_jax.cells",
    "rotation_cell": "mingru_jax.cells",
    "MinGRU": "mingru_jax.mixers.log",
    "MinGRUCell": "mingru_jax.mixers.log",
    "SignedMinGRU": "mingru_jax.mixers.signed",
    "SignedMinGRUCell": "mingru_jax.mixers.signed",
    "RotationMinGRU": "mingru_jax.mixers.rotation",
    "RotationMinGRUCell": "mingru_jax.mixers.rotation",
    "GivensMinGRU": "mingru_jax.mixers.givens",
    "GivensMinGRUCell": "mingru_jax.mixers.givens",
    "DeltaMinGRU": "mingru_jax.mixers.delta",
    "DeltaMinGRUCell": "mingru_jax.mixers.delta",
    "MinGRUBlock": "mingru_jax.block",
    "MinGRUStack": "mingru_jax.stack",
    "MinGRULM": "mingru_jax.lm",
    "torch_to_nnx": "mingru_jax.convert",
    "nnx_to_torch": "mingru_jax.convert",
}

# Spelled out (not ``[*_EXPORTS]``) so linters see the TYPE_CHECKING imports as re-exports.
__all__ = [
    "DeltaMinGRU",
    "DeltaMinGRUCell",
    "GivensMinGRU",
    "GivensMinGRUCell",
    "MinGRU",
    "MinGRUBlock",
    "MinGRUCell",
    "MinGRUFallbackWarning",
    "MinGRULM",
    "MinGRUStack",
    "RotationMinGRU",
    "RotationMinGRUCell",
    "SignedMinGRU",
    "SignedMinGRUCell",
    "__version__",
    "available",
    "check_cu_seqlens",
    "givens_cell",
    "linear_recurrence",
    "linear_scan",
    "matrix_affine_scan",
    "matrix_scan",
    "mingru_cell",
    "nnx_to_torch",
    "parallel_scan_log",
    "rotation_cell",
    "scan_mode",
    "signed_mingru_cell",
    "torch_to_nnx",
    "use_backend",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mingru_jax' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # static analysers see the real names
    from mingru_jax.block import MinGRUBlock
    from mingru_jax.cells import givens_cell, mingru_cell, rotation_cell, signed_mingru_cell
    from mingru_jax.convert import nnx_to_torch, torch_to_nnx
    from mingru_jax.dispatch import MinGRUFallbackWarning, available, scan_mode, use_backend
    from mingru_jax.lm import MinGRULM
    from mingru_jax.mixers.delta import DeltaMinGRU, DeltaMinGRUCell
    from mingru_jax.mixers.givens import GivensMinGRU, GivensMinGRUCell
    from mingru_jax.mixers.log import MinGRU, MinGRUCell
    from mingru_jax.mixers.rotation import RotationMinGRU, RotationMinGRUCell
    from mingru_jax.mixers.signed import SignedMinGRU, SignedMinGRUCell
    from mingru_jax.scans import (
        check_cu_seqlens,
        linear_recurrence,
        linear_scan,
        matrix_affine_scan,
        matrix_scan,
        parallel_scan_log,
    )
    from mingru_jax.stack import MinGRUStack
