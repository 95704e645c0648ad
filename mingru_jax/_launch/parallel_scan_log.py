"""jax-triton launcher for :func:`mingru_jax.parallel_scan_log` (kernels in
:mod:`mingru_kernels.parallel_scan_log`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves the inputs and
the output ``h`` only. See :mod:`mingru_jax._launch._common` for the two routes of each
launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_jax._launch import _elementwise as elementwise
from mingru_kernels import _constants as constants
from mingru_kernels import parallel_scan_log as kernels
from mingru_kernels.launch import parallel_scan_log as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(log_coeffs: jax.Array, log_values: jax.Array) -> str | None:
    """Why the kernel cannot run ``parallel_scan_log(log_coeffs, log_values)``, or ``None``."""
    return common.unsupported_dtype_or_device(log_coeffs)


def prefer_over_eager(log_coeffs: jax.Array, log_values: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel (the PyTorch side measured it faster)."""
    return True


def run(log_coeffs: jax.Array, log_values: jax.Array) -> jax.Array:
    """``h (B, T, D)`` on the Triton kernels; jit/grad/vmap-compatible."""
    return _op(log_coeffs, log_values)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged.


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _fwd_adapter(la, lv, s1, s2, T, D, chunk_len, n_chunks_p1, n_dblk, o1, o2, v, st,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr, EVEN: tl.constexpr,
                 SCALAR: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # SUMMARY writes (sA, sL) = (o1, o2); WALK / APPLY write h = o1 reading (sA, cL) = (s1, s2);
    # LOOKBACK writes h = o1 with the look-back's values and status words (v, st).
    if MODE == constants.SUMMARY:
        kernels.parallel_scan_log_fwd_kernel(la, lv, s1, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)
    elif MODE == constants.LOOKBACK:
        kernels.parallel_scan_log_fwd_kernel(la, lv, o1, v, st, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)
    else:
        kernels.parallel_scan_log_fwd_kernel(la, lv, o1, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                              MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)


@triton.jit(do_not_specialize=["T", "n_chunks"])
def _log_carry_adapter(sA, sL, lv, T, n_chunks, D, n_dblk, cL,
                       BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    kernels.parallel_scan_log_carry_kernel(sA, sL, lv, cL, T, n_chunks, D, n_dblk, BLOCK_N, BLOCK_D)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _bwd_adapter(la, lv, h, dh, s1, s2, T, D, chunk_len, n_chunks_p1, n_dblk, o1, o2, v, st,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr, EVEN: tl.constexpr,
                 SCALAR: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # SUMMARY writes (sc, sg) = (o1, o2); WALK / APPLY write (dla, dlv) = (o1, o2); LOOKBACK
    # too, with the look-back's values and status words (v, st).
    if MODE == constants.SUMMARY:
        kernels.parallel_scan_log_bwd_kernel(la, lv, h, dh, s1, s2, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                              T * D, D, 1, MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)
    elif MODE == constants.LOOKBACK:
        kernels.parallel_scan_log_bwd_kernel(la, lv, h, dh, o1, o2, v, st, T, D, chunk_len, n_chunks, n_dblk,
                              T * D, D, 1, MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)
    else:
        kernels.parallel_scan_log_bwd_kernel(la, lv, h, dh, o1, o2, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                              T * D, D, 1, MODE, BLOCK_T, BLOCK_D, LOOP_STAGES, EVEN, SCALAR)


# ----------------------------------------------------------------------------- launch sequences


def _launch_forward(la, lv):
    B, T, D = la.shape
    cfg = elementwise.plan("parallel_scan_log", la, meta.TILES)
    grid, kw, dims = meta.grid(cfg, B), meta.launch_kwargs(cfg), elementwise.dims(cfg, T, D)
    n_chunks, n_dblk = int(cfg["n_chunks"]), int(cfg["n_dblk"])
    outs = (common.like(la), common.f32((1,)))
    if cfg["strategy"] == "lookback":
        return elementwise.lookback_launch(_fwd_adapter, cfg, B, D, (la, lv, la, la), outs, dims,
                                           **kw)[:1]
    extra = elementwise.lookback_specs(cfg, B, D)  # placeholders
    if cfg["strategy"] == "walk":
        return common.launch(_fwd_adapter, grid, (la, lv, la, la), (*outs, *extra), dims,
                             MODE=meta.WALK, **kw)[:1]
    s = common.f32((B, n_chunks, D))
    sA, sL, *_ = common.launch(_fwd_adapter, grid, (la, lv, la, la), (s, s, *extra), dims,
                               MODE=meta.SUMMARY, **kw)
    (cL,) = common.launch(_log_carry_adapter, meta.carry_grid(cfg, B), (sA, sL, lv), (s,),
                       (T, n_chunks, D, n_dblk), **meta.carry_kwargs(cfg))
    return common.launch(_fwd_adapter, grid, (la, lv, sA, cL), (*outs, *extra), dims,
                         MODE=meta.APPLY, **kw)[:1]


def _launch_backward(la, lv, h, dh):
    B, T, D = la.shape
    cfg = elementwise.plan("parallel_scan_log", la, meta.bwd_tiles(la.dtype.itemsize))
    dims = elementwise.dims(cfg, T, D)
    # The adjoint is a single-state linear scan: the shared launch sequences.
    return elementwise.run_scan(_bwd_adapter, cfg, B, D, (la, lv, h, dh),
                                (common.like(la), common.like(lv)), dims, reverse=True,
                                lookback=True, **meta.launch_kwargs(cfg))


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)


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
