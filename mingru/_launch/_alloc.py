"""Output and scratch allocation and the device guard, shared by every PyTorch launcher.

Outputs are uninitialised in production. Under the poison switch
(:func:`mingru_kernels.launch.switches.poison_outputs`: interpreter mode,
``MINGRU_POISON_OUTPUTS=1`` or ``switches.forced(poison=True)``) they are NaN-filled first, so
any element a kernel forgets to write fails the comparison.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from mingru_kernels.launch.switches import poison_outputs as poison

__all__ = ["device_guard", "new_tensor", "poison"]


def new_tensor(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device,
               *, poisoned: bool | None = None) -> torch.Tensor:
    """An uninitialised output or scratch tensor, NaN-filled when ``poisoned`` (default:
    :func:`poison`)."""
    if poison() if poisoned is None else poisoned:
        return torch.full(shape, float("nan"), dtype=dtype, device=device)
    if not shape:
        return torch.empty((), dtype=dtype, device=device)
    # The sizes unpacked: torch parses separate ints at less host cost than a ``torch.Size``
    # or tuple argument.
    return torch.empty(*shape, dtype=dtype, device=device)


_NO_GUARD = contextlib.nullcontext()


def device_guard(x: torch.Tensor) -> contextlib.AbstractContextManager[Any]:
    """Make ``x``'s GPU current for the launch (Triton launches on the current device); no
    switch (and none of ``torch.cuda.device``'s host cost) when it already is."""
    if not x.is_cuda:
        return _NO_GUARD
    index = x.get_device()
    return _NO_GUARD if index == torch.cuda.current_device() else torch.cuda.device(index)
