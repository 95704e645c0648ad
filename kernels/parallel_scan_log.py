"""Fused Triton kernels for the log-space scan (Heinsen 2023) of ``h_t = a_t h_{t-1} + b_t``.

Framework-free (``triton`` only); the PyTorch launcher is ``mingru._launch.parallel_scan_log``.

``a, b > 0``. Inputs: ``log a (B, T, D)`` and ``log_values (B, T+1, D)`` (slot 0 =
``log h_0``, which may be ``-inf``; slots 1..T = ``log b``). Output: ``h (B, T, D)`` in the
input dtype.

Forward: an exact linear-space scan with a running scale, so the tile scans need no special
function per combine (the log-pair combine, a ``logaddexp2`` per combine, would make the
kernel bound by special-function throughput, far from the bandwidth floor). Per tile, with
the carry ``c = log₂ h`` at the tile start:

1. a max-plus scan (:func:`mingru_kernels._scan_common.max_plus`: adds and maxima only) of the
   rows shifted by one, with ``c`` in the first row, gives ``N_t = M_{t-1}``, the log of the
   largest term of ``h_{t-1}``; then ``M_t = max(N_t + log₂ a_t, log₂ b_t)``. ``M_t`` is within
   ``log₂(t+1)`` of ``log₂ h_t``.
2. In the scaled variable ``h̃_t = h_t / 2^{M_t}`` the recurrence is
   ``h̃_t = ã_t h̃_{t-1} + b̃_t`` with ``ã_t = 2^{log₂ a_t + N_t − M_t} ≤ 1`` and
   ``b̃_t = 2^{log₂ b_t − M_t} ≤ 1``, and ``h̃ ≥ 1`` wherever ``h > 0``: a term that
   underflows is below fp32 rounding of the state, so the linear scan (``mul_add``) is exact
   to fp32 rounding however far the products ``a_t ⋯ a_s`` underflow, for log-values anywhere
   in ±80 and ``T ≥ 10⁵`` (no cumulative sum over the sequence is ever formed).
3. ``h_t = h̃_t 2^{M_t}`` is stored; the next carry is ``M + log₂ h̃`` of the last row.

Three ``exp2`` per element and one ``log2`` per column per tile. Base 2 because
``exp2``/``log2`` are single hardware instructions.

Fast path: most tiles need no per-row scale. With one scale per
column, ``S = max(c, max_t log₂ b_t)``, the scaled states obey the same linear recurrence
with ``ã_t = a_t`` and ``b̃_t = 2^{log₂ b_t − S} ≤ 1``; when every ``log₂ b_t`` of the tile is
within 90 octaves of ``S`` and the coefficients grow the states by at most ``2^60``
(:func:`_tile_scale`), every ``h̃_t`` is a normal fp32 number of at least ``2^-90``
(``h_t ≥ b_t``) and no term that flushes to zero is within fp32 rounding of a state, so ONE
linear scan gives the states to fp32 rounding (two ``exp2`` per element, no max-plus scan).
Other tiles (``b = 0``, wider ranges, ``NaN``) take the exact path above; the choice is made
per program and tile, so both are compiled and the branch is uniform.

Backward, in linear space (like ``mingru._eager.parallel_scan_log``): the adjoint
``g_t = dh_t + a_{t+1} g_{t+1}`` is a reversed linear scan with ``a_{t+1} = exp(log a_{t+1})``;
``d log b_t = g_t b_t``, ``d log a_t = g_t a_t h_{t-1}`` and ``d log h_0 = d log a_1``. It reads
the saved OUTPUT ``h`` (no extra forward buffer, so the forward writes only ``h``) and forms
``a_t h_{t-1} = 2^{log₂ a_t + log₂ h_{t-1}}`` so neither factor over/underflows alone. Where
``h_{t-1}`` underflowed to 0 in the output dtype, its term ``g_t a_t h_{t-1}`` is that small too.

Launch sequences (``cfg = plan(B, T, D, **TILES)`` from
:mod:`mingru_kernels.launch.parallel_scan_log`):

* walk: ``parallel_scan_log_fwd_kernel[grid](..., MODE=WALK)``;
  ``parallel_scan_log_bwd_kernel[grid](..., MODE=WALK)``.
* look-back (single pass, one tile per chunk): ``fwd[grid](la, lv, h, values, status,
  MODE=LOOKBACK)``; ``bwd[grid](..., values, status, MODE=LOOKBACK)`` (``status`` zeroed
  first; :func:`~mingru_kernels._scan_common.lookback_carry`, in base-2 logs forward).
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels import _constants as constants
from mingru_kernels._fast_math import fast_exp2, fast_log2
from mingru_kernels._scan_common import (
    carried_scan,
    lookback_carry,
    max_plus,
    mul_add,
    program_coords,
    take_row,
)

__all__ = ["parallel_scan_log_bwd_kernel", "parallel_scan_log_fwd_kernel"]

# The one-scale fast path's bounds FAST_RANGE, FAST_GROWTH and FAST_TOP are in
# mingru_kernels._constants, with their derivation.


@triton.jit
def _tile_scale(A, L, c, m, col_ok, FROM_ZERO: tl.constexpr = False):
    """``(S, fast)``: a per-column scale for a whole tile and whether every column may use it.

    ``S = ⌈max(c, max_t log₂ b_t)⌉`` (an integer, see :func:`_exp2_minus`). With it, ``h̃_t = h_t / 2^S`` obeys
    ``h̃_t = a_t h̃_{t-1} + 2^{log₂ b_t − S}`` with the carry ``2^{c − S} ≤ 1``. Since
    ``h_t ≥ b_t``, the check ``min_t log₂ b_t ≥ S − FAST_RANGE`` bounds every ``h̃_t`` below
    by ``2^-90`` (normal fp32, and far above any term that flushes to zero), and
    ``Σ_t max(log₂ a_t, 0) ≤ FAST_GROWTH`` bounds it above. Tiles that fail (zero inputs
    ``b = 0``, ranges of more than 90 octaves in a tile, ``NaN``) take the exact
    per-row-scaled path; both give the states to fp32 rounding. ``FROM_ZERO`` (a look-back
    tile, scanned from ``h = 0`` and shifted by its carry afterwards through ``Π a``): the
    products must stay normal too, ``Σ_t min(log₂ a_t, 0) ≥ −FAST_RANGE``."""
    S = tl.math.ceil(tl.maximum(c, tl.max(tl.where(m, L, float("-inf")), axis=0)))
    Lmin = tl.min(tl.where(m, L, float("inf")), axis=0)
    grow = tl.sum(tl.where(m, tl.maximum(A, 0.0), 0.0), axis=0)
    ok = ((Lmin >= S - constants.FAST_RANGE) & (grow <= constants.FAST_GROWTH)
          & (S <= constants.FAST_TOP))
    ok = ok & (S > float("-inf"))
    if FROM_ZERO:
        # Padding rows hold log a = 0 (masked loads' other): no where needed.
        ok = ok & (tl.sum(tl.minimum(A, 0.0), axis=0) >= -constants.FAST_RANGE)
    ok = ok | (col_ok == 0)
    return S, tl.min(ok.to(tl.int32), axis=0) == 1


@triton.jit
def _exp2_minus(x, S):
    """``2^{x − S}`` for an integer-valued ``S``, with no rounding in the exponent: ``x − S``
    in fp32 would round at the ulp of ``|x − S|`` (``4e-6`` at 60, a relative error of
    ``3e-6`` in the power), so the power is taken as ``2^{x − ⌊x⌋} · 2^{⌊x⌋ − S}``, both
    exponents exact. ``x = −∞`` gives 0."""
    xi = tl.where(x == float("-inf"), 0.0, tl.math.floor(x))
    return fast_exp2(x - xi) * fast_exp2(xi - S)


@triton.jit
def _log2_last(M, H, rows, BLOCK_T: tl.constexpr):
    """``log₂ h`` of a tile's last row, its states kept as ``h = H 2^M``."""
    return take_row(M, rows, BLOCK_T - 1) + fast_log2(take_row(H, rows, BLOCK_T - 1))


