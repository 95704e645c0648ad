"""Output and scratch allocation and the device guard, shared by every PyTorch launcher.

Outputs are uninitialised in production. Tests NaN-fill them first (:func:`poison`, or a
launcher's own module flag passed as ``poisoned``) so any element a kernel forgets to write
fails the comparison.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from mingru.dispatch import interpreter_mode


def poison() -> bool:
    """Whether to NaN-fill outputs and scratch before launches: in interpreter mode and with
    ``MINGRU_POISON_OUTPUTS=1``. Off in production on GPU: the fill would cost one more pass
    over memory."""
    return interpreter_mode() or os.environ.get("MINGRU_POISON_OUTPUTS", "") == "1"


def new_tensor(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
               poisoned: bool | None = None) -> torch.Tensor:
    """An uninitialised output or scratch tensor, NaN-filled when ``poisoned`` (default:
    :func:`poison`)."""
    if poison() if poisoned is None else poisoned:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    return torch.empty(shape, dtype=dtype, device=device)


def device_guard(x: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """Make ``x``'s GPU current for the launch (Triton launches on the current device)."""
    return torch.cuda.device(x.device) if x.is_cuda else contextlib.nullcontext()
