"""Kernel pieces the elementwise scans share: combine functions, tile helpers, the carry pass.

Framework-free: imports ``triton`` only. Used by :mod:`mingru_kernels.linear_scan` and
:mod:`mingru_kernels.parallel_scan_log`.

Scan algebra. Step t of a recurrence ``h_t = a_t h_{t-1} + b_t`` is the map
``h ↦ a_t h + b_t``; ``combine(first, second)`` is "apply ``first``, then ``second``". An
inclusive scan of the maps along time gives, at step t, the map from the start to t: its ``a``
part is the running product, its ``b`` part the zero-start solution. The log-space scan holds
each map as ``(log₂ a, log₂ b)`` so products never underflow.

Tiles are ``[BLOCK_T, BLOCK_D]`` with D innermost (coalesced loads), scanned along axis 0.
Backward (adjoint) scans run in reverse time; the kernels load their tiles with reversed row
indices and scan forward, so ``associative_scan(reverse=True)`` is never needed.

The launch strategies (walk, chunked) and the planner are pure Python in
:mod:`mingru_kernels.launch._elementwise`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels.launch._elementwise import APPLY, SUMMARY, WALK

# The kernel MODE values as constexpr globals, the only globals a kernel body may read.
K_WALK = tl.constexpr(WALK)
K_SUMMARY = tl.constexpr(SUMMARY)
K_APPLY = tl.constexpr(APPLY)

# log₂ e: the log kernels work in base 2 (exp2 and log2 are single hardware ops).
LOG2E = tl.constexpr(1.4426950408889634)

# ----------------------------------------------------------------------------- combines


@triton.jit
def mul_add(a1, b1, a2, b2):
    """Compose ``h ↦ a1 h + b1`` then ``h ↦ a2 h + b2``."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def mul_add2(a1, x1, y1, a2, x2, y2):
    """:func:`mul_add` for two states sharing one coefficient."""
    return a1 * a2, a2 * x1 + x2, a2 * y1 + y2


@triton.jit
def logaddexp2(x, y):
    """``log₂(2^x + 2^y)``, with ``(-inf, -inf) → -inf`` (``h_0 = 0`` is a normal input)."""
    hi = tl.maximum(x, y)
    lo = tl.minimum(x, y)
    # Shifting by -inf would give -inf - (-inf) = NaN; shifting by 0 keeps 2^lo = 0.
    hi_safe = tl.where(hi == float("-inf"), 0.0, hi)
    return hi + tl.log2(1.0 + tl.exp2(lo - hi_safe))


@triton.jit
def max_plus(A1, M1, A2, M2):
    """:func:`log_pair` in the max-plus (tropical) semiring: ``(A1 + A2, max(A2 + M1, M2))``.

    Scanned over ``(log₂ a, log₂ b)`` it gives the log of the LARGEST term of the zero-start
    solution, within ``log₂(t + 1)`` of ``log₂ h_t`` — a scale for exact linear-space scans,
    found with adds and compares only (no special functions)."""
    return A1 + A2, tl.maximum(A2 + M1, M2)


@triton.jit
def log_pair(A1, L1, A2, L2):
    """:func:`mul_add` on ``(log₂ a, log₂ b)`` pairs of positive maps."""
    return A1 + A2, logaddexp2(A2 + L1, L2)


@triton.jit
def take_row(x, rows, r):
    """Row ``r`` of a ``[BLOCK_T, BLOCK_D]`` tile as a ``[BLOCK_D]`` vector (exact: adds zeros)."""
    return tl.sum(tl.where(rows[:, None] == r, x, 0.0), axis=0)


# ----------------------------------------------------------------------------- carry pass


@triton.jit
def packed_rows(seq_ptr, t, valid):
    """Packed sequences: the sequence index (int32) of each step ``t`` of a tile and whether
    it is its sequence's first step, from the per-step index ``seq_ptr (T,)`` (rows outside
    ``valid`` are never first)."""
    sid = tl.load(seq_ptr + t, mask=valid, other=0)
    prev = tl.load(seq_ptr + t - 1, mask=valid & (t >= 1), other=-1)
    return sid, valid & (sid != prev)


