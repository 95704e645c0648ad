"""Argument checks shared by the scans and the mixers: clear errors naming the argument.

Checks read shapes, dtypes and devices, never values, except :func:`no_nan` on the initial
states of a public call (eager calls only: see :func:`checked_call`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TypeVar

import torch

R = TypeVar("R")

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


# True inside a public call whose initial states were checked: the calls it makes (a stack's
# blocks, a block's mixer) skip the check, so one public call checks each state once.
_STATES_CHECKED: ContextVar[bool] = ContextVar("mingru_states_checked", default=False)


def no_nan(states: Sequence[tuple[str, object]]) -> None:
    """A ``ValueError`` naming the first of the named initial states that holds NaN (a NaN
    state makes every later state NaN). ``None`` and non-tensors pass (their own checks name
    them). One device-to-host copy for all of them; nothing while a CUDA graph captures."""
    present = [(n, t) for n, t in states if isinstance(t, torch.Tensor)
               and t.is_floating_point() and t.device.type != "meta"]
    if not present:
        return
    if any(t.is_cuda for _, t in present) and torch.cuda.is_current_stream_capturing():
        return
    device = present[0][1].device
    flags = torch.stack([torch.isnan(t).any().to(device) for _, t in present]).tolist()
    for (name, t), bad in zip(present, flags, strict=True):
        if bad:
            raise ValueError(
                f"{name} holds NaN ({int(torch.isnan(t).sum())} of {t.numel()} entries): a "
                "NaN initial state makes every later state NaN (pass None for the default)")


def check_states(states: Sequence[tuple[str, object]]) -> bool:
    """:func:`no_nan` on ``states`` at the entry of a public call that takes an initial state
    (``linear_recurrence``, and through :func:`checked_call` a mixer's ``forward``, a
    block's, a stack's). The check reads the device (one small copy), so it runs only in
    eager calls: not while ``torch.compile`` traces, and not inside a :func:`checked_call`
    (whose entry checked its own states); ``step`` never checks. Returns whether it ran."""
    if torch.compiler.is_compiling() or _STATES_CHECKED.get():
        return False
    no_nan(states)
    return True


def checked_call(states: Sequence[tuple[str, object]], fn: Callable[..., R], /,
                 *args: object, **kwargs: object) -> R:
    """``fn(*args, **kwargs)`` after :func:`check_states` on ``states``; the calls ``fn``
    makes (a stack's blocks, a block's mixer) skip the check."""
    if not check_states(states):
        return fn(*args, **kwargs)
    token = _STATES_CHECKED.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _STATES_CHECKED.reset(token)


def checks_state(param: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate a public call whose argument ``param`` is an initial state: the call runs
    through :func:`checked_call` with that state named ``param``."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        index = list(inspect.signature(fn).parameters).index(param)

        @functools.wraps(fn)
        def call(*args: object, **kwargs: object) -> R:
            state = kwargs.get(param, args[index] if index < len(args) else None)
            return checked_call([(param, state)], fn, *args, **kwargs)

        return call

    return decorate