@triton.jit
def _exact_tile(la_ptr, lv_ptr, tile, vtile, intra, A, L, c, rows, t, t_end, col_ok, D):
    """The exact tile scan with one scale per row: ``(Aex, M, H)`` with ``h_t = H_t 2^{M_t}``
    (``Aex``: ``Σ log₂ a`` of the rows above each row)."""
    first = rows[:, None] == 0
    # The same maps one row earlier (L1/L2 hits: the rows were just read); the first row
    # holds the carry instead, so the inclusive max-plus scan of this tile is exclusive
    # in the rows above.
    prev = (rows >= 1)[:, None] & ((t - 1) < t_end)[:, None] & col_ok[None, :]
    Ap = tl.load(la_ptr + tile - D + intra, mask=prev, other=0.0).to(tl.float32) * constants.LOG2E
    Lp = tl.load(lv_ptr + vtile - D + intra, mask=prev, other=float("-inf"))
    Lp = tl.where(first, c[None, :], Lp.to(tl.float32) * constants.LOG2E)
    Aex, N = tl.associative_scan((Ap, Lp), 0, max_plus)
    M = tl.maximum(N + A, L)
    Ms = tl.where(M == float("-inf"), 0.0, M)  # h_t = 0 so far: any finite scale
    a_s = fast_exp2(A + N - Ms)
    b_s = fast_exp2(L - Ms)
    # The carry is 2^{N_0} exactly (N_0 = c): in the scale of row 0 it is 1.
    b_s = tl.where(first, a_s + b_s, b_s)
    _, H = tl.associative_scan((a_s, b_s), 0, mul_add)
    return Aex, M, H


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def parallel_scan_log_fwd_kernel(
    la_ptr,  # (B, T, D) log a
    lv_ptr,  # (B, T+1, D) log h_0 | log b
    h_ptr,  # (B, T, D) out, input dtype
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values (base 2), int32 status words
    T, D, chunk_len, n_chunks, n_dblk,
    MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
):
    pid_c, pid_b, pid_d, lane = program_coords(status_ptr, n_chunks, n_dblk, MODE, False)
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_T)
    intra = rows[:, None] * D + cols[None, :]
    first = rows[:, None] == 0
    t_start = pid_c * chunk_len
    t_end = tl.minimum(T, t_start + chunk_len)
    seq = pid_b.to(tl.int64) * T * D
    vseq = pid_b.to(tl.int64) * (T + 1) * D

    # log₂ h_0: the walk's carry; the state before the first chunk of the look-back, whose
    # tile itself starts from h = 0 (cL = -inf).
    log2_h0 = tl.load(lv_ptr + vseq + cols, mask=col_ok, other=0.0).to(tl.float32) * constants.LOG2E
    if MODE == constants.WALK:
        cL = log2_h0
    else:
        cL = tl.full([BLOCK_D], float("-inf"), tl.float32)

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t0 = t_start + k * BLOCK_T
        t = t0 + rows
        m = (t < t_end)[:, None] & col_ok[None, :]
        tile = seq + t0.to(tl.int64) * D
        vtile = vseq + (t0 + 1).to(tl.int64) * D
        # Padding rows load the identity map (log a, log b) = (0, -inf).
        A = tl.load(la_ptr + tile + intra, mask=m, other=0.0).to(tl.float32) * constants.LOG2E
        L = tl.load(lv_ptr + vtile + intra, mask=m, other=float("-inf")).to(tl.float32)
        L = L * constants.LOG2E
        if MODE == constants.WALK:
            S, fast = _tile_scale(A, L, cL, m, col_ok)
            if fast:
                # One scale per column for the whole tile (see _tile_scale): a single linear
                # scan, no max-plus scan.
                a_s = fast_exp2(A)
                b_s = _exp2_minus(L, S[None, :])
                b_s = tl.where(first, a_s * _exp2_minus(cL, S)[None, :] + b_s, b_s)
                _, H = tl.associative_scan((a_s, b_s), 0, mul_add)
                tl.store(h_ptr + tile + intra,
                         (H * fast_exp2(S)[None, :]).to(h_ptr.dtype.element_ty), mask=m)
                cL = S + fast_log2(take_row(H, rows, BLOCK_T - 1))
            else:
                _, M, H = _exact_tile(la_ptr, lv_ptr, tile, vtile, intra, A, L, cL, rows, t,
                                      t_end, col_ok, D)
                tl.store(h_ptr + tile + intra, (H * fast_exp2(M)).to(h_ptr.dtype.element_ty),
                         mask=m)
                cL = _log2_last(M, H, rows, BLOCK_T)
        else:
            # LOOKBACK: one tile per chunk, scanned from h = 0 (cL = -inf): its map is
            # (Σ log₂ a, log₂ h_last); the carry looked back for enters as
            # 2^{Σ_{≤t} log₂ a + carry}, added to the zero-start states (each term at most
            # h_t: no spurious overflow). h_t = H_t 2^{Ms_t}; P_t = Σ_{≤t} log₂ a.
            S, fast = _tile_scale(A, L, cL, m, col_ok, True)
            if fast:
                a_s = fast_exp2(A)
                Pprod, H = tl.associative_scan((a_s, _exp2_minus(L, S[None, :])), 0, mul_add)
                P = fast_log2(Pprod)  # 2^-90 ≤ Π a ≤ 2^60 (_tile_scale): a normal number
                Ms = tl.broadcast_to(S[None, :], (BLOCK_T, BLOCK_D))
            else:
                Aex, Ms, H = _exact_tile(la_ptr, lv_ptr, tile, vtile, intra, A, L, cL, rows, t,
                                         t_end, col_ok, D)
                P = Aex + A  # Aex: Σ log₂ a of the rows above
            cL = lookback_carry(status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks,
                                tl.sum(A, axis=0), _log2_last(Ms, H, rows, BLOCK_T),
                                log2_h0, cols, col_ok, D, False, True)
            h = fast_exp2(P + cL[None, :]) + H * fast_exp2(Ms)
            tl.store(h_ptr + tile + intra, h.to(h_ptr.dtype.element_ty), mask=m)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks"])
