"""jax-triton launcher for :func:`mingru_jax.parallel_scan_log` (kernels in
:mod:`mingru_kernels.log_scan`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves the inputs and
the output ``h`` only. See :mod:`mingru_jax._launch._common` for the two routes.
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl
from mingru_kernels import _scan_common as C
from mingru_kernels import log_scan as K

from mingru_jax._launch import _common as U
from mingru_jax._launch.linear_scan import _carry_adapter, _carry_kw, _kw, _plan

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(log_coeffs: jax.Array, log_values: jax.Array) -> str | None:
    """Why the kernel cannot run ``parallel_scan_log(log_coeffs, log_values)``, or ``None``."""
    return U.unsupported_dtype_or_device(log_coeffs)


def prefer_over_eager(log_coeffs: jax.Array, log_values: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel (the PyTorch side measured it faster)."""
    return True


def run(log_coeffs: jax.Array, log_values: jax.Array) -> jax.Array:
    """``h (B, T, D)`` on the Triton kernels; jit/grad/vmap-compatible."""
    return _op(log_coeffs, log_values)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged.


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _fwd_adapter(la, lv, s1, s2, T, D, chunk_len, n_chunks, n_dblk, o1, o2,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes (sA, sL) = (o1, o2); WALK / APPLY write h = o1 reading (sA, cL) = (s1, s2).
    if MODE == C.K_SUMMARY:
        K.log_scan_fwd_kernel(la, lv, s1, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D)
    else:
        K.log_scan_fwd_kernel(la, lv, o1, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D)


@triton.jit(do_not_specialize=["T", "n_chunks"])
def _log_carry_adapter(sA, sL, lv, T, n_chunks, D, n_dblk, cL,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    K.log_carry_kernel(sA, sL, lv, cL, T, n_chunks, D, n_dblk, BLOCK_N, BLOCK_D)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _bwd_adapter(la, lv, h, dh, s1, s2, T, D, chunk_len, n_chunks, n_dblk, o1, o2,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes (sc, sg) = (o1, o2); WALK / APPLY write (dla, dlv) = (o1, o2).
    if MODE == C.K_SUMMARY:
        K.log_scan_bwd_kernel(la, lv, h, dh, s1, s2, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D)
    else:
        K.log_scan_bwd_kernel(la, lv, h, dh, o1, o2, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D)


# ----------------------------------------------------------------------------- GPU route


def _gpu_forward(la, lv):
    B, T, D = la.shape
    cfg = _plan(la)
    grid, kw = K.grid(cfg, B), _kw(cfg)
    n_chunks, n_dblk = int(cfg["n_chunks"]), int(cfg["n_dblk"])
    dims = (T, D, int(cfg["chunk_len"]), n_chunks, n_dblk)
    outs = (U.like(la), U.f32((1,)))
    if cfg["strategy"] == "walk":
        return U.gpu_call(_fwd_adapter, grid, (la, lv, la, la), outs, dims, MODE=K.WALK, **kw)[:1]
    s = U.f32((B, n_chunks, D))
    sA, sL = U.gpu_call(_fwd_adapter, grid, (la, lv, la, la), (s, s), dims, MODE=K.SUMMARY, **kw)
    (cL,) = U.gpu_call(_log_carry_adapter, K.carry_grid(cfg, B), (sA, sL, lv), (s,),
                       (T, n_chunks, D, n_dblk), **_carry_kw(cfg))
    return U.gpu_call(_fwd_adapter, grid, (la, lv, sA, cL), outs, dims, MODE=K.APPLY, **kw)[:1]


def _gpu_backward(la, lv, h, dh):
    B, T, D = la.shape
    cfg = _plan(la)
    grid, kw = K.grid(cfg, B), _kw(cfg)
    n_chunks, n_dblk = int(cfg["n_chunks"]), int(cfg["n_dblk"])
    dims = (T, D, int(cfg["chunk_len"]), n_chunks, n_dblk)
    ins = (la, lv, h, dh)
    outs = (U.like(la), U.like(lv))
    if cfg["strategy"] == "walk":
        return U.gpu_call(_bwd_adapter, grid, (*ins, la, la), outs, dims, MODE=K.WALK, **kw)
    s = U.f32((B, n_chunks, D))
    sc, sg = U.gpu_call(_bwd_adapter, grid, (*ins, la, la), (s, s), dims, MODE=K.SUMMARY, **kw)
    _, cg, _ = U.gpu_call(
        _carry_adapter, K.carry_grid(cfg, B), (sc, sg, sg), (U.f32((1,)), s, U.f32((1,))),
        (n_chunks, D, n_dblk), REVERSE=True, STORE_A=False, HAS_Y=False, **_carry_kw(cfg),
    )
    return U.gpu_call(_bwd_adapter, grid, (*ins, sc, cg), outs, dims, MODE=K.APPLY, **kw)


# ----------------------------------------------------------------------------- custom_vjp


@U.batched
def _forward(la, lv):
    if U.on_gpu():
        return _gpu_forward(la, lv)
    from mingru._launch.parallel_scan_log import parallel_scan_log_fwd

    return U.host_call(parallel_scan_log_fwd, (U.like(la),), la, lv)


@U.batched
def _backward(la, lv, h, dh):
    if U.on_gpu():
        return _gpu_backward(la, lv, h, dh)
    from mingru._launch.parallel_scan_log import parallel_scan_log_bwd

    return U.host_call(parallel_scan_log_bwd, (U.like(la), U.like(lv)), la, lv, h, dh)


@jax.custom_vjp
def _op(la, lv):
    return _forward(la, lv)[0]


def _op_fwd(la, lv):
    (h,) = _forward(la, lv)
    return h, (la, lv, h)


def _op_bwd(res, dh):
    la, lv, h = res
    return _backward(la, lv, h, dh)


_op.defvjp(_op_fwd, _op_bwd)
