"""Fused Triton kernels for the minGRU cells (op ``mingru_cell``): the gates, the recurrence and
their gradients in one pass, from the projection outputs (the pre-activations).

Framework-free (``triton`` only); the launchers are ``mingru._launch.mingru_cell`` and
``mingru_jax._launch.mingru_cell``, the launch metadata :mod:`mingru_kernels.launch.mingru_cell`.

Input: one pre-activation tensor ``k (B, T, n·D)`` — the output of ONE input projection, its
gates side by side along the last axis — an optional log-decay ``log γ`` (``(B, T, D)``, or
``(B, T, 1)`` read with a zero column stride) and an optional ``h_0 (B, D)``. The cells
(``SIGNED`` constexpr):

* MinGRU (``n = 2``, ``k = [k_z | k_h]``): ``z = σ(k_z)``, ``a = γ (1 − z) = γ σ(−k_z)``,
  ``b = z g(k_h)`` with ``g(x) = x + ½`` (x ≥ 0), ``σ(x)`` (x < 0). All terms are positive,
  so the linear-space recurrence has no cancellation and needs no log space: the products of
  ``a`` that underflow inside a tile scan are below fp32 rounding of the states they multiply.
* SignedMinGRU (``n = 3``, ``k = [k_z | k_s | k_h]``): ``a = γ tanh(k_s)`` (times ``1 − z``
  when ``COUPLED``), ``b = σ(k_z) k_h``.

Forward: ``h_t = a_t h_{t-1} + b_t`` → ``h (B, T, D)`` and ``h_T (B, D)`` in the input dtype
(fp32 gates and accumulation). It reads ``k`` (and ``log γ``) once and writes ``h`` once; no
gate is ever stored.

Backward: the adjoint ``G_t = dh_t + a_{t+1} G_{t+1}`` (``G_{T-1}`` gets ``dh_T`` too) is a
reversed linear scan whose coefficients are recomputed from ``k`` one row later; then, with
``h_{t-1}`` from the saved states (``h_{-1} = h_0``), ``da = G h_{t-1}`` and ``db = G`` give
``dk`` through the gate derivatives, ``d log γ = a·da`` and ``dh_0 = a_0 G_0``. Saved for it:
``k``, ``log γ``, ``h_0`` and the output ``h`` only.

Packed sequences (``PACKED``): as in :mod:`mingru_kernels.linear_recurrence` — each
sequence's first step is the map ``h ↦ a h_0[n] + b``, the adjoint is cut at every boundary,
and ``dh_0[n] = a G`` is written at each first step.

Launch sequences: those of :mod:`mingru_kernels.linear_recurrence` (the walk, or the
single-pass look-back), with the same planner.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels._fast_math import fast_exp, fast_rcp
from mingru_kernels._scan_common import (
    carried_scan,
    packed_rows,
    program_coords,
    restart_rows,
    take_row,
)

__all__ = ["mingru_cell_bwd_kernel", "mingru_cell_fwd_kernel"]


@triton.jit
def _sigmoid_pair(x):
    """``(σ(x), σ(−x))`` from one exponential and one division (the gate math is most of the
    cell's instructions): ``e = e^{−|x|} ∈ (0, 1]`` never overflows."""
    e = fast_exp(-tl.abs(x))
    r = fast_rcp(1.0 + e)
    er = e * r
    pos = x >= 0
    return tl.where(pos, r, er), tl.where(pos, er, r)


@triton.jit
def _g_and_slope(x):
    """``g(x)`` and ``g'(x)``: ``x + ½`` and 1 for ``x ≥ 0``, ``σ(x)`` and ``σ(x)(1 − σ(x))``
    below (one exponential of ``min(x, 0) ≤ 0``)."""
    e = fast_exp(tl.minimum(x, 0.0))
    sg = e * fast_rcp(1.0 + e)
    pos = x >= 0
    return tl.where(pos, x + 0.5, sg), tl.where(pos, 1.0, sg * (1.0 - sg))


@triton.jit
def _tanh(x):
    # Through e^{-2|x|} ∈ (0, 1]: no overflow for any x.
    e = fast_exp(-2.0 * tl.abs(x))
    t = (1.0 - e) * fast_rcp(1.0 + e)
    return tl.where(x < 0, -t, t)


@triton.jit
def _load_k(kt_ptr, lgt_ptr, k_off, lg_off, m, D,
            SIGNED: tl.constexpr, HAS_DECAY: tl.constexpr):
    """The pre-activations of one tile as fp32: ``(k_z, k_s, k_h, log γ)`` (``k_s`` and
    ``log γ`` are zeros when the cell has none). ``kt_ptr``/``lgt_ptr`` point at the tile's
    first row and the offsets are int32 tiles: the 64-bit row offset stays a scalar, so the
    compiler still sees contiguous columns and vectorises the loads."""
    kz = tl.load(kt_ptr + k_off, mask=m, other=0.0).to(tl.float32)
    if SIGNED:
        ks = tl.load(kt_ptr + D + k_off, mask=m, other=0.0).to(tl.float32)
        kh = tl.load(kt_ptr + 2 * D + k_off, mask=m, other=0.0).to(tl.float32)
    else:
        ks = kz * 0.0
        kh = tl.load(kt_ptr + D + k_off, mask=m, other=0.0).to(tl.float32)
    if HAS_DECAY:
        lg = tl.load(lgt_ptr + lg_off, mask=m, other=0.0).to(tl.float32)
    else:
        lg = kz * 0.0
    return kz, ks, kh, lg


@triton.jit
def _gates(kz, ks, kh, lg, SIGNED: tl.constexpr, COUPLED: tl.constexpr,
           HAS_DECAY: tl.constexpr):
    """Transition ``a`` and input ``b`` of the cell."""
    z, one_minus_z = _sigmoid_pair(kz)  # 1 − z without the cancellation
    if SIGNED:
        a = _tanh(ks)
        if COUPLED:
            a = a * one_minus_z
        b = z * kh
    else:
        a = one_minus_z
        gk, _ = _g_and_slope(kh)
        b = z * gk
    if HAS_DECAY:
        a = a * fast_exp(lg)
    return a, b


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def mingru_cell_fwd_kernel(
    k_ptr,  # (B, T, n·D) pre-activations, contiguous
    lg_ptr,  # log γ, read at b·T·lg_row + t·lg_row + col·lg_col (if HAS_DECAY)
    h0_ptr,  # (B, D) initial state, (N, D) one per sequence when PACKED (if HAS_H0)
    seq_ptr,  # (T,) int32 sequence index of each step (if PACKED; then B = 1)
    h_ptr, ht_ptr,  # out: (B, T, D) states, (B, D) final state; input dtype
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values, int32 status words (lookback_carry)
    T, D, chunk_len, n_chunks, n_dblk, lg_row, lg_col,
    MODE: tl.constexpr, HAS_H0: tl.constexpr, SIGNED: tl.constexpr, COUPLED: tl.constexpr,
    HAS_DECAY: tl.constexpr, PACKED: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_c, pid_b, pid_d, lane = program_coords(status_ptr, n_chunks, n_dblk, MODE, False)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    if SIGNED:
        S = 3 * D
    else:
        S = 2 * D
    k_intra = rows[:, None] * S + cols[None, :]
    h_intra = rows[:, None] * D + cols[None, :]
    lg_intra = rows[:, None] * lg_row + cols[None, :] * lg_col
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    b64 = pid_b.to(tl.int64)
    state_off = b64 * D + cols

    cz = tl.zeros([BLOCK_D], tl.float32)
    if HAS_H0:
        cz = tl.load(h0_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)

    for it in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t0 = (t_start + it * BLOCK_T).to(tl.int64)
        m = ((t0 + rows) < t_end)[:, None] & col_ok[None, :]
        row0 = b64 * T + t0
        kz, ks, kh, lg = _load_k(k_ptr + row0 * S, lg_ptr + row0 * lg_row, k_intra, lg_intra,
                                 m, D, SIGNED, HAS_DECAY)
        a, b = _gates(kz, ks, kh, lg, SIGNED, COUPLED, HAS_DECAY)
        if PACKED:
            # Step 0 is a first step too, so the h_0 row loaded above never enters.
            sid, start = packed_rows(seq_ptr, t0 + rows, (t0 + rows) < t_end)
            a, b = restart_rows(a, b, h0_ptr, sid, start, cols, col_ok, D, HAS_H0)
        # Padding rows are the identity map (1, 0), so the tile's last row is its total.
        a = tl.where(m, a, 1.0)
        b = tl.where(m, b, 0.0)
        H, _ = carried_scan(a, b, cz, status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks, cols,
                            col_ok, D, MODE, False, BLOCK_T)
        tl.store(h_ptr + row0 * D + h_intra, H.to(h_ptr.dtype.element_ty), mask=m)
        cz = take_row(H, rows, BLOCK_T - 1)

    if pid_c == n_chunks - 1:
        tl.store(ht_ptr + state_off, cz.to(ht_ptr.dtype.element_ty), mask=col_ok)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def mingru_cell_bwd_kernel(
    k_ptr, lg_ptr, h0_ptr, h_ptr,  # the saved inputs and states (as in the forward)
    seq_ptr,  # (T,) int32 sequence index of each step (if PACKED; then B = 1)
    dh_ptr, dht_ptr,  # (B, T, D) gradient of h, any strides; (B, D) gradient of h_T (if HAS_DHT)
    dk_ptr, dlg_ptr, dh0_ptr,  # out: (B, T, n·D); (B, T, D) (if HAS_DECAY); h_0's (if HAS_H0)
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values, int32 status words (lookback_carry)
    T, D, chunk_len, n_chunks, n_dblk, lg_row, lg_col, dh_sb, dh_st, dh_sd,
    MODE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, SIGNED: tl.constexpr,
    COUPLED: tl.constexpr, HAS_DECAY: tl.constexpr, PACKED: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_c, pid_b, pid_d, lane = program_coords(status_ptr, n_chunks, n_dblk, MODE, True)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    if SIGNED:
        S = 3 * D
    else:
        S = 2 * D
    # Row r of a tile is time t_hi - r: the adjoint runs backwards in time.
    k_rev = cols[None, :] - rows[:, None] * S
    h_rev = cols[None, :] - rows[:, None] * D
    lg_rev = cols[None, :] * lg_col - rows[:, None] * lg_row
    # dh is read through its strides: the gradient of a sum arrives expanded (stride 0).
    dh_rev = cols[None, :] * dh_sd - rows[:, None] * dh_st
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    b64 = pid_b.to(tl.int64)
    state_off = b64 * D + cols

    cg = tl.zeros([BLOCK_D], tl.float32)
    if HAS_DHT:
        dht = tl.load(dht_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)
    if HAS_H0 and not PACKED:
        h0 = tl.load(h0_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)

    for it in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t_hi = (t_end - 1 - it * BLOCK_T).to(tl.int64)
        t = t_hi - rows
        ok = t >= t_start
        m = ok[:, None] & col_ok[None, :]
        row_hi = b64 * T + t_hi
        # The coefficient of step t is a_{t+1}: the gates one row later (0 past the end);
        # padding rows are the identity.
        nxt = m & (t + 1 < T)[:, None]
        nz, ns, nh, nl = _load_k(k_ptr + (row_hi + 1) * S, lg_ptr + (row_hi + 1) * lg_row,
                                 k_rev, lg_rev, nxt, D, SIGNED, HAS_DECAY)
        coef, _ = _gates(nz, ns, nh, nl, SIGNED, COUPLED, HAS_DECAY)
        coef = tl.where(nxt, coef, 0.0)
        coef = tl.where(ok[:, None], coef, 1.0)
        if PACKED:
            # A sequence's first step takes nothing from the step before: no adjoint flows
            # back across the boundary.
            _, next_start = packed_rows(seq_ptr, t + 1, ok & (t + 1 < T))
            coef = tl.where(next_start[:, None], 0.0, coef)
        G = tl.load(dh_ptr + b64 * dh_sb + t_hi * dh_st + dh_rev, mask=m, other=0.0)
        G = G.to(tl.float32)
        if HAS_DHT:
            G = tl.where((t == T - 1)[:, None], G + dht[None, :], G)
        G, _ = carried_scan(coef, G, cg, status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks,
                            cols, col_ok, D, MODE, True, BLOCK_T)
        cg = take_row(G, rows, BLOCK_T - 1)
        h_prev = tl.load(h_ptr + (row_hi - 1) * D + h_rev, mask=m & (t >= 1)[:, None],
                         other=0.0).to(tl.float32)
        if PACKED:
            sid, start = packed_rows(seq_ptr, t, ok)
            opens = start[:, None]
            h0_off = sid[:, None] * D + cols[None, :]
            h_prev = tl.where(opens, 0.0, h_prev)
            if HAS_H0:
                h_prev = tl.where(opens, tl.load(h0_ptr + h0_off, mask=opens & m, other=0.0)
                                  .to(tl.float32), h_prev)
        elif HAS_H0:
            h_prev = tl.where((t == 0)[:, None], h0[None, :], h_prev)
        kz, ks, kh, lg = _load_k(k_ptr + row_hi * S, lg_ptr + row_hi * lg_row, k_rev,
                                 lg_rev, m, D, SIGNED, HAS_DECAY)
        z, one_minus_z = _sigmoid_pair(kz)
        zz = z * one_minus_z  # σ'(k_z) = z (1 − z)
        if HAS_DECAY:
            gamma = fast_exp(lg)
        else:
            gamma = 1.0
        da = G * h_prev
        dkz_ptr = dk_ptr + row_hi * S + k_rev
        if SIGNED:
            s = _tanh(ks)
            c = 1.0
            if COUPLED:
                c = one_minus_z
            a = gamma * s * c
            dkz = G * kh
            if COUPLED:
                dkz -= da * gamma * s
            tl.store(dkz_ptr, (zz * dkz).to(dk_ptr.dtype.element_ty), mask=m)
            tl.store(dkz_ptr + D, (da * gamma * c * (1.0 - s * s)).to(dk_ptr.dtype.element_ty),
                     mask=m)
            tl.store(dkz_ptr + 2 * D, (G * z).to(dk_ptr.dtype.element_ty), mask=m)
        else:
            a = gamma * one_minus_z
            gk, dg = _g_and_slope(kh)
            tl.store(dkz_ptr, (zz * (G * gk - da * gamma)).to(dk_ptr.dtype.element_ty), mask=m)
            tl.store(dkz_ptr + D, (G * z * dg).to(dk_ptr.dtype.element_ty), mask=m)
        if HAS_DECAY:
            tl.store(dlg_ptr + row_hi * D + h_rev, (a * da).to(dlg_ptr.dtype.element_ty), mask=m)
        if PACKED and HAS_H0:
            # dh_0[n] = a G at sequence n's first step (one step per sequence).
            tl.store(dh0_ptr + h0_off, (a * G).to(dh0_ptr.dtype.element_ty),
                     mask=opens & m)

    if HAS_H0 and not PACKED:
        if pid_c == 0:
            # After the walk down to t = 0 the carry is G_0: dh_0 = a_0 G_0.
            z0, s0, h0k, l0 = _load_k(k_ptr + b64 * T * S, lg_ptr + b64 * T * lg_row, cols,
                                      cols * lg_col, col_ok, D, SIGNED, HAS_DECAY)
            a0, _ = _gates(z0, s0, h0k, l0, SIGNED, COUPLED, HAS_DECAY)
            tl.store(dh0_ptr + state_off, (a0 * cg).to(dh0_ptr.dtype.element_ty), mask=col_ok)