def parallel_scan_log_bwd_kernel(
    la_ptr, lv_ptr,  # inputs: (B, T, D) log a; (B, T+1, D) log h_0 | log b
    h_ptr, dh_ptr,  # (B, T, D) the saved output h and its gradient (dh: any strides)
    dla_ptr, dlv_ptr,  # out: (B, T, D) and (B, T+1, D) gradients, input dtype
    vals_ptr, status_ptr,  # LOOKBACK: fp32 chunk values, int32 status words (lookback_carry)
    T, D, chunk_len, n_chunks, n_dblk, dh_sb, dh_st, dh_sd,
    MODE: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr,
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
    vseq = pid_b.to(tl.int64) * (T + 1) * D

    cg = tl.zeros([BLOCK_D], tl.float32)
    log2_h0 = tl.load(lv_ptr + vseq + cols, mask=col_ok, other=0.0).to(tl.float32) * constants.LOG2E

    for k in tl.range(0, tl.cdiv(t_end - t_start, BLOCK_T), num_stages=LOOP_STAGES):
        t_hi = t_end - 1 - k * BLOCK_T
        t = t_hi - rows
        ok = t >= t_start
        m = ok[:, None] & col_ok[None, :]
        tile = seq + t_hi.to(tl.int64) * D
        vtile = vseq + (t_hi + 1).to(tl.int64) * D  # log b_t sits in slot t + 1
        # Coefficient of step t is a_{t+1} (0 past the end); padding rows are the identity.
        la_next = tl.load(la_ptr + tile + D + rev, mask=m & (t + 1 < T)[:, None],
                          other=float("-inf"))
        coef = tl.where(ok[:, None], fast_exp2(la_next.to(tl.float32) * constants.LOG2E), 1.0)
        g = tl.load(dh_ptr + pid_b.to(tl.int64) * dh_sb + t_hi.to(tl.int64) * dh_st + dh_rev,
                    mask=m, other=0.0).to(tl.float32)
        G, _ = carried_scan(coef, g, cg, status_ptr, vals_ptr, pid_c, lane, pid_b, n_chunks,
                            cols, col_ok, D, MODE, True, BLOCK_T)
        lb = tl.load(lv_ptr + vtile + rev, mask=m, other=float("-inf")).to(tl.float32)
        la = tl.load(la_ptr + tile + rev, mask=m, other=0.0).to(tl.float32)
        h_prev = tl.load(h_ptr + tile - D + rev, mask=m & (t >= 1)[:, None], other=1.0)
        log2_h_prev = tl.where((t == 0)[:, None], log2_h0[None, :],
                               fast_log2(h_prev.to(tl.float32)))
        d_la = G * fast_exp2(la * constants.LOG2E + log2_h_prev)
        d_lb = G * fast_exp2(lb * constants.LOG2E)
        tl.store(dla_ptr + tile + rev, d_la.to(dla_ptr.dtype.element_ty), mask=m)
        tl.store(dlv_ptr + vtile + rev, d_lb.to(dlv_ptr.dtype.element_ty), mask=m)
        if t_hi < BLOCK_T:
            # This tile may hold t = 0 (the mask checks): d log h_0 = d log a_0 goes to slot 0.
            tl.store(dlv_ptr + vseq + cols[None, :] + 0 * rows[:, None],
                     d_la.to(dlv_ptr.dtype.element_ty), mask=m & (t == 0)[:, None])
        cg = take_row(G, rows, BLOCK_T - 1)
