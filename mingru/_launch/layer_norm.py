"""Triton launcher for the blocks' LayerNorm: the custom ops ``mingru::layer_norm_fwd`` and
``mingru::layer_norm_bwd`` (kernels in :mod:`mingru_kernels.layer_norm`), and the inference
op ``mingru::add_layer_norm_fwd`` (a residual add and the norm after it, for decode steps).

Called by :func:`mingru.block.layer_norm` and :func:`mingru.block.add_layer_norm` outside
``torch.compile`` (inductor fuses a norm and its cast by itself); registered with
``torch.library`` all the same, like every launcher.
Backward saves ``x``, the weight and each row's ``mean`` and ``rstd``.
"""

from __future__ import annotations

import torch

from mingru import _step_fusion as step_fusion
from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor
from mingru._launch._op import dual_entry
from mingru_kernels import layer_norm as layer_norm_kernels
from mingru_kernels.launch import layer_norm as meta

kernels = CachedKernels(layer_norm_kernels)

__all__ = ["INTERPRETER_SMS", "prefer_over_eager", "run", "run_add", "unsupported_reason"]

INTERPRETER_SMS = 4
"""The SM count the backward plans its groups for on the host (Triton's interpreter): a few
groups, so tests cover the group loop and the partial sums."""


def unsupported_reason(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                       eps: float, out_dtype: torch.dtype | None = None) -> str | None:
    """Why the kernels cannot normalise ``x``, or ``None`` (any output dtype is served)."""
    return elementwise.unsupported_reason(x) or meta.unsupported_size(x.shape[-1])


