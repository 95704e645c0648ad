"""Fused Triton kernels for the states-only recurrence ``h_t = a_t h_{t-1} + b_t`` with an
initial and a final state (op ``linear_recurrence``).

Framework-free (``triton`` only); the launchers are ``mingru._launch.linear_recurrence`` and
``mingru_jax._launch.linear_recurrence``, the launch metadata
:mod:`mingru_kernels.launch.linear_recurrence`.

Forward: ``a, b (B, T, D)`` and ``h_0 (B, D)`` (zeros when ``HAS_H0`` is False) →
``h (B, T, D)`` and ``h_T (B, D)``, in the input dtype (fp32 accumulation). Unlike
``linear_scan`` it writes the states only — one read of ``a, b`` and one write of ``h``, the
bandwidth floor — because ``h_0`` enters the first row's map instead of being applied to a
stored running product afterwards.

Backward: the adjoint ``g_t = dh_t + a_{t+1} g_{t+1}`` with ``g_{T-1} = dh_{T-1} + dh_T``
(the final state is the last row) is a reversed linear scan; then ``db_t = g_t``,
``da_t = g_t h_{t-1}`` (``h_{-1} = h_0``) and ``dh_0 = a_0 g_0``. Saved: ``a``, ``h_0`` and the
output ``h``.

Packed sequences (``PACKED``, ``B = 1``, ``seq_ptr`` the ``(T,)`` int32 sequence index of each
step, ``h_0`` one row per sequence): each sequence's first step is loaded as the map
``h ↦ a h_0[n] + b`` (``restart_rows``), so the same scan restarts at every boundary; the
backward cuts the adjoint there (``a_{t+1} → 0`` at a first step ``t+1``), reads ``h_0[n]`` as
the previous state of a first step and writes ``dh_0[n] = a G`` at it (the launcher zeroes
``dh_0`` for empty sequences). Final states are gathered from ``h`` by the frontend.

Launch sequences (``cfg = plan(B, T, D, **TILES)`` from
:mod:`mingru_kernels.launch.linear_recurrence`):

* walk: ``fwd[grid](..., MODE=WALK)``; ``bwd[grid](..., MODE=WALK)``.
* look-back (single pass, one tile per chunk): ``fwd[grid](..., values, status,
  MODE=LOOKBACK)``; ``bwd[grid](..., values, status, MODE=LOOKBACK)`` — each program scans its
  tile from zero and gets its carry-in from
  :func:`~mingru_kernels._scan_common.lookback_carry` (``status`` zeroed first).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels._scan_common import (
    carried_scan,
    packed_rows,
    program_coords,
    restart_rows,
    take_row,
)

__all__ = ["linear_recurrence_bwd_kernel", "linear_recurrence_fwd_kernel"]


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def linear_recurrence_fwd_kernel(
    a_ptr, b_ptr,  # (B, T, D) inputs, contiguous
    h0_ptr,  # (B, D) initial state, (N, D) one per sequence when PACKED (if HAS_H0)
    seq_ptr,  # (T,) int32 sequence index of each step (if PACKED; then B = 1)
    h_ptr, ht_ptr,  # out: (B, T, D) states, (B, D) final state; input dtype
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values, int32 status words (lookback_carry)
    T, D, chunk_len, n_chunks, n_dblk,
    MODE: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_c, pid_b, pid_d, lane = program_coords(status_ptr, n_chunks, n_dblk, MODE, False)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    intra = rows[:, None] * D + cols[None, :]
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    seq = pid_b.to(tl.int64) * T * D
    state_off = pid_b.to(tl.int64) * D + cols

    cz = tl.zeros([BLOCK_D], tl.float32)
    if HAS_H0:
        cz = tl.load(h0_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t0 = t_start + k * BLOCK_T
        m = ((t0 + rows) < t_end)[:, None] & col_ok[None, :]
        tile = seq + t0.to(tl.int64) * D
        # Padding rows load the identity map (1, 0), so the tile's last row is its total.
        a = tl.load(a_ptr + tile + intra, mask=m, other=1.0).to(tl.float32)
        b = tl.load(b_ptr + tile + intra, mask=m, other=0.0).to(tl.float32)
        if PACKED:
            # Step 0 is a first step too, so the h_0 row loaded above never enters.
            sid, start = packed_rows(seq_ptr, t0 + rows, (t0 + rows) < t_end)
            a, b = restart_rows(a, b, h0_ptr, sid, start, cols, col_ok, D, HAS_H0)
        H, _ = carried_scan(a, b, cz, status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks, cols,
                            col_ok, D, MODE, False, BLOCK_T)
        tl.store(h_ptr + tile + intra, H.to(h_ptr.dtype.element_ty), mask=m)
        cz = take_row(H, rows, BLOCK_T - 1)

    if pid_c == n_chunks - 1:
        tl.store(ht_ptr + state_off, cz.to(ht_ptr.dtype.element_ty), mask=col_ok)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def linear_recurrence_bwd_kernel(
    a_ptr, h_ptr, h0_ptr,  # (B, T, D) input a, the saved states h; h_0 (if HAS_H0)
    seq_ptr,  # (T,) int32 sequence index of each step (if PACKED; then B = 1)
    dh_ptr, dht_ptr,  # (B, T, D) gradient of h, any strides; (B, D) gradient of h_T (if HAS_DHT)
    da_ptr, db_ptr, dh0_ptr,  # out: (B, T, D), (B, T, D), h_0's shape (if HAS_H0); input dtype
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values, int32 status words (lookback_carry)
    T, D, chunk_len, n_chunks, n_dblk, dh_sb, dh_st, dh_sd,
    MODE: tl.constexpr, HAS_H0: tl.constexpr, HAS_DHT: tl.constexpr, PACKED: tl.constexpr,
    BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_c, pid_b, pid_d, lane = program_coords(status_ptr, n_chunks, n_dblk, MODE, True)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    # Row r of a tile is time t_hi - r: the adjoint runs backwards in time.
    rev = cols[None, :] - rows[:, None] * D
    # dh is read through its strides: the gradient of a sum arrives expanded (stride 0).
    dh_rev = cols[None, :] * dh_sd - rows[:, None] * dh_st
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    seq = pid_b.to(tl.int64) * T * D
    state_off = pid_b.to(tl.int64) * D + cols

    cg = tl.zeros([BLOCK_D], tl.float32)
    if HAS_DHT:
        dht = tl.load(dht_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)
    if HAS_H0 and not PACKED:
        h0 = tl.load(h0_ptr + state_off, mask=col_ok, other=0.0).to(tl.float32)

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t_hi = t_end - 1 - k * BLOCK_T
        t = t_hi - rows
        ok = t >= t_start
        m = ok[:, None] & col_ok[None, :]
        tile = seq + t_hi.to(tl.int64) * D
        # Coefficient of step t is a_{t+1} (0 past the end); padding rows are the identity.
        coef = tl.load(a_ptr + tile + D + rev, mask=m & (t + 1 < T)[:, None], other=0.0)
        coef = tl.where(ok[:, None], coef.to(tl.float32), 1.0)
        if PACKED:
            # A sequence's first step takes nothing from the step before: no adjoint flows
            # back across the boundary.
            _, next_start = packed_rows(seq_ptr, t + 1, ok & (t + 1 < T))
            coef = tl.where(next_start[:, None], 0.0, coef)
        g = tl.load(dh_ptr + pid_b.to(tl.int64) * dh_sb + t_hi.to(tl.int64) * dh_st + dh_rev,
                    mask=m, other=0.0).to(tl.float32)
        if HAS_DHT:
            g = tl.where((t == T - 1)[:, None], g + dht[None, :], g)
        G, _ = carried_scan(coef, g, cg, status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks,
                            cols, col_ok, D, MODE, True, BLOCK_T)
        h_prev = tl.load(h_ptr + tile - D + rev, mask=m & (t >= 1)[:, None], other=0.0)
        h_prev = h_prev.to(tl.float32)
        if PACKED:
            sid, start = packed_rows(seq_ptr, t, ok)
            opens = start[:, None]
            h_prev = tl.where(opens, 0.0, h_prev)
            if HAS_H0:
                fm = opens & col_ok[None, :]
                h0_off = sid[:, None] * D + cols[None, :]
                h_prev = tl.where(opens, tl.load(h0_ptr + h0_off, mask=fm, other=0.0)
                                  .to(tl.float32), h_prev)
                # dh_0[n] = a G at sequence n's first step (one step per sequence).
                a_t = tl.load(a_ptr + tile + rev, mask=fm, other=0.0).to(tl.float32)
                tl.store(dh0_ptr + h0_off, (a_t * G).to(dh0_ptr.dtype.element_ty), mask=fm)
        elif HAS_H0:
            h_prev = tl.where((t == 0)[:, None], h0[None, :], h_prev)
        tl.store(da_ptr + tile + rev, (G * h_prev).to(da_ptr.dtype.element_ty), mask=m)
        tl.store(db_ptr + tile + rev, G.to(db_ptr.dtype.element_ty), mask=m)
        cg = take_row(G, rows, BLOCK_T - 1)

    if HAS_H0 and not PACKED:
        if pid_c == 0:
            # After the walk down to t = 0, the carry is g_0: dh_0 = a_0 g_0.
            a0 = tl.load(a_ptr + seq + cols, mask=col_ok, other=0.0).to(tl.float32)
            tl.store(dh0_ptr + state_off, (a0 * cg).to(dh0_ptr.dtype.element_ty), mask=col_ok)
