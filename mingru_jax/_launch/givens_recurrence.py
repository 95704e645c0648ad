"""jax-triton launcher for the fused rotation/Givens recurrence (dispatch op
``givens_recurrence``; kernels in :mod:`mingru_kernels.givens_recurrence`, the same ones the PyTorch
launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves the inputs and
the output ``h`` only (no per-token matrices). See :mod:`mingru_jax._launch._common` for the
two routes of each launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_kernels.givens_recurrence import (
    givens_recurrence_bwd_kernel,
    givens_recurrence_fwd_kernel,
)
from mingru_kernels.launch import givens_recurrence as meta
from mingru_kernels.launch import switches
from mingru_kernels.launch._elementwise import cdiv

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

def unsupported_reason(theta, b, h0, scale=None, log_gamma=None) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    k = b.shape[-1]
    if k not in meta.SUPPORTED_K:
        return f"k={k} not in {{2, 4, 8, 16}}"
    return common.unsupported_dtype_or_device(theta)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend."""
    return True


def run(
    theta: jax.Array,
    b: jax.Array,
    h0: jax.Array,
    scale: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
) -> jax.Array:
    """``h (B, T, n, k)``; jit/grad/vmap-compatible, differentiable in every input."""
    return _op(theta, b, h0, scale, log_gamma)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged.


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _fwd_adapter(th, b, s, g, h0, s1, s2, npair, n, T, seg_len, nseg, o1, o2,
                 K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
                 HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr):
    # COMPOSITE writes (m, c) = (o1, o2); otherwise h = o1 reading (m, c) = (s1, s2).
    # Contiguous rows (theta n·R·k/2, b n·k elements per token); never gated or in rotation
    # mode here (the snap pointer is a dummy).
    if COMPOSITE:
        givens_recurrence_fwd_kernel(th, b, b, s, g, g, h0, s1, o1, o2, npair, n, T, seg_len, nseg,
                                     n * (R * K2), n * (2 * K2),
                                     K2, R, RP, LP, HAS_SCALE, HAS_GAMMA, COMPOSITE)
    else:
        givens_recurrence_fwd_kernel(th, b, b, s, g, g, h0, o1, s1, s2, npair, n, T, seg_len, nseg,
                                     n * (R * K2), n * (2 * K2),
                                     K2, R, RP, LP, HAS_SCALE, HAS_GAMMA, COMPOSITE)


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _bwd_adapter(th, s, g, h, h0, dh, s1, s2, npair, n, T, seg_len, nseg,
                 o1, o2, o3, o4, o5,
                 K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
                 HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr):
    # COMPOSITE writes (m, c) = (o1, o2); otherwise (dθ, db, ds, dγ, dh0) = o1..o5. JAX's dh is
    # a contiguous (B, T, n·k) buffer: strides (T·n·k, n·k, 1).
    row = n * (2 * K2)
    if COMPOSITE:
        givens_recurrence_bwd_kernel(th, s, g, h, h0, h, h, h, dh, s1, s1, s1, s1, s1, s1, o1, o2,
                                     npair, n, T, seg_len, nseg, n * (R * K2), row, T * row, row,
                                     1, K2, R, RP, LP, HAS_SCALE, HAS_GAMMA, COMPOSITE)
    else:
        givens_recurrence_bwd_kernel(th, s, g, h, h0, h, h, h, dh, o1, o2, o2, o3, o4, o5, s1, s2,
                                     npair, n, T, seg_len, nseg, n * (R * K2), row, T * row, row,
                                     1, K2, R, RP, LP, HAS_SCALE, HAS_GAMMA, COMPOSITE)


# ----------------------------------------------------------------------------- launch sequences


def _setup(theta):
    B, T, n, R, k2 = theta.shape
    k = 2 * k2
    cfg = meta.givens_config(k, R)
    seg_len, nseg = meta.segment_plan(T, switches.plan_choices("givens_recurrence").get("seg_len"))
    return B * n, k, cfg, (B * n, n, T, seg_len, nseg), nseg


