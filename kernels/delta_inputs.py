"""Fused Triton kernels for the delta-rule mixer's inputs (op ``delta_inputs``): from its one
projection ``p = x W^T + c`` (``(N, W)``, columns ``[q | k | v | β-logits]``) to the delta
rule's ``q``, L2-normalised ``k``, ``v`` and ``β = 2σ(·)``, each contiguous, in one read and
one write; and back to ``dp`` in one pass.

Framework-free (``triton`` only); the launcher is ``mingru._launch.delta_inputs``, the launch
metadata :mod:`mingru_kernels.launch.delta_inputs`. Without it the mixer spends, per
direction, a copy of each of ``q`` and ``v`` out of the projection (column slices are not
contiguous), the norm's reduction and division, the sigmoid and its scale, and in the backward
the norm's and the sigmoid's derivatives and the concatenation of the four gradients into
``dp``: a string of elementwise passes over memory that this one read and write replace.

Columns of ``p`` (``G = nh·H`` key groups): ``q`` ``[0, H·d_k)``; ``k`` ``G`` groups of
``d_k`` from ``H·d_k``; ``v`` ``G·d_v`` after them; the ``G`` β-logits last.

Forward, one program per ``BR`` rows: ``q`` and ``v`` copied, each key group ``k̂ = k /
max(‖k‖, eps)`` with ``‖k‖`` kept (float32, ``(N, G)``) for the backward, ``β = 2σ(z)``.

Backward, from the outputs ``k̂``, ``β`` and the norms (no copy of ``p`` is kept):
``dk = (dk̂ − k̂ ⟨k̂, dk̂⟩) / ‖k‖`` where ``‖k‖ > eps``, else ``dk̂ / eps`` (the clamp's
branch), ``dz = dβ · β (1 − β/2)``, and ``dq``, ``dv`` copied; absent gradients write zeros.
All arithmetic in float32; stores in the destination's dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _copy_cols(src_ptr, src_stride, src_col, dst_ptr, dst_stride, dst_col, rows, row_ok, ncols,
               HAS_SRC: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    """``dst[rows, dst_col + c] = src[rows, src_col + c]`` for ``c < ncols`` (zeros without a
    source), in ``BC``-wide column blocks."""
    cols = tl.arange(0, BC)
    for c0 in range(0, ncols, BC):
        c = c0 + cols
        ok = row_ok[:, None] & (c < ncols)[None, :]
        if HAS_SRC:
            x = tl.load(src_ptr + rows[:, None] * src_stride + (src_col + c)[None, :], mask=ok,
                        other=0.0)
        else:
            x = tl.zeros([BR, BC], tl.float32)
        tl.store(dst_ptr + rows[:, None] * dst_stride + (dst_col + c)[None, :],
                 x.to(dst_ptr.dtype.element_ty), mask=ok)


@triton.jit
def delta_inputs_fwd_kernel(p_ptr, q_ptr, k_ptr, v_ptr, beta_ptr, norm_ptr, N, W, QW, G, DK, DV,
                            eps, BR: tl.constexpr, BC: tl.constexpr, BK: tl.constexpr,
                            BG: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    row_ok = rows < N
    _copy_cols(p_ptr, W, 0, q_ptr, QW, 0, rows, row_ok, QW, True, BR, BC)
    _copy_cols(p_ptr, W, QW + G * DK, v_ptr, G * DV, 0, rows, row_ok, G * DV, True, BR, BC)
    kc = tl.arange(0, BK)
    k_ok = row_ok[:, None] & (kc < DK)[None, :]
    for g in range(0, G):
        x = tl.load(p_ptr + rows[:, None] * W + (QW + g * DK + kc)[None, :], mask=k_ok,
                    other=0.0).to(tl.float32)
        norm = tl.sqrt(tl.sum(x * x, axis=1))
        y = x / tl.maximum(norm, eps)[:, None]
        tl.store(k_ptr + rows[:, None] * (G * DK) + (g * DK + kc)[None, :],
                 y.to(k_ptr.dtype.element_ty), mask=k_ok)
        tl.store(norm_ptr + rows * G + g, norm, mask=row_ok)
    gc = tl.arange(0, BG)
    g_ok = row_ok[:, None] & (gc < G)[None, :]
    z = tl.load(p_ptr + rows[:, None] * W + (QW + G * (DK + DV) + gc)[None, :], mask=g_ok,
                other=0.0).to(tl.float32)
    tl.store(beta_ptr + rows[:, None] * G + gc[None, :],
             (2.0 * tl.sigmoid(z)).to(beta_ptr.dtype.element_ty), mask=g_ok)


@triton.jit
def delta_inputs_bwd_kernel(k_ptr, beta_ptr, norm_ptr, dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dp_ptr,
                            N, W, QW, G, DK, DV, eps, HAS_DQ: tl.constexpr,
                            HAS_DK: tl.constexpr, HAS_DV: tl.constexpr,
                            HAS_DBETA: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr,
                            BK: tl.constexpr, BG: tl.constexpr):
    rows = tl.program_id(0).to(tl.int64) * BR + tl.arange(0, BR)
    row_ok = rows < N
    _copy_cols(dq_ptr, QW, 0, dp_ptr, W, 0, rows, row_ok, QW, HAS_DQ, BR, BC)
    _copy_cols(dv_ptr, G * DV, 0, dp_ptr, W, QW + G * DK, rows, row_ok, G * DV, HAS_DV, BR, BC)
    kc = tl.arange(0, BK)
    k_ok = row_ok[:, None] & (kc < DK)[None, :]
    for g in range(0, G):
        at = rows[:, None] * (G * DK) + (g * DK + kc)[None, :]
        if HAS_DK:
            y = tl.load(k_ptr + at, mask=k_ok, other=0.0).to(tl.float32)
            dy = tl.load(dk_ptr + at, mask=k_ok, other=0.0).to(tl.float32)
            norm = tl.load(norm_ptr + rows * G + g, mask=row_ok, other=1.0)
            s = tl.sum(y * dy, axis=1)
            big = norm > eps
            dx = tl.where(big[:, None], (dy - y * s[:, None]) / tl.where(big, norm, 1.0)[:, None],
                          dy / eps)
        else:
            dx = tl.zeros([BR, BK], tl.float32)
        tl.store(dp_ptr + rows[:, None] * W + (QW + g * DK + kc)[None, :],
                 dx.to(dp_ptr.dtype.element_ty), mask=k_ok)
    gc = tl.arange(0, BG)
    g_ok = row_ok[:, None] & (gc < G)[None, :]
    if HAS_DBETA:
        at = rows[:, None] * G + gc[None, :]
        beta = tl.load(beta_ptr + at, mask=g_ok, other=0.0).to(tl.float32)
        dz = tl.load(dbeta_ptr + at, mask=g_ok, other=0.0).to(tl.float32) * beta * (1.0 - 0.5 * beta)
    else:
        dz = tl.zeros([BR, BG], tl.float32)
    tl.store(dp_ptr + rows[:, None] * W + (QW + G * (DK + DV) + gc)[None, :],
             dz.to(dp_ptr.dtype.element_ty), mask=g_ok)
