"""mingru — parallel-scan minGRU sequence mixers for PyTorch, with optional Triton kernels.

``import mingru`` never imports Triton; :func:`available` is the first call that may.

Example:
    >>> import torch, mingru
    >>> mixer = mingru.MinGRU(input_size=8, hidden_size=16)
    >>> mixer(torch.randn(2, 10, 8)).shape
    torch.Size([2, 10, 16])
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# PyTorch is an extra, not a dependency (a Flax user installs no torch). Checked without
# importing it, so `import mingru` stays cheap.
if importlib.util.find_spec("torch") is None:
    raise ImportError(
        "mingru is the PyTorch frontend of mingru-scans and needs PyTorch: install the extra "
        "with pip install '.[torch]' from a checkout of this repository (the Flax frontend is "
        "mingru_jax, extra '.[jax]')"
    )

# Public name -> defining module. Resolved on first attribute access so that importing the
# package stays cheap and never pulls in optional backends.
_EXPORTS: dict[str, str] = {
    "available": "mingru.dispatch",
    "use_backend": "mingru.dispatch",
    "scan_mode": "mingru.dispatch",
    "MinGRUFallbackWarning": "mingru.dispatch",
    "parallel_scan_log": "mingru.scans",
    "linear_scan": "mingru.scans",
    "linear_recurrence": "mingru.scans",
    "matrix_scan": "mingru.scans",
    "matrix_affine_scan": "mingru.scans",
    "check_cu_seqlens": "mingru.scans",
    "mingru_cell": "mingru.cells",
    "signed_mingru_cell": "mingru.cells",
    "MinGRU": "mingru.mixers.log",
    "SignedMinGRU": "mingru.mixers.signed",
    "RotationMinGRU": "mingru.mixers.rotation",
    "GivensMinGRU": "mingru.mixers.givens",
    "DeltaMinGRU": "mingru.mixers.delta",
    "MinGRUBlock": "mingru.block",
    "MinGRUStack": "mingru.stack",
    "MinGRULM": "mingru.lm",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'mingru' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)


if TYPE_CHECKING:  # static analysers see the real names
    from mingru.block import MinGRUBlock
    from mingru.cells import mingru_cell, signed_mingru_cell
    from mingru.dispatch import MinGRUFallbackWarning, available, scan_mode, use_backend
    from mingru.lm import MinGRULM
    from mingru.mixers.delta import DeltaMinGRU
    from mingru.mixers.givens import GivensMinGRU
    from mingru.mixers.log import MinGRU
    from mingru.mixers.rotation import RotationMinGRU
    from mingru.mixers.signed import SignedMinGRU
    from mingru.scans import (
        check_cu_seqlens,
        linear_recurrence,
        linear_scan,
        matrix_affine_scan,
        matrix_scan,
        parallel_scan_log,
    )
    from mingru.stack import MinGRUStack