def _launch_forward(theta, b, h0, scale, log_gamma):
    npair, k, cfg, dims, nseg = _setup(theta)
    consts = dict(K2=k // 2, R=theta.shape[3], RP=cfg["RP"], HAS_SCALE=scale is not None,
                HAS_GAMMA=log_gamma is not None)
    s = b if scale is None else scale  # dummy pointers when absent
    g = b if log_gamma is None else log_gamma
    m, c = b, b  # unread when nseg == 1
    if nseg > 1:
        m, c = common.launch(
            _fwd_adapter, (cdiv(npair, cfg["LP_COMP"]), nseg), (theta, b, s, g, h0, b, b),
            outputs=(common.f32((npair, nseg, k, k)), common.f32((npair, nseg, k))), scalars=dims,
            LP=cfg["LP_COMP"], COMPOSITE=True, num_warps=cfg["num_warps_comp"], **consts,
        )
    h, _ = common.launch(
        _fwd_adapter, (cdiv(npair, cfg["LP"]), nseg), (theta, b, s, g, h0, m, c),
        outputs=(common.like(b), common.f32((1,))), scalars=dims,
        LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"], **consts,
    )
    return (h,)


def _launch_backward(theta, h0, scale, log_gamma, h, dh):
    npair, k, cfg, dims, nseg = _setup(theta)
    consts = dict(K2=k // 2, R=theta.shape[3], RP=cfg["RP"], HAS_SCALE=scale is not None,
                HAS_GAMMA=log_gamma is not None)
    s = h if scale is None else scale
    g = h if log_gamma is None else log_gamma
    ins = (theta, s, g, h, h0, dh)
    m, c = h, h
    if nseg > 1:
        m, c = common.launch(
            _bwd_adapter, (cdiv(npair, cfg["LP_COMP"]), nseg), (*ins, h, h),
            outputs=(common.f32((npair, nseg, k, k)), common.f32((npair, nseg, k)),
             common.f32((1,)), common.f32((1,)), common.f32((1,))), scalars=dims,
            LP=cfg["LP_COMP"], COMPOSITE=True, num_warps=cfg["num_warps_comp"], **consts,
        )[:2]
    dummy = common.f32((1,))
    outs = (common.like(theta), common.like(h), dummy if scale is None else common.like(scale),
            dummy if log_gamma is None else common.like(log_gamma), common.like(h0))
    dth, db, ds, dg, dh0 = common.launch(
        _bwd_adapter, (cdiv(npair, cfg["LP"]), nseg), (*ins, m, c), outputs=outs, scalars=dims,
        LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"], **consts,
    )
    return dth, db, dh0, ds, dg


# ----------------------------------------------------------------------------- custom_vjp


def _present(*xs):
    return tuple(x for x in xs if x is not None)


_forward = common.batched(_launch_forward)


@common.batched
def _backward(theta, h0, scale, log_gamma, h, dh):
    dth, db, dh0, ds, dg = _launch_backward(theta, h0, scale, log_gamma=log_gamma, h=h, dh=dh)
    # Only present inputs get a gradient; the batch rule needs a leading B on every output.
    return _present(dth, db, dh0, ds if scale is not None else None,
                    dg if log_gamma is not None else None)


@common.custom_vjp
def _op(theta, b, h0, scale, log_gamma):
    return _forward(theta, b, h0, scale, log_gamma)[0]


def _op_fwd(theta, b, h0, scale, log_gamma):
    (h,) = _forward(theta, b, h0, scale, log_gamma)
    return h, (theta, h0, scale, log_gamma, h)


def _op_bwd(res, dh):
    theta, h0, scale, log_gamma, h = res
    grads = iter(_backward(theta, h0, scale, log_gamma, h, dh))
    dth, db, dh0 = next(grads), next(grads), next(grads)
    ds = None if scale is None else next(grads)
    dg = None if log_gamma is None else next(grads)
    return dth, db, dh0, ds, dg


_op.defvjp(_op_fwd, _op_bwd)
