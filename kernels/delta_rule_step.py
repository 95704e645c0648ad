"""Fused Triton kernel for one token of the delta-rule mixer (op ``delta_rule_step``): from the
mixer's one projection ``p = x_t W^T + c`` and the previous state to the output ``o`` and the
new state, in one pass. Inference only (no backward kernel).

Framework-free (``triton`` only); the launcher is ``mingru._launch.delta_rule_step``, the
launch metadata :mod:`mingru_kernels.launch.delta_rule_step`. Without it a decoded token costs
the inputs' pass (:mod:`mingru_kernels.delta_inputs`), the decay, about five small kernels per
micro-step and the output's product: a string of launches, each far longer on the host than
its work on the device.

Columns of ``p`` (one row per sequence, ``G = nh·H`` key groups), as in
:mod:`mingru_kernels.delta_inputs`: ``q`` ``[0, H·d_k)``; ``k`` ``G`` groups of ``d_k`` from
``H·d_k``; ``v`` ``G·d_v`` after them; the ``G`` β-logits last (group ``j·H + h``: micro-step
``j`` of head ``h``).

One program per (sequence ``b``, head ``h``, block of ``BV`` columns of ``S``): the columns of
``S (d_k × d_v)`` evolve independently (every update is a left product plus a column-wise
term), so splitting ``d_v`` is exact. The program holds its ``(BK, BV)`` tile of ``S`` in
float32 registers (``BK ≥ d_k``, padded rows and columns masked), loads it from ``h_prev``
(``HAS_STATE``; else zeros, nothing read), scales it by ``γ = exp(log γ)`` (``HAS_DECAY``; a
``(B, 1)`` decay is read with column stride 0), then for each micro-step ``j``:
``k̂ = k / max(‖k‖, eps)``, ``β = 2σ(z)``, ``err = v − Sᵀk̂``, ``S ← S + β k̂ errᵀ``; finally
``o = Sᵀq``. It writes ``o (B, H, d_v)`` and the new ``S (B, H, d_k, d_v)`` in their
tensors' dtype; every load is cast to float32 first.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def delta_rule_step_fwd_kernel(p_ptr, lg_ptr, s_ptr, o_ptr, out_s_ptr, p_row, lg_row, lg_col, H,
                               NH, DK, DV, eps, HAS_STATE: tl.constexpr, HAS_DECAY: tl.constexpr,
                               BK: tl.constexpr, BV: tl.constexpr):
    bh = tl.program_id(0).to(tl.int64)
    b = bh // H
    h = bh % H
    rows = tl.arange(0, BK)
    cols = tl.program_id(1) * BV + tl.arange(0, BV)
    row_ok = rows < DK
    col_ok = cols < DV
    tile_ok = row_ok[:, None] & col_ok[None, :]
    at = (bh * DK + rows[:, None]) * DV + cols[None, :]  # the tile in (B, H, d_k, d_v)
    if HAS_STATE:
        S = tl.load(s_ptr + at, mask=tile_ok, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], tl.float32)
    if HAS_DECAY:
        S *= tl.exp(tl.load(lg_ptr + b * lg_row + h * lg_col).to(tl.float32))
    row = p_ptr + b * p_row
    G = NH * H
    k_col = H * DK  # the first key group's first column
    v_col = k_col + G * DK
    beta_col = v_col + G * DV
    for j in range(0, NH):
        group = j * H + h
        key = tl.load(row + k_col + group * DK + rows, mask=row_ok, other=0.0).to(tl.float32)
        key = key / tl.maximum(tl.sqrt(tl.sum(key * key, axis=0)), eps)
        value = tl.load(row + v_col + group * DV + cols, mask=col_ok, other=0.0).to(tl.float32)
        beta = 2.0 * tl.sigmoid(tl.load(row + beta_col + group).to(tl.float32))
        err = value - tl.sum(key[:, None] * S, axis=0)  # v − Sᵀk̂
        S += (beta * key)[:, None] * err[None, :]
    query = tl.load(row + h * DK + rows, mask=row_ok, other=0.0).to(tl.float32)
    o = tl.sum(query[:, None] * S, axis=0)
    tl.store(o_ptr + bh * DV + cols, o.to(o_ptr.dtype.element_ty), mask=col_ok)
    tl.store(out_s_ptr + at, S.to(out_s_ptr.dtype.element_ty), mask=tile_ok)
