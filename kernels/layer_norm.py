"""Fused Triton kernels for the blocks' LayerNorm (op ``layer_norm``): the normalisation in
float32 with the result stored in the caller's output dtype, and its backward in one pass
over the rows plus a small reduction of the weight and bias gradients.

Framework-free (``triton`` only); the launcher is ``mingru._launch.layer_norm``, the launch
metadata :mod:`mingru_kernels.launch.layer_norm`. Only the PyTorch frontend launches it: under
``torch.autocast`` a block's ``nn.LayerNorm`` runs in float32, its output is cast again for the
projection that reads it, and PyTorch's backward reduces the weight gradient slowly. That is
two launches, a float32 round trip of a ``(B, T, d)`` tensor, and a slow reduction per norm,
per direction. XLA fuses the norm and the cast by itself.

Forward, one program per row of ``x (N, D)``: ``mean``, ``rstd = 1/sqrt(var + eps)`` (two
passes over the row held in registers, so no cancellation), ``y = (x − mean)·rstd·w + b``
stored in ``y``'s dtype; ``mean`` and ``rstd`` (float32, ``(N,)``) are kept for the backward.
The residual variant (``add_layer_norm``, inference only) first adds a second row, stores that
sum and normalises it: a decode step's residual add and the next norm in one launch.

Backward, one program per group of rows: with ``x̂ = (x − mean)·rstd`` and ``g = dy·w``,
``dx = rstd·(g − x̂·mean(g·x̂) − mean(g))`` in ``x``'s dtype; the group's partial sums of
``dy·x̂`` and ``dy`` (the weight and bias gradients) go to one float32 row per group. A second,
small kernel sums those rows (a few hundred instead of ``N``) column by column and stores the
weight and bias gradients in their parameters' dtypes: one launch where two ``sum``s and two
casts on the host would cost four calls on the backward's host path.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _normalized(x, cols, ok, w_ptr, b_ptr, D, eps, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    # (y, mean, rstd) of one float32 row held in registers.
    mean = tl.sum(x, axis=0) / D
    xc = tl.where(ok, x - mean, 0.0)
    rstd = 1.0 / tl.sqrt(tl.sum(xc * xc, axis=0) / D + eps)
    y = xc * rstd
    if HAS_W:
        y = y * tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    if HAS_B:
        y = y + tl.load(b_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    return y, mean, rstd


@triton.jit
def layer_norm_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, mean_ptr, rstd_ptr, D, eps,
                          HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=ok, other=0.0).to(tl.float32)
    y, mean, rstd = _normalized(x, cols, ok, w_ptr, b_ptr, D, eps, HAS_W, HAS_B)
    tl.store(y_ptr + row * D + cols, y.to(y_ptr.dtype.element_ty), mask=ok)
    tl.store(mean_ptr + row, mean)
    tl.store(rstd_ptr + row, rstd)


@triton.jit
def add_layer_norm_fwd_kernel(x_ptr, r_ptr, w_ptr, b_ptr, s_ptr, y_ptr, D, eps,
                              HAS_W: tl.constexpr, HAS_B: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    ok = cols < D
    at = row * D + cols
    total = (tl.load(x_ptr + at, mask=ok, other=0.0).to(tl.float32)
             + tl.load(r_ptr + at, mask=ok, other=0.0).to(tl.float32))
    # Normalise the sum as stored, as a separate add and norm would.
    total = total.to(s_ptr.dtype.element_ty)
    tl.store(s_ptr + at, total, mask=ok)
    y, mean, rstd = _normalized(total.to(tl.float32), cols, ok, w_ptr, b_ptr, D, eps, HAS_W,
                                HAS_B)
    tl.store(y_ptr + at, y.to(y_ptr.dtype.element_ty), mask=ok)


@triton.jit
def layer_norm_bwd_kernel(x_ptr, w_ptr, dy_ptr, mean_ptr, rstd_ptr, dx_ptr, dw_ptr, db_ptr,
                          N, D, rows_per_group, HAS_W: tl.constexpr, BLOCK: tl.constexpr):
    group = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    ok = cols < D
    if HAS_W:
        w = tl.load(w_ptr + cols, mask=ok, other=0.0).to(tl.float32)
    dw = tl.zeros([BLOCK], tl.float32)
    db = tl.zeros([BLOCK], tl.float32)
    first = group * rows_per_group
    for i in range(0, rows_per_group):
        row = first + i
        if row < N:
            at = row.to(tl.int64) * D + cols
            x = tl.load(x_ptr + at, mask=ok, other=0.0).to(tl.float32)
            dy = tl.load(dy_ptr + at, mask=ok, other=0.0).to(tl.float32)
            mean = tl.load(mean_ptr + row)
            rstd = tl.load(rstd_ptr + row)
            xhat = tl.where(ok, (x - mean) * rstd, 0.0)
            g = dy * w if HAS_W else dy
            c1 = tl.sum(xhat * g, axis=0) / D
            c2 = tl.sum(g, axis=0) / D
            dx = (g - xhat * c1 - c2) * rstd
            tl.store(dx_ptr + at, dx.to(dx_ptr.dtype.element_ty), mask=ok)
            dw += dy * xhat
            db += dy
    tl.store(dw_ptr + group.to(tl.int64) * D + cols, dw, mask=ok)
    tl.store(db_ptr + group.to(tl.int64) * D + cols, db, mask=ok)


@triton.jit
def layer_norm_bwd_sum_kernel(dw_part_ptr, db_part_ptr, dw_ptr, db_ptr, groups, D,
                              HAS_W: tl.constexpr, HAS_B: tl.constexpr,
                              BLOCK_G: tl.constexpr, BLOCK_D: tl.constexpr):
    # One program per BLOCK_D columns walks the ``groups`` partial rows in float32.
    cols = tl.program_id(0) * BLOCK_D + tl.arange(0, BLOCK_D)
    ok = cols < D
    dw = tl.zeros([BLOCK_D], tl.float32)
    db = tl.zeros([BLOCK_D], tl.float32)
    for start in range(0, groups, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        at = rows.to(tl.int64)[:, None] * D + cols[None, :]
        mask = (rows < groups)[:, None] & ok[None, :]
        if HAS_W:
            dw += tl.sum(tl.load(dw_part_ptr + at, mask=mask, other=0.0), axis=0)
        if HAS_B:
            db += tl.sum(tl.load(db_part_ptr + at, mask=mask, other=0.0), axis=0)
    if HAS_W:
        tl.store(dw_ptr + cols, dw.to(dw_ptr.dtype.element_ty), mask=ok)
    if HAS_B:
        tl.store(db_ptr + cols, db.to(db_ptr.dtype.element_ty), mask=ok)
