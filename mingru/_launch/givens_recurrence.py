"""Triton launcher for the fused rotation/Givens recurrence (dispatch op ``givens_recurrence``).

``h_t = γ_t G_{R-1} ⋯ G_0 diag(scale_t) h_{t-1} + b_t`` per block, with the rotations applied to
the state vector in-kernel (:mod:`mingru_kernels.givens_recurrence`; launch metadata in
:mod:`mingru_kernels.launch.givens_recurrence`). Forward and backward are
``torch.library`` custom ops (``mingru::givens_recurrence_fwd`` and ``_bwd``) with fake
implementations, so ``torch.compile(fullgraph=True)`` traces them. Saved for backward: the
inputs and the output ``h`` (the backward reads ``h_{t-1}`` from it); no per-token matrices.

Imported only by :mod:`mingru.dispatch`, after :func:`mingru.available` returned ``True``.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch._alloc import device_guard, new_tensor
from mingru._launch._op import dual_entry
from mingru_kernels import givens_recurrence as givens_recurrence_kernels
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import givens_recurrence as meta
from mingru_kernels.launch import switches
from mingru_kernels.launch._elementwise import cdiv

kernels = CachedKernels(givens_recurrence_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def unsupported_reason(
    theta: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    k = b.shape[-1]
    if theta.dtype not in KERNEL_DTYPES:
        return f"{theta.dtype} runs eager (kernels take float32, bfloat16, float16)"
    if k not in meta.SUPPORTED_K:
        return f"k={k} not in {{2, 4, 8, 16}}"
    if not theta.is_cuda and not interpreter_mode():
        return f"inputs on {theta.device} (the kernels need CUDA, or TRITON_INTERPRET=1)"
    return None


def prefer_over_eager(*args, **kwargs) -> bool:
    """``True``: ``auto`` picks the kernel on every supported shape class (``False`` would
    keep a class on eager, where eager is the faster path)."""
    return True


def run(
    theta: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
) -> torch.Tensor:
    """``h (B, T, n, k)``; differentiable in every input."""
    return _entry(theta, b, h0, scale, log_gamma)


# ----------------------------------------------------------------------------- plumbing


def _empty(shape, like: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    return new_tensor(shape, like.dtype if dtype is None else dtype, like.device)


def _segments(T: int) -> tuple[int, int]:
    return meta.segment_plan(T, switches.plan_choices("givens_recurrence").get("seg_len"))


def _contig(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.contiguous()


def _constexprs(k2, R, cfg, *, scale, log_gamma, z, rotation, snap) -> dict:
    """The kernels' mode constexprs for a walk (forward and backward alike)."""
    return dict(K2=k2, R=R, RP=cfg["RP"], HAS_SCALE=scale is not None,
                HAS_GAMMA=log_gamma is not None, GATED=z is not None, ROTATION=rotation,
                SNAP=snap is not None)


def _forward(theta, b, h0, scale, log_gamma) -> torch.Tensor:
    theta, b = theta.contiguous(), b.contiguous()
    n, R, k2 = theta.shape[2:]
    return walk_forward(theta, b, None, h0=h0, scale=scale, log_gamma=log_gamma, th_row=n * R * k2,
                        in_row=n * 2 * k2)