@triton.jit
def restart_rows(a, b, h0_ptr, sid, start, cols, col_ok, D, HAS_H0: tl.constexpr):
    """Restart each sequence at its first step: the map ``h ↦ a h_0[sid] + b`` (transition 0,
    input ``b + a h_0[sid]``; ``h_0 = 0`` without ``HAS_H0``), so one scan over the packed row
    solves every sequence."""
    opens = start[:, None]
    if HAS_H0:
        h0 = tl.load(h0_ptr + sid[:, None] * D + cols[None, :], mask=opens & col_ok[None, :],
                     other=0.0).to(tl.float32)
        b = tl.where(opens, a * h0 + b, b)
    return tl.where(opens, 0.0, a), b


@triton.jit(do_not_specialize=["n_chunks"])
def linear_carry_kernel(
    sa_ptr, sx_ptr, sy_ptr,  # (B, N, D) fp32 chunk maps: coefficient, state(s)
    ca_ptr, cx_ptr, cy_ptr,  # (B, N, D) fp32 out: the carry-in of each chunk
    n_chunks, D, n_dblk,
    REVERSE: tl.constexpr,  # chunks compose from the last to the first (adjoint scans)
    STORE_A: tl.constexpr,  # also write the coefficient carry (the forward product P)
    HAS_Y: tl.constexpr,  # a second state shares the coefficient
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Phase 2 of the chunked linear scans: exclusive scan of the chunk maps.

    Chunk c's carry-in is the composition of all chunks before it in scan order (identity for
    the first). One program per (batch, D-block) walks the chunk axis in tiles of
    ``BLOCK_N``.
    """
    pid = tl.program_id(0)
    pid_d = pid % n_dblk
    pid_b = pid // n_dblk
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_N)
    base = pid_b.to(tl.int64) * n_chunks * D

    # The first chunk in scan order starts from the identity map.
    if REVERSE:
        first = n_chunks - 1
    else:
        first = 0
    ones = tl.full([BLOCK_D], 1.0, tl.float32)
    zeros = tl.zeros([BLOCK_D], tl.float32)
    tl.store(cx_ptr + base + first * D + cols, zeros, mask=col_ok)
    if HAS_Y:
        tl.store(cy_ptr + base + first * D + cols, zeros, mask=col_ok)
    if STORE_A:
        tl.store(ca_ptr + base + first * D + cols, ones, mask=col_ok)

    ca = ones
    cx = zeros
    cy = zeros
    for k in range(0, tl.cdiv(n_chunks, BLOCK_N)):
        if REVERSE:
            c = n_chunks - 1 - k * BLOCK_N - rows
            dst = c - 1
        else:
            c = k * BLOCK_N + rows
            dst = c + 1
        ok = (c >= 0) & (c < n_chunks)
        m = ok[:, None] & col_ok[None, :]
        off = base + c[:, None] * D + cols[None, :]
        a = tl.load(sa_ptr + off, mask=m, other=1.0)
        x = tl.load(sx_ptr + off, mask=m, other=0.0)
        first_row = rows[:, None] == 0
        x = tl.where(first_row, a * cx[None, :] + x, x)
        if HAS_Y:
            y = tl.load(sy_ptr + off, mask=m, other=0.0)
            y = tl.where(first_row, a * cy[None, :] + y, y)
        if STORE_A:
            a = tl.where(first_row, a * ca[None, :], a)
        if HAS_Y:
            a, x, y = tl.associative_scan((a, x, y), 0, mul_add2)
        else:
            a, x = tl.associative_scan((a, x), 0, mul_add)
        # The inclusive result at chunk c is the carry-in of the next chunk in scan order.
        dst_m = (ok & (dst >= 0) & (dst < n_chunks))[:, None] & col_ok[None, :]
        dst_off = base + dst[:, None] * D + cols[None, :]
        tl.store(cx_ptr + dst_off, x, mask=dst_m)
        if HAS_Y:
            tl.store(cy_ptr + dst_off, y, mask=dst_m)
            cy = take_row(y, rows, BLOCK_N - 1)
        if STORE_A:
            tl.store(ca_ptr + dst_off, a, mask=dst_m)
            ca = take_row(a, rows, BLOCK_N - 1)
        cx = take_row(x, rows, BLOCK_N - 1)
