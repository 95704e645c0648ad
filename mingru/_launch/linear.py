"""Triton launcher for a decode step's GEMMs (op ``linear``, kernels in
:mod:`mingru_kernels.linear`): the inference-only custom op ``mingru::linear_fwd``.

Called by :func:`mingru.mixers._common.fused_linear` inside a captured decode step
(:class:`mingru._step_fusion.StepFusion`) only; registered with ``torch.library`` all the same,
like every launcher. No backward: nothing that needs a gradient reaches it.
"""

from __future__ import annotations

import torch

from mingru import _step_fusion as step_fusion
from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor
from mingru_kernels import linear as linear_kernels
from mingru_kernels.launch import linear as meta

kernels = CachedKernels(linear_kernels)

__all__ = ["INTERPRETER_SMS", "prefer_over_eager", "run", "unsupported_reason"]

INTERPRETER_SMS = 8
"""The SM count the split plans for on the host (Triton's interpreter): small, so that tests
at small shapes still split the reduction."""


def unsupported_reason(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                       *, gelu: bool = False) -> str | None:
    """Why the kernels cannot compute ``x Wᵀ + b``, or ``None``."""
    reason = elementwise.unsupported_reason(x)
    if reason is not None:
        return reason
    if weight.dtype != x.dtype or (bias is not None and bias.dtype != x.dtype):
        return f"the weights ({weight.dtype}) are not in the input's dtype ({x.dtype})"
    if not weight.is_contiguous():
        return "the weight is not contiguous"
    return None


def prefer_over_eager(x: torch.Tensor, weight: torch.Tensor, *args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernels: inside a captured decode step, for float32
    GEMMs of :data:`mingru_kernels.launch.linear.MIN_ROWS` to ``MAX_ROWS`` rows."""
    rows = x.numel() // x.shape[-1] if x.shape[-1] else 0
    return (step_fusion.active() is not None
            and meta.prefer_fused(rows, float32=x.dtype == torch.float32))


def run(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
        *, gelu: bool = False) -> torch.Tensor:
    """``x Wᵀ + b`` (then GELU when ``gelu``) for ``x (..., K)``, ``W (N, K)``, ``b (N,)``:
    ``(..., N)`` in ``x``'s dtype, float32 accumulation. Inference only."""
    if torch.compiler.is_compiling():
        return linear_fwd(x, weight, bias, gelu=bool(gelu))
    return _fwd_impl(x, weight, bias, gelu=bool(gelu))


def _fwd_impl(x, weight, bias, gelu):
    K, N = x.shape[-1], weight.shape[0]
    x2 = x.contiguous().view(-1, K)
    M = x2.shape[0]
    y = new_tensor((*x.shape[:-1], N), x.dtype, x.device)
    if M == 0 or N == 0:
        return y
    n_sm = elementwise.sm_count(x) if x.is_cuda else INTERPRETER_SMS
    cfg = meta.config(M, N, K, n_sm=n_sm)
    grid = meta.grid(cfg, M, N)
    split = cfg["SPLIT"]
    parts = new_tensor((split, M, N), torch.float32, x.device) if split > 1 else y
    counts = _counters(grid[0] * grid[1], x.device) if split > 1 else y
    b = x2 if bias is None else bias
    with device_guard(x):
        kernels.linear_fwd_kernel[grid](
            x_ptr=x2, w_ptr=weight, b_ptr=b, y_ptr=y, part_ptr=parts, count_ptr=counts, M=M,
            N=N, K=K, k_per_split=cfg["k_per_split"], HAS_BIAS=bias is not None, GELU=gelu,
            SPLIT=split, BLOCK_M=cfg["BLOCK_M"], BLOCK_N=cfg["BLOCK_N"],
            BLOCK_K=cfg["BLOCK_K"], num_warps=cfg["num_warps"])
    return y


def _counters(size: int, device: torch.device) -> torch.Tensor:
    # A captured step's GEMMs share its buffer; elsewhere (direct calls, torch.compile) each
    # call zeroes its own.
    fusion = step_fusion.active()
    if fusion is None:
        return torch.zeros(size, dtype=torch.int32, device=device)
    return fusion.counters(device, size)


@torch.library.custom_op("mingru::linear_fwd", mutates_args=())
def linear_fwd(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None,
               gelu: bool) -> torch.Tensor:
    """Inference op: ``x Wᵀ + b``, then GELU when ``gelu``."""
    return _fwd_impl(x, weight, bias, gelu=gelu)


@linear_fwd.register_fake
def _(x, weight, bias, gelu):
    return x.new_empty((*x.shape[:-1], weight.shape[0]))