def walk_forward(theta, b, z, *, h0, scale, log_gamma, th_row: int, in_row: int,
                 rotation: bool = False, snap: torch.Tensor | None = None) -> torch.Tensor:
    """``h (B, T, n, k)`` from ``theta (B, T, n, R, k/2)`` and ``b`` (with ``z``: the gated
    cell's ``h̃`` and ``z``, ``b = σ(z) ⊙ h̃``), whose token rows are ``th_row`` / ``in_row``
    elements apart (column views of one projection, or contiguous); the rest contiguous.
    ``rotation``: RotationMinGRU's cell (``k = 2``, one round): ``scale`` is the view of the
    pre-activation ``u (B, T, n)`` in the projection's rows (scale ``[1, tanh(u)]``) and
    ``snap`` (``K_j`` per block, or ``None``) snaps the angles to multiples of ``2π/K_j``."""
    h0 = h0.contiguous()
    scale, log_gamma = (scale if rotation else _contig(scale)), _contig(log_gamma)
    B, T, n, R, k2 = theta.shape
    k = 2 * k2
    h = _empty((B, T, n, k), b)
    npair = B * n
    if npair == 0:
        return h
    cfg = meta.givens_config(k, R)
    seg_len, nseg = _segments(T)
    consts = _constexprs(k2, R, cfg, scale=scale, log_gamma=log_gamma, z=z, rotation=rotation,
                         snap=snap)
    # Absent inputs are never read: h (or b) stands in for them.
    args = dict(th_ptr=theta, b_ptr=b, z_ptr=b if z is None else z,
                s_ptr=h if scale is None else scale, g_ptr=h if log_gamma is None else log_gamma,
                snap_ptr=h if snap is None else snap, h0_ptr=h0, h_ptr=h, npair=npair, n=n, T=T,
                seg_len=seg_len, nseg=nseg, th_row=th_row, in_row=in_row, **consts)
    with device_guard(h):
        m, c = h, h  # unread when nseg == 1
        if nseg > 1:
            m = _empty((npair, nseg, k, k), h, torch.float32)
            c = _empty((npair, nseg, k), h, torch.float32)
            kernels.givens_recurrence_fwd_kernel[(cdiv(npair, cfg["LP_COMP"]), nseg)](
                **args, m_ptr=m, c_ptr=c, LP=cfg["LP_COMP"], COMPOSITE=True,
                num_warps=cfg["num_warps_comp"],
            )
        kernels.givens_recurrence_fwd_kernel[(cdiv(npair, cfg["LP"]), nseg)](
            **args, m_ptr=m, c_ptr=c, LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"],
        )
    return h


def _backward(theta, h0, scale, log_gamma, h, dh):
    theta = theta.contiguous()
    n, R, k2 = theta.shape[2:]
    dtheta, db = _empty(theta.shape, theta), _empty(h.shape, h)
    dh0, dscale, dlog_gamma = walk_backward(theta, h0, scale, log_gamma=log_gamma, h=h, dh=dh,
                                            hh=None, z=None, dtheta=dtheta, db=db, dz=None,
                                            th_row=n * R * k2, in_row=n * 2 * k2)
    return dtheta, db, dh0, dscale, dlog_gamma


def walk_backward(theta, h0, scale, *, log_gamma, h, dh, hh, z, dtheta, db, dz, th_row: int,
                  in_row: int, rotation: bool = False, snap: torch.Tensor | None = None,
                  du: torch.Tensor | None = None):
    """Fill ``dtheta`` and ``db`` (with ``hh``, ``z``: the gated cell's ``dh̃`` and ``dz``,
    into ``db`` and ``dz``), laid out like ``theta`` and ``b`` (rows ``th_row`` / ``in_row``
    apart); return ``(dh0, dscale, dlog_gamma)`` (``None`` for an absent input). With
    ``rotation`` (see :func:`walk_forward`) ``du``, laid out like ``scale`` (the view of
    ``u``), takes the gradient of ``u`` and is returned as ``dscale``."""
    h0, h = h0.contiguous(), h.contiguous()
    scale, log_gamma = (scale if rotation else _contig(scale)), _contig(log_gamma)
    B, T, n, R, k2 = theta.shape
    k = 2 * k2
    # dh is read through its (B, T, n·k) strides: a sum's gradient arrives expanded (stride 0)
    # and is not copied (reshape keeps a view wherever the strides allow one).
    dh = dh.reshape(B, T, n * k)
    dh0 = _empty(h0.shape, h0)
    dscale = du if rotation else None if scale is None else _empty(scale.shape, scale)
    dlog_gamma = None if log_gamma is None else _empty(log_gamma.shape, log_gamma)
    npair = B * n
    if npair == 0:
        return dh0, dscale, dlog_gamma
    cfg = meta.givens_config(k, R)
    seg_len, nseg = _segments(T)
    consts = _constexprs(k2, R, cfg, scale=scale, log_gamma=log_gamma, z=z, rotation=rotation,
                         snap=snap)
    dh_sb, dh_st, dh_sd = dh.stride()
    # Absent inputs and gradients are never touched: h (or db) stands in for them.
    args = dict(th_ptr=theta, s_ptr=h if scale is None else scale,
                g_ptr=h if log_gamma is None else log_gamma, h_ptr=h, h0_ptr=h0,
                hh_ptr=h if z is None else hh, z_ptr=h if z is None else z,
                snap_ptr=h if snap is None else snap, dh_ptr=dh, dth_ptr=dtheta, db_ptr=db,
                dz_ptr=db if z is None else dz, ds_ptr=db if dscale is None else dscale,
                dg_ptr=db if dlog_gamma is None else dlog_gamma, dh0_ptr=dh0, npair=npair, n=n,
                T=T, seg_len=seg_len, nseg=nseg, th_row=th_row, in_row=in_row, dh_sb=dh_sb,
                dh_st=dh_st, dh_sd=dh_sd, **consts)
    with device_guard(h):
        m, c = h, h  # unread when nseg == 1
        if nseg > 1:
            m = _empty((npair, nseg, k, k), h, torch.float32)
            c = _empty((npair, nseg, k), h, torch.float32)
            kernels.givens_recurrence_bwd_kernel[(cdiv(npair, cfg["LP_COMP"]), nseg)](
                **args, m_ptr=m, c_ptr=c, LP=cfg["LP_COMP"], COMPOSITE=True,
                num_warps=cfg["num_warps_comp"],
            )
        kernels.givens_recurrence_bwd_kernel[(cdiv(npair, cfg["LP"]), nseg)](
            **args, m_ptr=m, c_ptr=c, LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"],
        )
    return dh0, dscale, dlog_gamma


