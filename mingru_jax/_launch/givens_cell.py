"""jax-triton launcher for GivensMinGRU's fused cell (dispatch op ``givens_cell``; the twin of
:mod:`mingru._launch.givens_cell`).

The kernels are the Givens recurrence's (:mod:`mingru_kernels.givens_recurrence`) in their
gated form: they read the angles, ``k_z`` and ``k_h`` as columns of the mixer's one
projection ``k = [k_θ | k_z | k_h]`` (rows ``W`` elements apart; the adapters offset one
pointer, nothing is sliced out), form ``b = σ(k_z) ⊙ k_h`` in the kernel, and the backward
writes the whole gradient of ``k`` (``dθ``, ``dk_z``, ``dk_h``) into one ``(B, T, W)`` array.
A ``jax.custom_vjp`` saves ``k``, ``h_0``, the log-decay and the output ``h``.

:func:`walk_forward` and :func:`walk_backward` are shared with RotationMinGRU's cell
(:mod:`mingru_jax._launch.rotation_cell`: one round on 2×2 blocks, in rotation mode). See
:mod:`mingru_jax._launch._common` for the two routes of each launch.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from mingru_jax._eager.givens_cell import block_start
from mingru_jax._launch import _common as common
from mingru_kernels.givens_recurrence import (
    givens_recurrence_bwd_kernel,
    givens_recurrence_fwd_kernel,
)
from mingru_kernels.launch import givens_recurrence as meta
from mingru_kernels.launch import switches
from mingru_kernels.launch._elementwise import cdiv

__all__ = ["prefer_over_eager", "run", "unsupported_reason", "walk_backward", "walk_forward"]


def unsupported_reason(k, h0, log_gamma, block_size, rounds) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    if block_size not in meta.SUPPORTED_K:
        return f"block_size={block_size} not in {{2, 4, 8, 16}}"
    return common.unsupported_dtype_or_device(k)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend (it reads
    and writes less than the Givens recurrence kernel with the gate math around it)."""
    return True


