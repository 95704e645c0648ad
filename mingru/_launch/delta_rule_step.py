"""Triton launcher for one token of the delta-rule mixer: the custom op
``mingru::delta_rule_step_fwd`` (kernel in :mod:`mingru_kernels.delta_rule_step`).

Inference only. The kernel has no backward: for a call that needs gradients (grad mode on and
an input that requires grad) :func:`prefer_over_eager` says no, so ``auto`` runs the
differentiable eager twin (silently: no fallback warning, whose lock ``torch.compile`` cannot
trace), and :func:`run` refuses it, so ``triton`` raises. Decoding runs under
``torch.no_grad()`` / ``torch.inference_mode()`` and takes the kernel. The custom op itself
(reached directly) raises at the backward, saying so.

Outside ``torch.compile`` :func:`run` calls the implementation directly: the custom op's
dispatch would cost more host time than the kernel takes. Under ``torch.compile`` it calls the
custom op, whose fake implementation lets ``fullgraph=True`` trace the step and CUDA graphs
capture it.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._eager.delta_rule_step import step_dtype
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor
from mingru_kernels import delta_rule_step as delta_rule_step_kernels
from mingru_kernels.launch import delta_rule_step as meta

kernels = CachedKernels(delta_rule_step_kernels)

__all__ = ["INFERENCE_ONLY", "prefer_over_eager", "run", "unsupported_reason"]

Tensors2 = tuple[torch.Tensor, torch.Tensor]


INFERENCE_ONLY = ("MINGRU_SCAN=triton: cannot run delta_rule_step on Triton: the step kernel "
                  "is inference-only (no backward) and this call needs gradients; step under "
                  "torch.no_grad() or torch.inference_mode(), or under mingru.use_backend('auto') "
                  "(which runs the eager step when gradients are needed)")


def unsupported_reason(p: torch.Tensor, log_gamma: torch.Tensor | None = None,
                       h_prev: torch.Tensor | None = None, *, n_heads: int, nh: int, d_k: int,
                       d_v: int, eps: float) -> str | None:
    """Why the kernel cannot run this call, or ``None``: a dtype or device it does not take,
    or a ``d_k`` wider than its tile."""
    for x in (p, log_gamma, h_prev):
        why = None if x is None else elementwise.unsupported_reason(x)
        if why is not None:
            return why
    return meta.unsupported_size(d_k)


def prefer_over_eager(p: torch.Tensor, log_gamma: torch.Tensor | None = None,
                      h_prev: torch.Tensor | None = None, **sizes) -> bool:
    """Whether ``auto`` should pick the kernel: unless the call needs gradients (only the
    eager step has them), yes: one launch for the whole step, where eager launches several
    per micro-step."""
    return not _needs_gradients(p, log_gamma, h_prev)


def _needs_gradients(*tensors: torch.Tensor | None) -> bool:
    return torch.is_grad_enabled() and any(x is not None and x.requires_grad for x in tensors)


def run(p: torch.Tensor, log_gamma: torch.Tensor | None = None,
        h_prev: torch.Tensor | None = None, *, n_heads: int, nh: int, d_k: int, d_v: int,
        eps: float) -> Tensors2:
    """``(o (B, H, d_v), S (B, H, d_k, d_v))``, the eager twin's outputs
    (:func:`mingru._eager.delta_rule_step.delta_rule_step`); not differentiable: a
    ``RuntimeError`` when the call needs gradients."""
    if _needs_gradients(p, log_gamma, h_prev):
        raise RuntimeError(INFERENCE_ONLY)
    if torch.compiler.is_compiling():
        return delta_rule_step_fwd(p=p, log_gamma=log_gamma, h_prev=h_prev, n_heads=n_heads,
                                   nh=nh, d_k=d_k, d_v=d_v, eps=float(eps))
    return _forward(p, log_gamma, h_prev, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v,
                    eps=float(eps))


def _out_shapes(p: torch.Tensor, n_heads: int, *, d_k: int, d_v: int):
    B = p.shape[0]
    return (B, n_heads, d_v), (B, n_heads, d_k, d_v)


def _forward(p, log_gamma, h_prev, *, n_heads, nh, d_k, d_v, eps):
    if p.stride(-1) != 1:
        p = p.contiguous()
    h_prev = None if h_prev is None else h_prev.contiguous()
    dtype = step_dtype(p, log_gamma, h_prev)
    o_shape, s_shape = _out_shapes(p, n_heads, d_k=d_k, d_v=d_v)
    o = new_tensor(o_shape, dtype, p.device)
    S = new_tensor(s_shape, dtype, p.device)
    B = p.shape[0]
    if B:
        cfg = meta.config(d_k, d_v)
        lg_row, lg_col = (0, 0) if log_gamma is None else log_gamma.stride()
        if log_gamma is not None and log_gamma.shape[-1] == 1:
            lg_col = 0  # one rate for every head
        with device_guard(p):
            # An absent state or decay is never read: p stands in for it.
            kernels.delta_rule_step_fwd_kernel[meta.grid(B, n_heads, d_v=d_v, cfg=cfg)](
                p_ptr=p, lg_ptr=p if log_gamma is None else log_gamma,
                s_ptr=p if h_prev is None else h_prev, o_ptr=o, out_s_ptr=S, p_row=p.stride(0),
                lg_row=lg_row, lg_col=lg_col, H=n_heads, NH=nh, DK=d_k, DV=d_v, eps=eps,
                HAS_STATE=h_prev is not None, HAS_DECAY=log_gamma is not None, **cfg)
    return o, S


@torch.library.custom_op("mingru::delta_rule_step_fwd", mutates_args=())
def delta_rule_step_fwd(p: torch.Tensor, log_gamma: torch.Tensor | None,
                        h_prev: torch.Tensor | None, n_heads: int, nh: int, d_k: int, d_v: int,
                        eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward op: ``(o (B, H, d_v), S (B, H, d_k, d_v))`` from ``p (B, W)``, ``log_gamma``
    ``(B, H) | (B, 1)`` and ``h_prev (B, H, d_k, d_v)`` (each optional but ``p``)."""
    return _forward(p, log_gamma, h_prev, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v, eps=eps)


@delta_rule_step_fwd.register_fake
def _(p, log_gamma, h_prev, n_heads, nh, d_k, d_v, eps):
    dtype = step_dtype(p, log_gamma, h_prev)
    return tuple(p.new_empty(shape, dtype=dtype)
                 for shape in _out_shapes(p, n_heads, d_k=d_k, d_v=d_v))


def _setup_context(ctx, inputs, output) -> None:
    """Nothing to save: the backward only refuses."""


def _refuse_backward(ctx, do, dS):
    raise RuntimeError(
        "mingru::delta_rule_step_fwd has no backward: the fused delta-rule step is "
        "inference-only. Differentiate through DeltaMinGRU.step under "
        "mingru.use_backend('eager') or 'auto' (calls that need gradients run the eager step), "
        "or through DeltaMinGRU.forward")


delta_rule_step_fwd.register_autograd(_refuse_backward, setup_context=_setup_context)
