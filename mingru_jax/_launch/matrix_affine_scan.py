"""jax-triton launcher for :func:`mingru_jax.matrix_affine_scan` (and ``matrix_scan``; kernels
in :mod:`mingru_kernels.matrix_affine_scan`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``A`` and the
outputs ``P, Z`` only. See :mod:`mingru_jax._launch._common` for the two routes of each
launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_kernels.launch import matrix_affine_scan as meta
from mingru_kernels.launch import switches
from mingru_kernels.matrix_affine_scan import (
    matrix_affine_scan_bwd_kernel,
    matrix_affine_scan_fwd_kernel,
)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(A: jax.Array, Bm: jax.Array) -> str | None:
    """Why the kernel cannot run ``matrix_affine_scan(A, Bm)``, or ``None``."""
    k, v = A.shape[-1], Bm.shape[-1]
    if k not in meta.SUPPORTED_SIZES:
        return f"k={k} not in {{1, 2, 4, 8, 16}}"
    if v not in meta.SUPPORTED_SIZES:
        return f"v={v} not in {{1, 2, 4, 8, 16}}"
    return common.unsupported_dtype_or_device(A)


def prefer_over_eager(A: jax.Array, Bm: jax.Array) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend."""
    return True


def run(A: jax.Array, Bm: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(P, Z)`` for ``H_t = A_t H_{t-1} + B_t``; jit/grad/vmap-compatible."""
    return _op(A, Bm)


# ----------------------------------------------------------------------------- adapters
# Outputs last (jax-triton's layout); the kernels are called unchanged.


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _fwd_adapter(a, b, s1, s2, npair, n, T, seg_len, nseg, o1, o2,
                 K: tl.constexpr, V: tl.constexpr, LP: tl.constexpr, COMPOSITE: tl.constexpr):
    # COMPOSITE writes (m, c) = (o1, o2); otherwise (P, Z) = (o1, o2) reading (m, c) = (s1, s2).
    if COMPOSITE:
        matrix_affine_scan_fwd_kernel(a, b, s1, s2, o1, o2, npair, n, T, seg_len, nseg, K, V, LP, COMPOSITE)
    else:
        matrix_affine_scan_fwd_kernel(a, b, o1, o2, s1, s2, npair, n, T, seg_len, nseg, K, V, LP, COMPOSITE)


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def _bwd_adapter(a, P, Z, dP, dZ, s1, s2, npair, n, T, seg_len, nseg, o1, o2,
                 K: tl.constexpr, V: tl.constexpr, LP: tl.constexpr,
                 HAS_DP: tl.constexpr, COMPOSITE: tl.constexpr):
    if COMPOSITE:
        matrix_affine_scan_bwd_kernel(a, P, Z, dP, dZ, s1, s2, o1, o2, npair, n, T, seg_len, nseg,
                             K, V, LP, HAS_DP, COMPOSITE)
    else:
        matrix_affine_scan_bwd_kernel(a, P, Z, dP, dZ, o1, o2, s1, s2, npair, n, T, seg_len, nseg,
                             K, V, LP, HAS_DP, COMPOSITE)


# ----------------------------------------------------------------------------- launch sequences


def _plan(A, v: int) -> meta.WalkPlan:
    """The launch over ``A``'s blocks with ``k×v`` states (a test may force the segments)."""
    return meta.walk_plan(A.shape, v,
                          seg_len=switches.plan_choices("matrix_affine_scan").get("seg_len"))


def _launch_forward(A, Bm):
    k, v = A.shape[-1], Bm.shape[-1]
    plan = _plan(A, v)
    m, c = A, Bm  # unread when nseg == 1
    if plan.nseg > 1:
        m, c = common.launch(
            _fwd_adapter, plan.grid, (A, Bm, A, Bm),
            outputs=(common.f32((plan.npair, plan.nseg, k, k)),
                     common.f32((plan.npair, plan.nseg, k, v))),
            scalars=plan.scalars, COMPOSITE=True, **plan.constants)
    return common.launch(_fwd_adapter, plan.grid, (A, Bm, m, c),
                         outputs=(common.like(A), common.like(Bm)), scalars=plan.scalars,
                         COMPOSITE=False, **plan.constants)


def _launch_backward(A, P, Z, dP, dZ):
    k, v = A.shape[-1], Z.shape[-1]
    plan = _plan(A, v)
    ins = (A, P, Z, dP, dZ)
    m, c = A, Z
    if plan.nseg > 1:
        m, c = common.launch(
            _bwd_adapter, plan.grid, (*ins, A, Z),
            outputs=(common.f32((plan.npair, plan.nseg, k, k)),
                     common.f32((plan.npair, plan.nseg, k, v + k))),
            scalars=plan.scalars, COMPOSITE=True, HAS_DP=True, **plan.constants)
    return common.launch(_bwd_adapter, plan.grid, (*ins, m, c),
                         outputs=(common.like(A), common.like(Z)), scalars=plan.scalars,
                         COMPOSITE=False, HAS_DP=True, **plan.constants)


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)
_op = common.affine_scan_vjp(_forward, _backward)
