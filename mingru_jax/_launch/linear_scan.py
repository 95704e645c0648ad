"""jax-triton launcher for :func:`mingru_jax.linear_scan` (kernels in
:mod:`mingru_kernels.linear_scan`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``a`` and the
outputs ``P, Z`` only. See :mod:`mingru_jax._launch._common` for the two routes of each
launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_jax._launch import _elementwise as elementwise
from mingru_kernels import _constants as constants
from mingru_kernels import linear_scan as kernels
from mingru_kernels.launch import linear_scan as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a: jax.Array, b: jax.Array) -> str | None:
    """Why the kernel cannot run ``linear_scan(a, b)``, or ``None``."""
    return common.unsupported_dtype_or_device(a)


def prefer_over_eager(a: jax.Array, b: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend."""
    return True


def run(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(P, Z)`` for ``a, b (B, T, D)`` on the Triton kernels; jit/grad/vmap-compatible."""
    return _op(a, b)


# ----------------------------------------------------------------------------- adapters
# jax-triton passes outputs after the inputs and runtime scalars; these reorder parameters
# into the kernels' own order and call them unchanged (inlined by Triton).


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _fwd_adapter(a, b, s1, s2, T, D, chunk_len, n_chunks_p1, n_dblk, o1, o2,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # SUMMARY writes the chunk maps (o1, o2); WALK / APPLY write P, Z (o1, o2) reading s1, s2.
    if MODE == constants.SUMMARY:
        kernels.linear_scan_fwd_kernel(a, b, s1, s2, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, BLOCK_T, BLOCK_D, LOOP_STAGES)
    else:
        kernels.linear_scan_fwd_kernel(a, b, o1, o2, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, BLOCK_T, BLOCK_D, LOOP_STAGES)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _bwd_adapter(a, P, Z, dP, dZ, s1, s2, s3, T, D, chunk_len, n_chunks_p1, n_dblk, o1, o2, o3,
                 MODE: tl.constexpr, HAS_DP: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # SUMMARY writes (sc, sg, sgp) = (o1, o2, o3); WALK / APPLY write (da, db) = (o1, o2)
    # reading the carries (s1, s2, s3) (o3 is an unused 1-element buffer then). The output
    # gradients are dense: strides (T·D, D, 1).
    if MODE == constants.SUMMARY:
        kernels.linear_scan_bwd_kernel(a, P, Z, dP, dZ, s1, s2, o1, o2, o3,
                                 T, D, chunk_len, n_chunks, n_dblk, T * D, D, 1, T * D, D, 1,
                                 MODE, HAS_DP, BLOCK_T, BLOCK_D, LOOP_STAGES)
    else:
        kernels.linear_scan_bwd_kernel(a, P, Z, dP, dZ, o1, o2, s1, s2, s3,
                                 T, D, chunk_len, n_chunks, n_dblk, T * D, D, 1, T * D, D, 1,
                                 MODE, HAS_DP, BLOCK_T, BLOCK_D, LOOP_STAGES)


# ----------------------------------------------------------------------------- launch sequences


def _launch_forward(a, b):
    B, T, D = a.shape
    cfg = elementwise.plan("linear_scan", a)
    grid, kw, dims = meta.grid(cfg, B), meta.launch_kwargs(cfg), elementwise.dims(cfg, T, D)
    outs = (common.like(a), common.like(a))
    if cfg["strategy"] == "walk":
        return common.launch(_fwd_adapter, grid, (a, b, a, b), outputs=outs, scalars=dims,
                             MODE=meta.WALK, **kw)
    s = common.f32((B, int(cfg["n_chunks"]), D))
    sa, sb = common.launch(_fwd_adapter, grid, (a, b, a, b), outputs=(s, s), scalars=dims,
                           MODE=meta.SUMMARY, **kw)
    ca, cb, _ = common.launch(
        elementwise.carry_adapter, meta.carry_grid(cfg, B), (sa, sb, sb),
        outputs=(s, s, common.f32((1,))), scalars=(int(cfg["n_chunks"]), D, int(cfg["n_dblk"])),
        REVERSE=False, STORE_A=True, HAS_Y=False, **meta.carry_kwargs(cfg),
    )
    return common.launch(_fwd_adapter, grid, (a, b, ca, cb), outputs=outs, scalars=dims,
                         MODE=meta.APPLY, **kw)


def _launch_backward(a, P, Z, dP, dZ):
    B, T, D = a.shape
    cfg = elementwise.plan("linear_scan", a)
    grid, kw, dims = meta.grid(cfg, B), meta.launch_kwargs(cfg), elementwise.dims(cfg, T, D)
    ins = (a, P, Z, dP, dZ)
    outs = (common.like(a), common.like(a), common.f32((1,)))
    if cfg["strategy"] == "walk":
        da, db, _ = common.launch(_bwd_adapter, grid, (*ins, a, a, a), outputs=outs, scalars=dims,
                               MODE=meta.WALK, HAS_DP=True, **kw)
        return da, db
    s = common.f32((B, int(cfg["n_chunks"]), D))
    sc, sg, sgp = common.launch(_bwd_adapter, grid, (*ins, a, a, a), outputs=(s, s, s),
                                scalars=dims, MODE=meta.SUMMARY, HAS_DP=True, **kw)
    _, cg, cgp = common.launch(
        elementwise.carry_adapter, meta.carry_grid(cfg, B), (sc, sg, sgp),
        outputs=(common.f32((1,)), s, s), scalars=(int(cfg["n_chunks"]), D, int(cfg["n_dblk"])),
        REVERSE=True, STORE_A=False, HAS_Y=True, **meta.carry_kwargs(cfg),
    )
    da, db, _ = common.launch(_bwd_adapter, grid, (*ins, sc, cg, cgp), outputs=outs, scalars=dims,
                           MODE=meta.APPLY, HAS_DP=True, **kw)
    return da, db


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)
_op = common.affine_scan_vjp(_forward, _backward)
