"""Plumbing shared by the elementwise-scan launchers (``linear_scan``, ``linear_recurrence``,
``parallel_scan_log``, ``mingru_cell``).

Planning (tile sizes and strategy) is pure Python in
:mod:`mingru_kernels.launch._elementwise`; this module feeds it the device's SM count and the
forced plan choices (:mod:`mingru_kernels.launch.switches`), allocates the scratch buffers,
and answers ``unsupported_reason`` for both launchers.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Mapping
from typing import Any

import torch

from mingru._launch._alloc import new_tensor
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import _elementwise as elementwise_plan
from mingru_kernels.launch import switches

SUPPORTED_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def unsupported_reason(x: torch.Tensor) -> str | None:
    """Why the elementwise kernels cannot take ``x`` (the first input), or ``None``."""
    dtype = x.dtype
    if dtype not in SUPPORTED_DTYPES:
        if dtype == torch.float64:
            return "float64 runs eager (the kernels take float16, bfloat16 and float32)"
        return f"dtype {dtype} is not supported (the kernels take float16, bfloat16, float32)"
    if x.is_cuda:  # the hot path: no torch.device object built
        return None
    if x.device.type == "cpu" and interpreter_mode():
        return None
    return f"inputs are on {x.device}, not a CUDA device"


@functools.cache
def _sm_count(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def sm_count(x: torch.Tensor) -> int:
    """The SM count of the GPU holding ``x`` (cached per device); 0 on the host."""
    if x.device.type != "cuda":
        return 0
    return _sm_count(x.device.index if x.device.index is not None
                     else torch.cuda.current_device())


def make_plan(op: str, x: torch.Tensor, tiles: Mapping[str, Any] | None = None,
              shape: tuple[int, int, int] | None = None) -> Mapping[str, int | str]:
    """The launch plan of ``op`` for a ``(B, T, D)`` scan input ``x`` on its device (read-only);
    ``tiles`` are the op's tuned tiles (its launch module's ``TILES``, or its backward's);
    ``shape`` is the state shape ``(B, T, D)`` when ``x`` has another (the cells' gates).

    Called inside the custom ops' real implementations (never while ``torch.compile``
    traces), so forced choices and the device query stay out of the graph. Plans are cached
    per shape, device and forced choices: planning is pure Python on the hot path of every
    call.
    """
    choices = switches.plan_choices(op)
    n_sm = sm_count(x)
    B, T, D = x.shape if shape is None else shape
    return _cached_plan(B, T, D, n_sm=n_sm, choices=tuple(sorted(choices.items())),
                        tiles=tuple(sorted((tiles or {}).items())))


@functools.lru_cache(maxsize=1024)
def _cached_plan(B: int, T: int, D: int, *, n_sm: int, choices: tuple[tuple[str, Any], ...],
                 tiles: tuple[tuple[str, Any], ...] = ()) -> Mapping[str, int | str]:
    kwargs = {**dict(tiles), **dict(choices)}
    if n_sm:
        kwargs["n_sm"] = n_sm
    return types.MappingProxyType(elementwise_plan.plan(B, T, D, **kwargs))


def run_scan(kernel: Any, cfg: Mapping[str, int | str], shape: tuple[int, int, int], *,
             tensors: Mapping[str, torch.Tensor], **arguments: Any) -> None:
    """Launch a single-state scan whose kernels have a look-back mode with the plan's
    strategy: the walk, or the single pass of the look-back.

    ``kernel[grid](**tensors, vals_ptr=values, status_ptr=status, T=..., D=..., chunk_len=...,
    n_chunks=..., n_dblk=..., MODE=..., BLOCK_T=..., BLOCK_D=..., LOOP_STAGES=...,
    num_warps=..., **arguments)`` for a ``shape = (B, T, D)`` state: ``tensors`` are the
    kernel's pointer arguments by parameter name, the first one giving the device;
    ``(vals_ptr, status_ptr)`` are the look-back's scratch buffers (:func:`lookback_scratch`;
    for the walk, which reads neither, the first tensor stands in); the sizes, ``MODE`` and the
    tiles come from the plan ``cfg``; ``arguments`` are the kernel's other parameters (strides,
    flags) by name.
    """
    B, T, D = shape
    first = next(iter(tensors.values()))
    if cfg["strategy"] == "walk":
        values = status = first
        mode = elementwise_plan.WALK
    elif cfg["strategy"] == "lookback":
        values, status = lookback_scratch(B, cfg, D, device=first.device)
        mode = elementwise_plan.LOOKBACK
    else:
        raise ValueError(f"this op's kernels run the walk or the look-back; got {cfg['strategy']!r}")
    kernel[elementwise_plan.grid(cfg, B)](
        **tensors, vals_ptr=values, status_ptr=status, **elementwise_plan.size_kwargs(cfg, T, D),
        MODE=mode, **elementwise_plan.launch_kwargs(cfg), **arguments)


def lookback_scratch(B: int, cfg: Mapping[str, int | str], D: int,
                     *, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """The look-back strategy's buffers: fp32 ``(B, n_chunks, 3, D)`` chunk values (written
    before they are read) and the int32 status words, zeroed (layout in
    :func:`mingru_kernels._scan_common.lookback_carry`; the first word is the plan's
    ``lookback_stride``, which tests set above 1 so that look-backs walk through aggregates)."""
    values_shape, n_status = elementwise_plan.lookback_shapes(cfg, B, D)
    values = new_tensor(values_shape, torch.float32, device)
    status = torch.zeros(n_status, dtype=torch.int32, device=device)
    stride = int(cfg.get("lookback_stride", 1))
    if stride > 1:
        status[0] = stride
    return values, status


def scratch(n: int, B: int, cfg: Mapping[str, int | str], D: int,
            device: torch.device) -> tuple[torch.Tensor, ...]:
    """``n`` fp32 ``(B, n_chunks, D)`` buffers of chunk maps or carries (the chunked
    strategy), carved out of one allocation (one allocator call instead of ``n``)."""
    block = new_tensor((n, B, int(cfg["n_chunks"]), D), torch.float32, device)
    return block.unbind(0)
