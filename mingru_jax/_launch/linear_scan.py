"""jax-triton launcher for :func:`mingru_jax.linear_scan` (kernels in
:mod:`mingru_kernels.linear_scan`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``a`` and the
outputs ``P, Z`` only. See :mod:`mingru_jax._launch._common` for the two routes.
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl
from mingru_kernels import _scan_common as C
from mingru_kernels import linear_scan as K

from mingru_jax._launch import _common as U

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a: jax.Array, b: jax.Array) -> str | None:
    """Why the kernel cannot run ``linear_scan(a, b)``, or ``None``."""
    return U.unsupported_dtype_or_device(a)


def prefer_over_eager(a: jax.Array, b: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel (the PyTorch side measured it faster)."""
    return True


def run(a: jax.Array, b: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(P, Z)`` for ``a, b (B, T, D)`` on the Triton kernels; jit/grad/vmap-compatible."""
    return _op(a, b)


# ----------------------------------------------------------------------------- adapters
# jax-triton passes outputs after the inputs and runtime scalars; these reorder parameters
# into the kernels' own order and call them unchanged (inlined by Triton).


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _fwd_adapter(a, b, s1, s2, T, D, chunk_len, n_chunks, n_dblk, o1, o2,
                 MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes the chunk maps (o1, o2); WALK / APPLY write P, Z (o1, o2) reading s1, s2.
    if MODE == C.K_SUMMARY:
        K.linear_scan_fwd_kernel(a, b, s1, s2, o1, o2, T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, BLOCK_T, BLOCK_D)
    else:
        K.linear_scan_fwd_kernel(a, b, o1, o2, s1, s2, T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, BLOCK_T, BLOCK_D)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def _bwd_adapter(a, P, Z, dP, dZ, s1, s2, s3, T, D, chunk_len, n_chunks, n_dblk, o1, o2, o3,
                 MODE: tl.constexpr, HAS_DP: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr):
    # SUMMARY writes (sc, sg, sgp) = (o1, o2, o3); WALK / APPLY write (da, db) = (o1, o2)
    # reading the carries (s1, s2, s3) (o3 is an unused 1-element buffer then).
    if MODE == C.K_SUMMARY:
        K.linear_scan_bwd_kernel(a, P, Z, dP, dZ, s1, s2, o1, o2, o3,
                                 T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, HAS_DP, BLOCK_T, BLOCK_D)
    else:
        K.linear_scan_bwd_kernel(a, P, Z, dP, dZ, o1, o2, s1, s2, s3,
                                 T, D, chunk_len, n_chunks, n_dblk,
                                 MODE, HAS_DP, BLOCK_T, BLOCK_D)


@triton.jit
def _carry_adapter(sa, sx, sy, n_chunks, D, n_dblk, ca, cx, cy,
                   REVERSE: tl.constexpr, STORE_A: tl.constexpr, HAS_Y: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    C.linear_carry_kernel(sa, sx, sy, ca, cx, cy, n_chunks, D, n_dblk,
                          REVERSE, STORE_A, HAS_Y, BLOCK_N, BLOCK_D)


# ----------------------------------------------------------------------------- GPU route


def _plan(x: jax.Array) -> dict:
    B, T, D = x.shape
    return C.plan(B, T, D, n_sm=U.sm_count())


def _kw(cfg: dict) -> dict:
    kw = dict(BLOCK_T=int(cfg["block_t"]), BLOCK_D=int(cfg["block_d"]),
              num_warps=int(cfg["num_warps"]))
    if int(cfg["num_stages"]):
        kw["num_stages"] = int(cfg["num_stages"])
    return kw


def _carry_kw(cfg: dict) -> dict:
    return dict(BLOCK_N=C.BLOCK_N, BLOCK_D=int(cfg["block_d"]), num_warps=int(cfg["num_warps"]))


def _gpu_forward(a, b):
    B, T, D = a.shape
    cfg = _plan(a)
    grid, kw = K.grid(cfg, B), _kw(cfg)
    dims = (T, D, int(cfg["chunk_len"]), int(cfg["n_chunks"]), int(cfg["n_dblk"]))
    outs = (U.like(a), U.like(a))
    if cfg["strategy"] == "walk":
        return U.gpu_call(_fwd_adapter, grid, (a, b, a, b), outs, dims, MODE=K.WALK, **kw)
    s = U.f32((B, int(cfg["n_chunks"]), D))
    sa, sb = U.gpu_call(_fwd_adapter, grid, (a, b, a, b), (s, s), dims, MODE=K.SUMMARY, **kw)
    ca, cb, _ = U.gpu_call(
        _carry_adapter, K.carry_grid(cfg, B), (sa, sb, sb),
        (s, s, U.f32((1,))), (int(cfg["n_chunks"]), D, int(cfg["n_dblk"])),
        REVERSE=False, STORE_A=True, HAS_Y=False, **_carry_kw(cfg),
    )
    return U.gpu_call(_fwd_adapter, grid, (a, b, ca, cb), outs, dims, MODE=K.APPLY, **kw)


def _gpu_backward(a, P, Z, dP, dZ):
    B, T, D = a.shape
    cfg = _plan(a)
    grid, kw = K.grid(cfg, B), _kw(cfg)
    dims = (T, D, int(cfg["chunk_len"]), int(cfg["n_chunks"]), int(cfg["n_dblk"]))
    ins = (a, P, Z, dP, dZ)
    outs = (U.like(a), U.like(a), U.f32((1,)))
    if cfg["strategy"] == "walk":
        da, db, _ = U.gpu_call(_bwd_adapter, grid, (*ins, a, a, a), outs, dims,
                               MODE=K.WALK, HAS_DP=True, **kw)
        return da, db
    s = U.f32((B, int(cfg["n_chunks"]), D))
    sc, sg, sgp = U.gpu_call(_bwd_adapter, grid, (*ins, a, a, a), (s, s, s), dims,
                             MODE=K.SUMMARY, HAS_DP=True, **kw)
    _, cg, cgp = U.gpu_call(
        _carry_adapter, K.carry_grid(cfg, B), (sc, sg, sgp),
        (U.f32((1,)), s, s), (int(cfg["n_chunks"]), D, int(cfg["n_dblk"])),
        REVERSE=True, STORE_A=False, HAS_Y=True, **_carry_kw(cfg),
    )
    da, db, _ = U.gpu_call(_bwd_adapter, grid, (*ins, sc, cg, cgp), outs, dims,
                           MODE=K.APPLY, HAS_DP=True, **kw)
    return da, db


# ----------------------------------------------------------------------------- custom_vjp


@U.batched
def _forward(a, b):
    if U.on_gpu():
        return _gpu_forward(a, b)
    from mingru._launch.linear_scan import linear_scan_fwd

    return U.host_call(linear_scan_fwd, (U.like(a), U.like(a)), a, b)


@U.batched
def _backward(a, P, Z, dP, dZ):
    if U.on_gpu():
        return _gpu_backward(a, P, Z, dP, dZ)
    from mingru._launch.linear_scan import linear_scan_bwd

    return U.host_call(linear_scan_bwd, (U.like(a), U.like(a)), a, P, Z, dP, dZ)


_op = U.affine_scan_vjp(_forward, _backward)
