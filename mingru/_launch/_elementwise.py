"""Plumbing shared by the elementwise-scan launchers (``linear_scan``, ``parallel_scan_log``).

Planning (tile sizes, walk vs chunked) is pure Python in :mod:`mingru_kernels._scan_common`;
this module feeds it the device's SM count and any :func:`plan_override`, allocates the
scratch buffers, and answers ``unsupported_reason`` for both launchers (allocation itself is
:mod:`mingru._launch._alloc`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import types
from collections.abc import Iterator, Mapping
from typing import Any

import torch
from mingru_kernels import _scan_common as C

from mingru._launch._alloc import new_tensor
from mingru.dispatch import interpreter_mode

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_PLAN_KEYS = ("strategy", "block_t", "block_d", "chunk_len", "num_warps", "num_stages")

_overrides: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "mingru_elementwise_plan", default=None
)


@contextlib.contextmanager
def plan_override(**overrides: Any) -> Iterator[None]:
    """Force launch-plan choices for the elementwise scans called inside the block.

    Keys: ``strategy`` (``"walk"`` / ``"chunked"``), ``block_t``, ``block_d``, ``chunk_len``
    (a multiple of ``block_t``), ``num_warps``, ``num_stages``. For tests and tuning sweeps; results never
    depend on the plan, only speed does.

    Example:
        >>> import torch, mingru
        >>> from mingru._launch._elementwise import plan_override
        >>> with plan_override(strategy="chunked", block_t=4, chunk_len=8):
        ...     pass  # mingru.linear_scan(...) here runs the 3-phase chunked kernels
    """
    bad = set(overrides) - set(_PLAN_KEYS)
    if bad:
        raise ValueError(f"plan_override takes {', '.join(_PLAN_KEYS)}; got {sorted(bad)}")
    token = _overrides.set({**(_overrides.get() or {}), **overrides})
    try:
        yield
    finally:
        _overrides.reset(token)


def unsupported_reason(x: torch.Tensor) -> str | None:
    """Why the elementwise kernels cannot take ``x`` (the first input), or ``None``."""
    if x.dtype == torch.float64:
        return "float64 runs eager (the kernels take float16, bfloat16 and float32)"
    if x.dtype not in SUPPORTED_DTYPES:
        return f"dtype {x.dtype} is not supported (the kernels take float16, bfloat16, float32)"
    if x.device.type == "cuda":
        return None
    if x.device.type == "cpu" and interpreter_mode():
        return None
    return f"inputs are on {x.device}, not a CUDA device"


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def make_plan(x: torch.Tensor) -> Mapping[str, int | str]:
    """The launch plan for a ``(B, T, D)`` scan input ``x`` on its device (read-only).

    Called inside the custom ops' real implementations (never while ``torch.compile``
    traces), so :func:`plan_override` and the device query stay out of the graph. Plans are
    cached per shape, device and override: planning is pure Python on the hot path of every
    call.
    """
    overrides = _overrides.get()
    n_sm = 0
    if x.is_cuda:
        index = x.device.index if x.device.index is not None else torch.cuda.current_device()
        n_sm = _sm_count(index)
    B, T, D = x.shape
    return _cached_plan(B, T, D, n_sm, tuple(sorted(overrides.items())) if overrides else ())


@functools.lru_cache(maxsize=1024)
def _cached_plan(B: int, T: int, D: int, n_sm: int,
                 overrides: tuple[tuple[str, Any], ...]) -> Mapping[str, int | str]:
    kwargs = dict(overrides)
    if n_sm:
        kwargs["n_sm"] = n_sm
    return types.MappingProxyType(C.plan(B, T, D, **kwargs))


def scratch(n: int, B: int, cfg: Mapping[str, int | str], D: int,
            device: torch.device) -> tuple[torch.Tensor, ...]:
    """``n`` fp32 ``(B, n_chunks, D)`` buffers of chunk maps or carries, carved out of one
    allocation (one allocator call instead of ``n``)."""
    block = new_tensor((n, B, int(cfg["n_chunks"]), D), torch.float32, device)
    return block.unbind(0)


def launch_kwargs(cfg: Mapping[str, int | str]) -> dict[str, int]:
    """Compile-time block sizes, warps (and pipelining stages if set) for the scan kernels."""
    kw = dict(BLOCK_T=int(cfg["block_t"]), BLOCK_D=int(cfg["block_d"]),
              num_warps=int(cfg["num_warps"]))
    if int(cfg["num_stages"]):
        kw["num_stages"] = int(cfg["num_stages"])
    return kw


def carry_kwargs(cfg: Mapping[str, int | str]) -> dict[str, int]:
    """Compile-time sizes for the carry pass (phase 2)."""
    return dict(BLOCK_N=C.BLOCK_N, BLOCK_D=int(cfg["block_d"]), num_warps=int(cfg["num_warps"]))
