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
from mingru_kernels import parallel_scan_log as kernels
from mingru_kernels.launch import parallel_scan_log as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(log_coeffs: jax.Array, log_values: jax.Array) -> str | None:
    """Why the kernel cannot run ``parallel_scan_log(log_coeffs, log_values)``, or ``None``."""
    return common.unsupported_dtype_or_device(log_coeffs)


def prefer_over_eager(log_coeffs: jax.Array, log_values: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend."""
    return True


def run(log_coeffs: jax.Array, log_values: jax.Array) -> jax.Array:
    """``h (B, T, D)`` on the Triton kernels; jit/grad/vmap-compatible."""
    return _op(log_coeffs, log_values)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged.


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _fwd_adapter(la, lv, T, D, chunk_len, n_chunks_p1, n_dblk, h, v, st,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # (v, st): the look-back's values and status words (placeholders for the walk).
    kernels.parallel_scan_log_fwd_kernel(la, lv, h, v, st, T, D, chunk_len, n_chunks, n_dblk,
                                         MODE, BLOCK_T, BLOCK_D, LOOP_STAGES)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _bwd_adapter(la, lv, h, dh, T, D, chunk_len, n_chunks_p1, n_dblk, dla, dlv, v, st,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # dh is dense: strides (T·D, D, 1); (v, st) as in the forward.
    kernels.parallel_scan_log_bwd_kernel(la, lv, h, dh, dla, dlv, v, st, T, D, chunk_len,
                                         n_chunks, n_dblk, T * D, D, 1, MODE, BLOCK_T, BLOCK_D,
                                         LOOP_STAGES)


# ----------------------------------------------------------------------------- launch sequences


def _launch_forward(la, lv):
    B, T, D = la.shape
    cfg = elementwise.plan("parallel_scan_log", la, meta.TILES)
    return elementwise.run_scan(_fwd_adapter, cfg, B, D=D, inputs=(la, lv), outs=(common.like(la),),
                                scalars=elementwise.dims(cfg, T, D), **meta.launch_kwargs(cfg))


def _launch_backward(la, lv, h, dh):
    B, T, D = la.shape
    cfg = elementwise.plan("parallel_scan_log", la, meta.bwd_tiles(la.dtype.itemsize))
    return elementwise.run_scan(_bwd_adapter, cfg, B, D=D, inputs=(la, lv, h, dh),
                                outs=(common.like(la), common.like(lv)),
                                scalars=elementwise.dims(cfg, T, D), **meta.launch_kwargs(cfg))


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)


@common.custom_vjp
def _op(la, lv):
    return _forward(la, lv)[0]


def _op_fwd(la, lv):
    (h,) = _forward(la, lv)
    return h, (la, lv, h)


def _op_bwd(res, dh):
    la, lv, h = res
    return _backward(la, lv, h, dh)


_op.defvjp(_op_fwd, _op_bwd)
