"""Argument checks shared by the scans and the mixers: clear errors naming the argument.

Checks read shapes, dtypes and devices, never values, except :func:`no_nan` on the initial
states of a public call (eager calls only: see :func:`checked_call`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from mingru_kernels._checks import ArrayKind, OncePerCall, check_float, nonempty_time, shape_is

__all__ = [
    "FLOAT_DTYPES", "check_states", "checked_call", "checks_state", "float_tensor", "floating",
    "no_nan", "nonempty_time", "same_kind", "shape_is", "states_trusted", "trusted_states",
]

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_TENSOR = ArrayKind((torch.Tensor,), "torch.Tensor", "tensor", float_dtypes=FLOAT_DTYPES)


def float_tensor(x: object, name: str, ndim: int, shape: str) -> torch.Tensor:
    """Check ``x`` is a floating tensor of rank ``ndim``; ``shape`` describes it for errors."""
    check_float(x, name, ndim=ndim, shape=shape, kind=_TENSOR)
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


# The NaN check of initial states, once per public call and in eager calls only (not while
# torch.compile traces): check_states(states) at an entry; checked_call(states, fn, *args,
# **kwargs) runs fn after it, and the calls fn makes (a stack's blocks, a block's mixer) skip
# it; @checks_state("h_0") does the same for a public call whose argument h_0 is a state.
_ONCE = OncePerCall("mingru_states_checked", no_nan=no_nan, tracing=torch.compiler.is_compiling)
check_states = _ONCE.check_states
checked_call = _ONCE.checked_call
checks_state = _ONCE.checks_state
# States the library computed itself (a prefill's chunks): no value check reads them.
trusted_states = _ONCE.trusted
states_trusted = _ONCE.is_trusted