# ----------------------------------------------------------------------------- custom ops


@torch.library.custom_op("mingru::givens_recurrence_fwd", mutates_args=())
def givens_recurrence_fwd(
    theta: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
) -> torch.Tensor:
    """``h`` of the fused Givens recurrence on the Triton kernels."""
    return _forward(theta, b, h0, scale=scale, log_gamma=log_gamma)


@givens_recurrence_fwd.register_fake
def _(theta, b, h0, scale, log_gamma):
    return b.new_empty(b.shape)


@torch.library.custom_op("mingru::givens_recurrence_bwd", mutates_args=())
def givens_recurrence_bwd(
    theta: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
    h: torch.Tensor,
    dh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dtheta, db, dh0, dscale, dlog_gamma)`` from the saved inputs, ``h`` and ``dh``;
    an absent ``scale`` / ``log_gamma`` gets an empty placeholder gradient."""
    grads = _backward(theta, h0, scale, log_gamma=log_gamma, h=h, dh=dh)
    return tuple(theta.new_empty(0) if g is None else g for g in grads)


@givens_recurrence_bwd.register_fake
def _(theta, h0, scale, log_gamma, h, dh):
    return (
        theta.new_empty(theta.shape),
        h.new_empty(h.shape),
        h0.new_empty(h0.shape),
        theta.new_empty(0) if scale is None else scale.new_empty(scale.shape),
        theta.new_empty(0) if log_gamma is None else log_gamma.new_empty(log_gamma.shape),
    )


def _setup_context(ctx, inputs, output) -> None:
    theta, _, h0, scale, log_gamma = inputs
    ctx.has_scale = scale is not None
    ctx.has_gamma = log_gamma is not None
    ctx.save_for_backward(theta, h0, scale, log_gamma, output)


def _autograd_backward(ctx, dh, bwd=givens_recurrence_bwd):
    theta, h0, scale, log_gamma, h = ctx.saved_tensors
    if dh is None:
        return None, None, None, None, None
    dtheta, db, dh0, dscale, dlog_gamma = bwd(theta, h0, scale, log_gamma, h, dh)
    return (dtheta, db, dh0, dscale if ctx.has_scale else None,
            dlog_gamma if ctx.has_gamma else None)


_entry = dual_entry("givens_recurrence", givens_recurrence_fwd, _forward,
                    setup_context=_setup_context, formula=_autograd_backward, bwd_impl=_backward)
