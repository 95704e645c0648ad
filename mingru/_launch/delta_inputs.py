"""Triton launcher for the delta-rule mixer's inputs: the custom ops ``mingru::delta_inputs_fwd``
and ``mingru::delta_inputs_bwd`` (kernels in :mod:`mingru_kernels.delta_inputs`).

Called by :func:`mingru.cells.delta_inputs` outside ``torch.compile`` (inductor fuses the split,
norm and sigmoid by itself); registered with ``torch.library`` all the same, like every
launcher. Backward saves the outputs ``k̂`` and ``β`` (which the delta rule keeps anyway) and
the key norms, not the projection.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor
from mingru._launch._op import dual_entry
from mingru_kernels import delta_inputs as delta_inputs_kernels
from mingru_kernels.launch import delta_inputs as meta

kernels = CachedKernels(delta_inputs_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

Tensors4 = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def unsupported_reason(p: torch.Tensor, n_heads: int, nh: int, d_k: int, d_v: int,
                       eps: float) -> str | None:
    """Why the kernels cannot split this projection, or ``None``."""
    return elementwise.unsupported_reason(p) or meta.unsupported_size(d_k, d_v, nh * n_heads)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernels: always (one read and one write of the
    projection each way, where eager moves it about five times)."""
    return True


def run(p: torch.Tensor, n_heads: int, nh: int, d_k: int, d_v: int, eps: float) -> Tensors4:
    """``q (..., H, d_k)``, ``k (..., nh, H, d_k)`` (normalised), ``v (..., nh, H, d_v)``,
    ``β (..., nh, H)`` from ``p (..., W)``, contiguous, in ``p``'s dtype; differentiable in
    ``p``."""
    lead = p.shape[:-1]
    q, k, v, beta, _ = _entry(p, n_heads, nh, d_k, d_v, float(eps))
    return (q.view(*lead, n_heads, d_k), k.view(*lead, nh, n_heads, d_k),
            v.view(*lead, nh, n_heads, d_v), beta.view(*lead, nh, n_heads))


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` as ``(N, W)`` rows with unit column stride and row stride ``W``."""
    x2 = x.reshape(-1, x.shape[-1])
    return x2 if x2.stride(-1) == 1 and x2.stride(0) == x2.shape[-1] else x2.contiguous()


def _fwd_impl(p, n_heads, nh, d_k, d_v, eps):
    p2 = _rows(p)
    N, W = p2.shape
    G = nh * n_heads
    *shapes, norm_shape = _out_shapes(p, n_heads, nh, d_k=d_k, d_v=d_v)
    q, k, v, beta = (new_tensor(s, p.dtype, p.device) for s in shapes)
    norm = new_tensor(norm_shape, torch.float32, p.device)
    if N:
        cfg = meta.config(d_k, d_v, G)
        with device_guard(p):
            kernels.delta_inputs_fwd_kernel[meta.grid(N)](
                p_ptr=p2, q_ptr=q, k_ptr=k, v_ptr=v, beta_ptr=beta, norm_ptr=norm, N=N, W=W,
                QW=n_heads * d_k, G=G, DK=d_k, DV=d_v, eps=eps, **cfg)
    return q, k, v, beta, norm


def _bwd_impl(k, beta, norm, dq, dk, dv, dbeta, n_heads, nh, d_k, d_v, eps):
    N = k.shape[0]
    G = nh * n_heads
    W = meta.width(n_heads, nh, d_k, d_v=d_v)
    dp = new_tensor((N, W), k.dtype, k.device)
    if N:
        cfg = meta.config(d_k, d_v, G)
        with device_guard(k):
            # An absent gradient is never read: k stands in for it.
            kernels.delta_inputs_bwd_kernel[meta.grid(N)](
                k_ptr=k, beta_ptr=beta, norm_ptr=norm, dq_ptr=k if dq is None else _rows(dq),
                dk_ptr=k if dk is None else _rows(dk), dv_ptr=k if dv is None else _rows(dv),
                dbeta_ptr=k if dbeta is None else _rows(dbeta), dp_ptr=dp,
                N=N, W=W, QW=n_heads * d_k, G=G, DK=d_k, DV=d_v, eps=eps,
                HAS_DQ=dq is not None, HAS_DK=dk is not None, HAS_DV=dv is not None,
                HAS_DBETA=dbeta is not None, **cfg)
    return dp


def _out_shapes(p: torch.Tensor, n_heads: int, nh: int, *, d_k: int, d_v: int):
    """Shapes of ``(q, k, v, β, norms)`` as ``(N, ·)`` rows of ``p``."""
    N = p.numel() // p.shape[-1] if p.shape[-1] else 0
    G = nh * n_heads
    return (N, n_heads * d_k), (N, G * d_k), (N, G * d_v), (N, G), (N, G)


@torch.library.custom_op("mingru::delta_inputs_fwd", mutates_args=())
def delta_inputs_fwd(p: torch.Tensor, n_heads: int, nh: int, d_k: int, d_v: int, eps: float
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                torch.Tensor]:
    """Forward op: ``(q, k, v, β, norms)`` as ``(N, ·)`` rows; ``norms`` float32 ``(N, nh·H)``."""
    return _fwd_impl(p, n_heads, nh, d_k=d_k, d_v=d_v, eps=eps)


@delta_inputs_fwd.register_fake
def _(p, n_heads, nh, d_k, d_v, eps):
    shapes = _out_shapes(p, n_heads, nh, d_k=d_k, d_v=d_v)
    return (*(p.new_empty(s) for s in shapes[:4]), p.new_empty(shapes[4], dtype=torch.float32))


@torch.library.custom_op("mingru::delta_inputs_bwd", mutates_args=())
def delta_inputs_bwd(k: torch.Tensor, beta: torch.Tensor, norm: torch.Tensor,
                     dq: torch.Tensor | None, dk: torch.Tensor | None, dv: torch.Tensor | None,
                     dbeta: torch.Tensor | None, n_heads: int, nh: int, d_k: int, d_v: int,
                     eps: float) -> torch.Tensor:
    """Backward op: ``dp (N, W)`` in ``k``'s dtype (zeros where a gradient is absent)."""
    return _bwd_impl(k, beta, norm, dq=dq, dk=dk, dv=dv, dbeta=dbeta, n_heads=n_heads, nh=nh,
                     d_k=d_k, d_v=d_v, eps=eps)


@delta_inputs_bwd.register_fake
def _(k, beta, norm, dq, dk, dv, dbeta, n_heads, nh, d_k, d_v, eps):
    return k.new_empty((k.shape[0], meta.width(n_heads, nh, d_k, d_v=d_v)))


def _setup_context(ctx, inputs, output) -> None:
    p, n_heads, nh, d_k, d_v, eps = inputs
    _, k, _, beta, norm = output
    ctx.dims = (n_heads, nh, d_k, d_v, eps)
    ctx.p_shape = p.shape
    ctx.mark_non_differentiable(norm)
    ctx.save_for_backward(k, beta, norm)
    ctx.set_materialize_grads(value=False)


def _backward_formula(ctx, dq, dk, dv, dbeta, dnorm, bwd=delta_inputs_bwd):
    if dq is None and dk is None and dv is None and dbeta is None:
        return None, None, None, None, None, None
    k, beta, norm = ctx.saved_tensors
    dp = bwd(k, beta, norm, dq, dk, dv, dbeta, *ctx.dims)
    return dp.view(ctx.p_shape), None, None, None, None, None


_entry = dual_entry("delta_inputs", delta_inputs_fwd, _fwd_impl, setup_context=_setup_context,
                    formula=_backward_formula, bwd_impl=_bwd_impl)