def run(k: jax.Array, h0: jax.Array | None, log_gamma: jax.Array | None, block_size: int,
        rounds: int) -> jax.Array:
    """``h (B, T, D)``; jit/grad/vmap-compatible, differentiable in ``k``, ``h0`` and
    ``log_gamma``."""
    B, T, W = k.shape
    D = 2 * W // (rounds + 4)
    start = block_start(k, h0, D // block_size, block_size=block_size)
    h = _op(k, start, log_gamma, block_size, rounds)
    return h.reshape(B, T, D)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged, GATED on. The columns
# of k sit at element offsets 0 (θ), u_col (rotation's u), z_col (k_z) and h_col (k_h) of
# every W-element row.


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _fwd_adapter(k, g, snap, h0, s1, s2, npair, n, T, seg_len, nseg, row, u_col, z_col, h_col,
                 o1, o2,
                 K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
                 HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr, ROTATION: tl.constexpr,
                 SNAP: tl.constexpr):
    # COMPOSITE writes (m, c) = (o1, o2); otherwise h = o1 reading (m, c) = (s1, s2).
    if COMPOSITE:
        givens_recurrence_fwd_kernel(k, k + h_col, k + z_col, k + u_col, g, snap, h0, s1, o1,
                                     o2, npair, n, T, seg_len, nseg, row, row,
                                     K2, R, RP, LP, ROTATION, HAS_GAMMA, COMPOSITE,
                                     True, ROTATION, SNAP)
    else:
        givens_recurrence_fwd_kernel(k, k + h_col, k + z_col, k + u_col, g, snap, h0, o1, s1,
                                     s2, npair, n, T, seg_len, nseg, row, row,
                                     K2, R, RP, LP, ROTATION, HAS_GAMMA, COMPOSITE,
                                     True, ROTATION, SNAP)


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _bwd_adapter(k, g, snap, h, h0, dh, s1, s2, npair, n, T, seg_len, nseg, row, u_col, z_col,
                 h_col, o1, o2, o3,
                 K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
                 HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr, ROTATION: tl.constexpr,
                 SNAP: tl.constexpr):
    # COMPOSITE writes (m, c) = (o1, o2); otherwise (dk, dγ, dh0) = (o1, o2, o3), dk's columns
    # laid out like k's. JAX's dh is a contiguous (B, T, n·k) buffer: strides (T·n·k, n·k, 1).
    D = n * (2 * K2)
    if COMPOSITE:
        givens_recurrence_bwd_kernel(k, k + u_col, g, h, h0, k + h_col, k + z_col, snap, dh,
                                     s1, s1, s1, s1, s1, s1, o1, o2,
                                     npair, n, T, seg_len, nseg, row, row, T * D, D, 1,
                                     K2, R, RP, LP, ROTATION, HAS_GAMMA, COMPOSITE,
                                     True, ROTATION, SNAP)
    else:
        givens_recurrence_bwd_kernel(k, k + u_col, g, h, h0, k + h_col, k + z_col, snap, dh,
                                     o1, o1 + h_col, o1 + z_col, o1 + u_col, o2, o3, s1, s2,
                                     npair, n, T, seg_len, nseg, row, row, T * D, D, 1,
                                     K2, R, RP, LP, ROTATION, HAS_GAMMA, COMPOSITE,
                                     True, ROTATION, SNAP)


# ----------------------------------------------------------------------------- launch sequences


def _setup(B: int, T: int, n: int, *, k: int, R: int):
    cfg = meta.givens_config(k, R)
    seg_len, nseg = meta.segment_plan(T, switches.plan_choices("givens_recurrence").get("seg_len"))
    return B * n, cfg, (B * n, n, T, seg_len, nseg), nseg


def _consts(k: int, R: int, cfg: dict, *, log_gamma, rotation: bool, snap) -> dict:
    return dict(K2=k // 2, R=R, RP=cfg["RP"], HAS_GAMMA=log_gamma is not None,
                ROTATION=rotation, SNAP=snap is not None)


def walk_forward(k: jax.Array, h0: jax.Array, log_gamma: jax.Array | None,
                 *, snap: jax.Array | None, R: int, cols: tuple[int, int, int],
                 rotation: bool = False) -> tuple[jax.Array]:
    """``(h,)``, ``h (B, T, n, bk)`` from the projection ``k (B, T, W)`` whose columns
    ``(u, k_z, k_h)`` start at ``cols`` (θ at 0) and the start state ``h0 (B, n, bk)``."""
    B, T, W = k.shape
    _, n, bk = h0.shape
    npair, cfg, dims, nseg = _setup(B, T, n, k=bk, R=R)
    consts = _consts(bk, R, cfg, log_gamma=log_gamma, rotation=rotation, snap=snap)
    g = k if log_gamma is None else log_gamma  # dummy pointers when absent
    sn = k if snap is None else snap
    scalars = (*dims, W, *cols)
    m, c = k, k  # unread when nseg == 1
    if nseg > 1:
        m, c = common.launch(
            _fwd_adapter, (cdiv(npair, cfg["LP_COMP"]), nseg), (k, g, sn, h0, k, k),
            outputs=(common.f32((npair, nseg, bk, bk)), common.f32((npair, nseg, bk))),
            scalars=scalars, LP=cfg["LP_COMP"], COMPOSITE=True, num_warps=cfg["num_warps_comp"],
            **consts)
    h, _ = common.launch(
        _fwd_adapter, (cdiv(npair, cfg["LP"]), nseg), (k, g, sn, h0, m, c),
        outputs=(jax.ShapeDtypeStruct((B, T, n, bk), k.dtype), common.f32((1,))), scalars=scalars,
        LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"], **consts,
    )
    return (h,)


def walk_backward(k: jax.Array, h0: jax.Array, log_gamma: jax.Array | None,
                  *, snap: jax.Array | None, h: jax.Array, dh: jax.Array, R: int,
                  cols: tuple[int, int, int], rotation: bool = False
                  ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """``(dk, dh0, dlog_gamma)`` (``dlog_gamma`` a one-element placeholder when
    ``log_gamma`` is absent) for ``h`` of :func:`walk_forward` and its cotangent ``dh``."""
    B, T, W = k.shape
    _, n, bk = h0.shape
    npair, cfg, dims, nseg = _setup(B, T, n, k=bk, R=R)
    consts = _consts(bk, R, cfg, log_gamma=log_gamma, rotation=rotation, snap=snap)
    g = k if log_gamma is None else log_gamma
    sn = k if snap is None else snap
    scalars = (*dims, W, *cols)
    ins = (k, g, sn, h, h0, dh.reshape(B, T, n * bk))
    m, c = k, k
    if nseg > 1:
        m, c = common.launch(
            _bwd_adapter, (cdiv(npair, cfg["LP_COMP"]), nseg), (*ins, k, k),
            outputs=(common.f32((npair, nseg, bk, bk)), common.f32((npair, nseg, bk)),
             common.f32((1,))), scalars=scalars,
            LP=cfg["LP_COMP"], COMPOSITE=True, num_warps=cfg["num_warps_comp"], **consts,
        )[:2]
    outs = (common.like(k), common.f32((1,)) if log_gamma is None else common.like(log_gamma),
            common.like(h0))
    dk, dg, dh0 = common.launch(
        _bwd_adapter, (cdiv(npair, cfg["LP"]), nseg), (*ins, m, c), outputs=outs, scalars=scalars,
        LP=cfg["LP"], COMPOSITE=False, num_warps=cfg["num_warps"], **consts,
    )
    return dk, dh0, dg


# ----------------------------------------------------------------------------- custom_vjp


def _cols(W: int, rounds: int) -> tuple[int, int, int]:
    """Where ``(u, k_z, k_h)`` start in a row of ``[k_θ | k_z | k_h]`` (no ``u``: 0)."""
    D = 2 * W // (rounds + 4)
    return 0, D * rounds // 2, D * rounds // 2 + D


def _forward(k, h0, log_gamma, rounds):
    return walk_forward(k, h0, log_gamma, snap=None, R=rounds, cols=_cols(k.shape[-1], rounds))


def _backward(k, h0, log_gamma, h, dh, rounds):
    dk, dh0, dg = walk_backward(k, h0, log_gamma, snap=None, h=h, dh=dh, R=rounds,
                                cols=_cols(k.shape[-1], rounds))
    # Only present inputs get a gradient; the batch rule needs a leading B on every output.
    return (dk, dh0) if log_gamma is None else (dk, dh0, dg)


@functools.cache
def _batched(rounds: int):
    return (common.batched(lambda k, h0, lg: _forward(k, h0, lg, rounds=rounds)),
            common.batched(lambda k, h0, lg, h,
                           dh: _backward(k, h0, lg, h=h, dh=dh, rounds=rounds)))


@functools.partial(common.custom_vjp, nondiff_argnums=(3, 4))
def _op(k, h0, log_gamma, block_size, rounds):
    return _batched(rounds)[0](k, h0, log_gamma)[0]


def _op_fwd(k, h0, log_gamma, block_size, rounds):
    (h,) = _batched(rounds)[0](k, h0, log_gamma)
    return h, (k, h0, log_gamma, h)


def _op_bwd(block_size, rounds, res, dh):
    k, h0, log_gamma, h = res
    grads = _batched(rounds)[1](k, h0, log_gamma, h, jnp.asarray(dh, h.dtype))
    return grads[0], grads[1], None if log_gamma is None else grads[2]


_op.defvjp(_op_fwd, _op_bwd)
