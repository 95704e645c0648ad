"""Fused Triton kernels for the elementwise linear scan ``h_t = a_t h_{t-1} + b_t`` (signed ``a``).

Framework-free (``triton`` only); the PyTorch launcher is ``mingru._launch.linear_scan``.

Forward: ``a, b (B, T, D)`` → ``P_t = a_t ⋯ a_1`` and the zero-start solution ``Z_t``, both in
the input dtype (fp32 accumulation). Each program scans ``[BLOCK_T, BLOCK_D]`` tiles along
time with ``tl.associative_scan`` on ``(a, b)`` pairs; the running carry ``(P, Z)`` of the
previous tile is folded into the tile's first row before its scan.

Backward: with ``dP, dZ`` the adjoints ``G_t = dZ_t + a_{t+1} G_{t+1}`` and
``GP_t = dP_t + a_{t+1} GP_{t+1}`` (``G_{T+1} = 0``) are one reversed scan sharing the
coefficient ``a_{t+1}``; then ``db_t = G_t`` and ``da_t = G_t Z_{t-1} + GP_t P_{t-1}``
(``Z_{-1} = 0``, ``P_{-1} = 1``). It reads the saved outputs ``P, Z`` (no division, no
recompute). Without ``dP`` (``HAS_DP = False``) the ``GP`` scan and the ``P`` reads are skipped.

Launch sequences (``cfg = plan(B, T, D)`` from :mod:`mingru_kernels.launch.linear_scan`; grids from
``grid(cfg, B)`` / ``carry_grid(cfg, B)``; summary/carry buffers are fp32 ``(B, N, D)``):

* walk: ``linear_scan_fwd_kernel[grid](..., MODE=WALK)``.
* chunked forward: ``fwd[grid](a, b, P, Z, sa, sb, MODE=SUMMARY)``;
  ``linear_carry_kernel[carry_grid](sa, sb, -, ca, cb, -, REVERSE=False, STORE_A=True)``;
  ``fwd[grid](a, b, P, Z, ca, cb, MODE=APPLY)``.
* chunked backward: ``bwd[grid](..., sc, sg, sgp, MODE=SUMMARY)``;
  ``linear_carry_kernel[carry_grid](sc, sg, sgp, -, cg, cgp, REVERSE=True, STORE_A=False)``;
  ``bwd[grid](..., -, cg, cgp, MODE=APPLY)``.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels import _constants as constants
from mingru_kernels._scan_common import linear_carry_kernel, mul_add, mul_add2, take_row

__all__ = [
    "linear_carry_kernel",
    "linear_scan_bwd_kernel",
    "linear_scan_fwd_kernel",
]


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def linear_scan_fwd_kernel(
    a_ptr, b_ptr,  # (B, T, D) inputs, contiguous
    p_ptr, z_ptr,  # (B, T, D) outputs, input dtype
    sa_ptr, sb_ptr,  # (B, N, D) fp32: chunk maps out (SUMMARY) / carry-ins in (APPLY)
    T, D, chunk_len, n_chunks, n_dblk,
    MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_d = pid % n_dblk
    rest = pid // n_dblk
    pid_c = rest % n_chunks
    pid_b = rest // n_chunks
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    intra = rows[:, None] * D + cols[None, :]
    first = rows[:, None] == 0
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    seq = pid_b.to(tl.int64) * T * D
    s_off = (pid_b.to(tl.int64) * n_chunks + pid_c) * D + cols

    if MODE == constants.APPLY:
        cp = tl.load(sa_ptr + s_off, mask=col_ok, other=1.0)
        cz = tl.load(sb_ptr + s_off, mask=col_ok, other=0.0)
    else:
        cp = tl.full([BLOCK_D], 1.0, tl.float32)
        cz = tl.zeros([BLOCK_D], tl.float32)

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t0 = t_start + k * BLOCK_T
        m = ((t0 + rows) < t_end)[:, None] & col_ok[None, :]
        tile = seq + t0.to(tl.int64) * D
        # Padding rows load the identity map (1, 0), so the tile's last row is its total.
        a = tl.load(a_ptr + tile + intra, mask=m, other=1.0).to(tl.float32)
        b = tl.load(b_ptr + tile + intra, mask=m, other=0.0).to(tl.float32)
        if MODE == constants.SUMMARY:
            # tl.reduce may reorder operands on GPU; the combine is not commutative, so scan
            # and take the last row (padding rows hold the identity).
            _sta, _stb = tl.associative_scan((a, b), 0, mul_add)
            ta = take_row(_sta, rows, BLOCK_T - 1)
            tb = take_row(_stb, rows, BLOCK_T - 1)
            cp, cz = mul_add(cp, cz, ta, tb)
        else:
            # Fold the carry into the first row: the scan then yields P and Z directly.
            b = tl.where(first, a * cz[None, :] + b, b)
            a = tl.where(first, a * cp[None, :], a)
            P, Z = tl.associative_scan((a, b), 0, mul_add)
            tl.store(p_ptr + tile + intra, P.to(p_ptr.dtype.element_ty), mask=m)
            tl.store(z_ptr + tile + intra, Z.to(z_ptr.dtype.element_ty), mask=m)
            cp = take_row(P, rows, BLOCK_T - 1)
            cz = take_row(Z, rows, BLOCK_T - 1)

    if MODE == constants.SUMMARY:
        tl.store(sa_ptr + s_off, cp, mask=col_ok)
        tl.store(sb_ptr + s_off, cz, mask=col_ok)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def linear_scan_bwd_kernel(
    a_ptr, p_ptr, z_ptr,  # (B, T, D) input a and the saved outputs P, Z
    dp_ptr, dz_ptr,  # (B, T, D) output gradients, any strides (dp_ptr unused unless HAS_DP)
    da_ptr, db_ptr,  # (B, T, D) input gradients, input dtype
    sc_ptr, sg_ptr, sgp_ptr,  # (B, N, D) fp32: chunk maps out (SUMMARY) / carry-ins (APPLY)
    T, D, chunk_len, n_chunks, n_dblk, dz_sb, dz_st, dz_sd, dp_sb, dp_st, dp_sd,
    MODE: tl.constexpr, HAS_DP: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid = tl.program_id(0)
    pid_d = pid % n_dblk
    rest = pid // n_dblk
    pid_c = rest % n_chunks
    pid_b = rest // n_chunks
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    # Row r of a tile is time t_hi - r: the adjoint runs backwards in time.
    rev = cols[None, :] - rows[:, None] * D
    # The output gradients are read through their strides: the gradient of a sum arrives
    # expanded (stride 0) and is not copied.
    dz_rev = cols[None, :] * dz_sd - rows[:, None] * dz_st
    dp_rev = cols[None, :] * dp_sd - rows[:, None] * dp_st
    first = rows[:, None] == 0
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    seq = pid_b.to(tl.int64) * T * D
    s_off = (pid_b.to(tl.int64) * n_chunks + pid_c) * D + cols

    cc = tl.full([BLOCK_D], 1.0, tl.float32)
    if MODE == constants.APPLY:
        cg = tl.load(sg_ptr + s_off, mask=col_ok, other=0.0)
        if HAS_DP:
            cgp = tl.load(sgp_ptr + s_off, mask=col_ok, other=0.0)
        else:
            cgp = tl.zeros([BLOCK_D], tl.float32)
    else:
        cg = tl.zeros([BLOCK_D], tl.float32)
        cgp = tl.zeros([BLOCK_D], tl.float32)

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t_hi = t_end - 1 - k * BLOCK_T
        t = t_hi - rows
        ok = t >= t_start
        m = ok[:, None] & col_ok[None, :]
        tile = seq + t_hi.to(tl.int64) * D
        # Coefficient of step t is a_{t+1} (0 past the end); padding rows are the identity.
        coef = tl.load(a_ptr + tile + D + rev, mask=m & (t + 1 < T)[:, None], other=0.0)
        coef = tl.where(ok[:, None], coef.to(tl.float32), 1.0)
        g = tl.load(dz_ptr + pid_b.to(tl.int64) * dz_sb + t_hi.to(tl.int64) * dz_st + dz_rev,
                    mask=m, other=0.0).to(tl.float32)
        if HAS_DP:
            gp = tl.load(dp_ptr + pid_b.to(tl.int64) * dp_sb + t_hi.to(tl.int64) * dp_st
                         + dp_rev, mask=m, other=0.0).to(tl.float32)
        if MODE == constants.SUMMARY:
            if HAS_DP:
                # tl.reduce may reorder operands on GPU; the combine is not commutative, so scan
                # and take the last row (padding rows hold the identity).
                _stc, _stg, _stgp = tl.associative_scan((coef, g, gp), 0, mul_add2)
                tc = take_row(_stc, rows, BLOCK_T - 1)
                tg = take_row(_stg, rows, BLOCK_T - 1)
                tgp = take_row(_stgp, rows, BLOCK_T - 1)
                cc, cg, cgp = mul_add2(cc, cg, cgp, tc, tg, tgp)
            else:
                # tl.reduce may reorder operands on GPU; the combine is not commutative, so scan
                # and take the last row (padding rows hold the identity).
                _stc, _stg = tl.associative_scan((coef, g), 0, mul_add)
                tc = take_row(_stc, rows, BLOCK_T - 1)
                tg = take_row(_stg, rows, BLOCK_T - 1)
                cc, cg = mul_add(cc, cg, tc, tg)
        else:
            g = tl.where(first, coef * cg[None, :] + g, g)
            prev_ok = m & (t >= 1)[:, None]
            z_prev = tl.load(z_ptr + tile - D + rev, mask=prev_ok, other=0.0).to(tl.float32)
            if HAS_DP:
                gp = tl.where(first, coef * cgp[None, :] + gp, gp)
                _, G, GP = tl.associative_scan((coef, g, gp), 0, mul_add2)
                p_prev = tl.load(p_ptr + tile - D + rev, mask=prev_ok, other=1.0).to(tl.float32)
                da = G * z_prev + GP * p_prev
                cgp = take_row(GP, rows, BLOCK_T - 1)
            else:
                _, G = tl.associative_scan((coef, g), 0, mul_add)
                da = G * z_prev
            tl.store(da_ptr + tile + rev, da.to(da_ptr.dtype.element_ty), mask=m)
            tl.store(db_ptr + tile + rev, G.to(db_ptr.dtype.element_ty), mask=m)
            cg = take_row(G, rows, BLOCK_T - 1)

    if MODE == constants.SUMMARY:
        tl.store(sc_ptr + s_off, cc, mask=col_ok)
        tl.store(sg_ptr + s_off, cg, mask=col_ok)
        if HAS_DP:
            tl.store(sgp_ptr + s_off, cgp, mask=col_ok)
