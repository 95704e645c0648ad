"""jax-triton launcher for :func:`mingru_jax.linear_recurrence` (kernels in
:mod:`mingru_kernels.linear_recurrence`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``a``, ``h_0``
and the output ``h`` only. A missing ``initial_state`` is a zero state (one ``(B, D)`` array),
so the traced kernels are the same with and without it. See :mod:`mingru_jax._launch._common`
for the two routes of each launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_jax._launch import _elementwise as elementwise
from mingru_kernels import _scan_common as scan_common
from mingru_kernels import linear_recurrence as kernels
from mingru_kernels.launch import linear_recurrence as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a, b, initial_state=None, return_final_state=False) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    return common.unsupported_dtype_or_device(a)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel (one read, one write: the bandwidth floor)."""
    return True


def run(a, b, initial_state=None, return_final_state=False):
    """``h`` (or ``(h, h_T)``) on the Triton kernels; jit/grad/vmap-compatible."""
    h0 = jnp.zeros((a.shape[0], a.shape[2]), a.dtype) if initial_state is None else initial_state
    h, h_T = _op(a, b, h0)
    return (h, h_T) if return_final_state else h


# ----------------------------------------------------------------------------- adapters
# jax-triton passes outputs after the inputs and runtime scalars; these reorder parameters
# into the kernels' own order and call them unchanged (inlined by Triton).


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _fwd_adapter(a, b, h0, s1, s2, T, D, chunk_len, n_chunks, n_dblk, o1, o2,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes the chunk maps (o1, o2); WALK / APPLY write (h, h_T) = (o1, o2) reading
    # the carry-in maps (s1, s2).
    if MODE == scan_common.K_SUMMARY:
        kernels.linear_recurrence_fwd_kernel(a, b, h0, a, s1, s1, o1, o2,
                                             T, D, chunk_len, n_chunks, n_dblk,
                                             MODE, True, False, BLOCK_T, BLOCK_D)
    else:
        kernels.linear_recurrence_fwd_kernel(a, b, h0, a, o1, o2, s1, s2,
                                             T, D, chunk_len, n_chunks, n_dblk,
                                             MODE, True, False, BLOCK_T, BLOCK_D)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _bwd_adapter(a, h, h0, dh, dht, s1, s2, T, D, chunk_len, n_chunks, n_dblk, o1, o2, o3,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes (sc, sg) = (o1, o2); WALK / APPLY write (da, db, dh0) = (o1, o2, o3)
    # reading the carries (s1, s2).
    if MODE == scan_common.K_SUMMARY:
        kernels.linear_recurrence_bwd_kernel(a, h, h0, a, dh, dht, o3, o3, o3, o1, o2,
                                             T, D, chunk_len, n_chunks, n_dblk,
                                             MODE, True, True, False, BLOCK_T, BLOCK_D)
    else:
        kernels.linear_recurrence_bwd_kernel(a, h, h0, a, dh, dht, o1, o2, o3, s1, s2,
                                             T, D, chunk_len, n_chunks, n_dblk,
                                             MODE, True, True, False, BLOCK_T, BLOCK_D)


# ----------------------------------------------------------------------------- launch sequences


def _launch_forward(a, b, h0):
    B, T, D = a.shape
    cfg = elementwise.plan("linear_recurrence", a, meta.TILES)
    return elementwise.run_scan(_fwd_adapter, cfg, B, D, (a, b, h0),
                                (common.like(a), common.like(h0)), meta.dims(cfg, T, D),
                                reverse=False, **meta.launch_kwargs(cfg))


def _launch_backward(a, h, h0, dh, dh_T):
    B, T, D = a.shape
    cfg = elementwise.plan("linear_recurrence", a)
    return elementwise.run_scan(_bwd_adapter, cfg, B, D, (a, h, h0, dh, dh_T),
                                (common.like(a), common.like(a), common.like(h0)),
                                meta.dims(cfg, T, D), reverse=True, **meta.launch_kwargs(cfg))


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)


@jax.custom_vjp
def _op(a, b, h0):
    return _forward(a, b, h0)


def _op_fwd(a, b, h0):
    h, h_T = _forward(a, b, h0)
    return (h, h_T), (a, h, h0)


def _op_bwd(res, cts):
    a, h, h0 = res
    dh, dh_T = cts
    return _backward(a, h, h0, dh, dh_T)


_op.defvjp(_op_fwd, _op_bwd)
