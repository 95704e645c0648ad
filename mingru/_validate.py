"""Argument checks shared by the scans and the mixers: clear errors naming the argument."""

from __future__ import annotations

from collections.abc import Sequence

import torch

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def float_tensor(x: object, name: str, ndim: int, shape: str) -> torch.Tensor:
    """Check ``x`` is a floating tensor of rank ``ndim``; ``shape`` describes it for errors."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of shape {shape}; got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating tensor (float16, bfloat16, float32 or float64); "
            f"got {x.dtype}"
        )
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape} ({ndim} dims); got {tuple(x.shape)}")
    return x


def floating(x: object, name: str) -> torch.Tensor:
    """Check ``x`` is a floating tensor of any rank (the twin of ``mingru_jax._validate``)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor; got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a floating tensor; got {x.dtype}")
    return x


def same_kind(tensors: Sequence[tuple[str, torch.Tensor]]) -> None:
    """All tensors share one dtype and one device."""
    (n0, t0), *rest = tensors
    for n, t in rest:
        if t.dtype != t0.dtype:
            raise TypeError(f"{n} must have the dtype of {n0} ({t0.dtype}); got {t.dtype}")
        if t.device != t0.device:
            raise ValueError(f"{n} must be on the device of {n0} ({t0.device}); got {t.device}")


def shape_is(x: torch.Tensor, name: str, expected: Sequence[int], shape: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {shape} = {tuple(expected)}; got {tuple(x.shape)}")


def nonempty_time(x: torch.Tensor, name: str) -> None:
    if x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one time step (dim 1); got {tuple(x.shape)}")