def prefer_over_eager(x: torch.Tensor, *args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernels: for inputs of at least
    :data:`mingru_kernels.launch.layer_norm.AUTO_MIN_ELEMENTS` elements (``2^24``). Below
    that their extra host time (a Python forward and backward against PyTorch's C++ ones)
    outweighs their GPU time saved. ``MINGRU_SCAN=triton`` runs them at every size, and so
    does a step inside :class:`mingru._step_fusion.StepFusion` (a captured decode step, where
    host time is spent once, at capture, and each launch saved is GPU time per token)."""
    return meta.prefer_fused(x.numel()) or step_fusion.active() is not None


def run(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float,
        out_dtype: torch.dtype) -> torch.Tensor:
    """``LayerNorm(x)`` over the last axis in float32, as ``out_dtype``; differentiable in
    ``x``, ``weight`` and ``bias``."""
    return _entry(x, weight, bias, float(eps), out_dtype)[0]


def run_add(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
            bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, LayerNorm(s))`` with ``s = x + residual`` (same shape and dtype), in one launch;
    both in ``x``'s dtype, the norm computed in float32 from ``s`` as stored. Inference only:
    no gradient flows through it."""
    if torch.compiler.is_compiling():
        return add_layer_norm_fwd(x, residual, weight, bias=bias, eps=float(eps))
    return _add_fwd_impl(x, residual, weight, bias=bias, eps=float(eps))


def _add_fwd_impl(x, residual, weight, bias, eps):
    D = x.shape[-1]
    total = new_tensor(x.shape, x.dtype, x.device)
    y = new_tensor(x.shape, x.dtype, x.device)
    N = x.numel() // D if D else 0
    if N:
        cfg = meta.config(D)
        x2 = x.contiguous().view(-1, D)
        with device_guard(x):
            kernels.add_layer_norm_fwd_kernel[(N,)](
                x_ptr=x2, r_ptr=residual.contiguous().view(-1, D),
                w_ptr=x2 if weight is None else weight, b_ptr=x2 if bias is None else bias,
                s_ptr=total, y_ptr=y, D=D, eps=eps, HAS_W=weight is not None,
                HAS_B=bias is not None, BLOCK=cfg["BLOCK"], num_warps=cfg["num_warps"])
    return total, y


def _fwd_impl(x, weight, bias, eps, out_dtype):
    D = x.shape[-1]
    x2 = x.contiguous().view(-1, D)
    N = x2.shape[0]
    y = new_tensor(x.shape, out_dtype, x.device)
    stats = new_tensor((2, N), torch.float32, x.device)  # mean, rstd per row
    if N:
        cfg = meta.config(D)
        with device_guard(x):
            kernels.layer_norm_fwd_kernel[(N,)](
                x_ptr=x2, w_ptr=x2 if weight is None else weight,
                b_ptr=x2 if bias is None else bias, y_ptr=y, mean_ptr=stats[0],
                rstd_ptr=stats[1], D=D, eps=eps, HAS_W=weight is not None,
                HAS_B=bias is not None, BLOCK=cfg["BLOCK"], num_warps=cfg["num_warps"])
    return y, stats


def _bwd_impl(x, weight, stats, dy, bias_dtype):
    D = x.shape[-1]
    x2 = x.contiguous().view(-1, D)
    N = x2.shape[0]
    dx = new_tensor(x.shape, x.dtype, x.device)
    dw = x.new_empty(0) if weight is None else new_tensor((D,), weight.dtype, x.device)
    db = x.new_empty(0) if bias_dtype is None else new_tensor((D,), bias_dtype, x.device)
    if not N:
        return dx, dw.zero_(), db.zero_()
    n_sm = elementwise.sm_count(x) if x.is_cuda else INTERPRETER_SMS
    groups, rows = meta.bwd_groups(N, n_sm)
    partial = new_tensor((2, groups, D), torch.float32, x.device)
    cfg = meta.config(D)
    has_w, has_b = weight is not None, bias_dtype is not None
    with device_guard(x):
        kernels.layer_norm_bwd_kernel[(groups,)](
            x_ptr=x2, w_ptr=x2 if weight is None else weight,
            dy_ptr=dy.contiguous().view(-1, D), mean_ptr=stats[0], rstd_ptr=stats[1], dx_ptr=dx,
            dw_ptr=partial[0], db_ptr=partial[1], N=N, D=D, rows_per_group=rows, HAS_W=has_w,
            BLOCK=cfg["BLOCK"], num_warps=cfg["bwd_warps"])
        if has_w or has_b:
            kernels.layer_norm_bwd_sum_kernel[(meta.sum_grid(D),)](
                dw_part_ptr=partial[0], db_part_ptr=partial[1], dw_ptr=dw if has_w else partial,
                db_ptr=db if has_b else partial, groups=groups, D=D, HAS_W=has_w, HAS_B=has_b,
                BLOCK_G=meta.SUM_BLOCK_G, BLOCK_D=meta.SUM_BLOCK_D, num_warps=4)
    return dx, dw, db


@torch.library.custom_op("mingru::layer_norm_fwd", mutates_args=())
def layer_norm_fwd(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None,
                   eps: float, out_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward op: ``(y, stats)``; ``stats`` float32 ``(2, N)``: each row's mean and rstd."""
    return _fwd_impl(x, weight, bias, eps=eps, out_dtype=out_dtype)


@layer_norm_fwd.register_fake
def _(x, weight, bias, eps, out_dtype):
    N = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return (torch.empty_like(x, dtype=out_dtype, memory_format=torch.contiguous_format),
            x.new_empty((2, N), dtype=torch.float32))


@torch.library.custom_op("mingru::add_layer_norm_fwd", mutates_args=())
def add_layer_norm_fwd(x: torch.Tensor, residual: torch.Tensor, weight: torch.Tensor | None,
                       bias: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Inference op: ``(x + residual, LayerNorm(x + residual))``."""
    return _add_fwd_impl(x, residual, weight, bias=bias, eps=eps)


@add_layer_norm_fwd.register_fake
def _(x, residual, weight, bias, eps):
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            torch.empty_like(x, memory_format=torch.contiguous_format))


@torch.library.custom_op("mingru::layer_norm_bwd", mutates_args=())
def layer_norm_bwd(x: torch.Tensor, weight: torch.Tensor | None, stats: torch.Tensor,
                   dy: torch.Tensor, bias_dtype: torch.dtype | None
                   ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward op: ``(dx, dweight, dbias)``, the parameter gradients in the weight's and
    ``bias_dtype`` (empty where there is no weight, or ``bias_dtype`` is ``None``)."""
    return _bwd_impl(x, weight, stats, dy=dy, bias_dtype=bias_dtype)


@layer_norm_bwd.register_fake
def _(x, weight, stats, dy, bias_dtype):
    D = x.shape[-1]
    return (torch.empty_like(x, memory_format=torch.contiguous_format),
            x.new_empty(0) if weight is None else weight.new_empty((D,)),
            x.new_empty(0) if bias_dtype is None else x.new_empty((D,), dtype=bias_dtype))


def _setup_context(ctx, inputs, output) -> None:
    x, weight, bias, _, _ = inputs
    _, stats = output
    ctx.bias_dtype = None if bias is None else bias.dtype
    ctx.has_weight = weight is not None
    ctx.mark_non_differentiable(stats)
    ctx.save_for_backward(x, weight, stats)
    ctx.set_materialize_grads(value=False)


def _backward_formula(ctx, dy, dstats, bwd=layer_norm_bwd):
    if dy is None:
        return None, None, None, None, None
    x, weight, stats = ctx.saved_tensors
    dx, dw, db = bwd(x, weight, stats, dy, ctx.bias_dtype)
    return (dx, dw if ctx.has_weight else None, None if ctx.bias_dtype is None else db, None, None)


_entry = dual_entry("layer_norm", layer_norm_fwd, _fwd_impl, setup_context=_setup_context,
                    formula=_backward_formula, bwd_impl=_bwd_impl)
