"""Chunk algebra of the delta-rule kernels (:mod:`mingru_kernels.delta_rule`), inlined into
them: the chunk's row indices, padded tile loads, the gates and decay tables, the Gram
products and the WY triangular inverse ``(I + A)⁻¹``. Notation and numerics as in that
module's docstring.

This module imports only ``triton``.
"""

import triton
import triton.language as tl

# Sums are spelled ``tl.reduce(x, axis, _sum_combine)`` / ``tl.associative_scan(...)``: the
# same code as ``tl.sum`` / ``tl.cumsum`` on GPU, but Triton's interpreter re-patches the
# language on every call of those jit wrappers (milliseconds each), which made the CPU tests
# several times slower; with the combine function passed directly it runs numpy's sum.
from triton.language.standard import _sum_combine


@triton.jit
def _chunk_index(c, T, NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr):
    """Micro-step rows ``il`` (token ``tok``, sub-step ``sub``, global token ``t_l``) and
    token rows ``ir`` (global token ``t_r``) of chunk ``c`` with their validity masks."""
    il = tl.arange(0, LP)
    tok = il // NH
    sub = il % NH
    t_l = c * C + tok
    ok_l = (tok < C) & (t_l < T)
    ir = tl.arange(0, CP)
    t_r = c * C + ir
    ok_r = (ir < C) & (t_r < T)
    return il, tok, sub, t_l, ok_l, ir, t_r, ok_r


@triton.jit
def _chunk_rows(c, b64, h, T, H, NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr,
                CP: tl.constexpr):
    """:func:`_chunk_index` of chunk ``c`` of batch row ``b64`` (int64) and head ``h``, plus
    the memory rows: ``micro`` of ``(B, T, nh, H)``, ``token`` and ``lg_rows`` (each micro-step's
    token) of ``(B, T, H)``."""
    il, tok, sub, t_l, ok_l, ir, t_r, ok_r = _chunk_index(c, T, NH, C, LP, CP)
    micro = ((b64 * T + t_l) * NH + sub) * H + h
    token = (b64 * T + t_r) * H + h
    lg_rows = (b64 * T + t_l) * H + h
    return il, tok, sub, ok_l, ir, ok_r, micro, token, lg_rows


@triton.jit
def _ld(ptr, rows, row_ok, col0, ncols, W: tl.constexpr):
    """Float32 tile ``[rows, col0 : col0+W]`` of a row-major array with ``ncols`` columns;
    rows outside ``row_ok`` and columns ``>= ncols`` read 0."""
    cols = col0 + tl.arange(0, W)
    return tl.load(ptr + rows[:, None] * ncols + cols[None, :],
                   mask=row_ok[:, None] & (cols[None, :] < ncols), other=0.0).to(tl.float32)


@triton.jit
def _lds(ptr, base, r0, R: tl.constexpr, ld: tl.constexpr, c0, W: tl.constexpr,
         CG: tl.constexpr = False):
    """Float32 tile ``[r0 : r0+R, c0 : c0+W]`` of a padded scratch matrix at ``base``.
    ``CG``: read through L2 only (``.cg``), for scratch another program of the same launch
    has just written (an SM's L1 is not kept coherent with the other SMs' stores)."""
    r = r0 + tl.arange(0, R)
    cc = c0 + tl.arange(0, W)
    if CG:
        x = tl.load(ptr + base + r[:, None] * ld + cc[None, :], cache_modifier=".cg")
    else:
        x = tl.load(ptr + base + r[:, None] * ld + cc[None, :])
    return x.to(tl.float32)


@triton.jit
def _load_log_gamma(lg_ptr, lg_rows, ok_l, sub, token, ok_r, LP: tl.constexpr,
                    CP: tl.constexpr, HAS_DECAY: tl.constexpr):
    """Per-micro-step ``log γ`` (``LP``; zero except on a token's first micro-step) and
    per-token ``log γ`` (``CP``), float32; zeros without decay."""
    if HAS_DECAY:
        lgm = tl.load(lg_ptr + lg_rows, mask=ok_l & (sub == 0), other=0.0).to(tl.float32)
        lgt = tl.load(lg_ptr + token, mask=ok_r, other=0.0).to(tl.float32)
        # -inf (and anything below) is an exact reset either way; the floor keeps sums finite.
        lgm = tl.maximum(lgm, -1.0e30)
        lgt = tl.maximum(lgt, -1.0e30)
    else:
        lgm = tl.zeros([LP], dtype=tl.float32)
        lgt = tl.zeros([CP], dtype=tl.float32)
    return lgm, lgt


@triton.jit
def _load_gates(beta_ptr, lg_ptr, micro, ok_l, sub, lg_rows, token, ok_r,
                LP: tl.constexpr, CP: tl.constexpr, HAS_DECAY: tl.constexpr):
    """``β (LP)`` and the two ``log γ`` vectors of :func:`_load_log_gamma`, float32."""
    beta = tl.load(beta_ptr + micro, mask=ok_l, other=0.0).to(tl.float32)
    lgm, lgt = _load_log_gamma(lg_ptr, lg_rows, ok_l, sub, token, ok_r, LP, CP, HAS_DECAY)
    return beta, lgm, lgt


@triton.jit
def _decay_tables(lgm, lgt, il, tok, ir, LP: tl.constexpr, CP: tl.constexpr,
                  HAS_DECAY: tl.constexpr):
    """``D (LP,LP)``, ``Γ (LP)``, ``d = D[L-1] (LP)``, ``Γ_L``, ``Do (CP,LP)``, ``Γo (CP)``.

    Every factor is ``exp`` of a segment sum of non-positive terms (masked cumulative sum):
    no cancellation and no ``inf − inf`` even when one ``log γ`` is ``−1e30``."""
    causal = il[:, None] >= il[None, :]
    seen = ir[:, None] >= tok[None, :]  # micro-step j is at or before token row r's output
    if HAS_DECAY:
        seg = tl.associative_scan(tl.where(il[:, None] > il[None, :], lgm[:, None], 0.0), 0,
                                  _sum_combine)
        D = tl.where(causal, tl.exp(seg), 0.0)
        gam = tl.exp(tl.associative_scan(lgm, 0, _sum_combine))
        seg_o = tl.associative_scan(tl.where(ir[:, None] > tok[None, :], lgt[:, None], 0.0), 0,
                                    _sum_combine)
        Do = tl.where(seen, tl.exp(seg_o), 0.0)
        gam_o = tl.exp(tl.associative_scan(lgt, 0, _sum_combine))
    else:
        D = tl.where(causal, 1.0, 0.0)
        gam = tl.full([LP], 1.0, tl.float32)
        Do = tl.where(seen, 1.0, 0.0)
        gam_o = tl.full([CP], 1.0, tl.float32)
    d = tl.reduce(tl.where(il[:, None] == LP - 1, D, 0.0), 0, _sum_combine)
    gam_last = tl.reduce(tl.where(il == LP - 1, gam, 0.0), 0, _sum_combine)
    return D, gam, d, gam_last, Do, gam_o


@triton.jit
def _state_step_tables(c, b64, h, lg_ptr, T, H, NH: tl.constexpr, C: tl.constexpr,
                       LP: tl.constexpr, CP: tl.constexpr, HAS_DECAY: tl.constexpr):
    """What a serial state kernel needs of chunk ``c`` besides its tiles: the micro-step
    rows ``il`` and their mask, the token rows' mask, the memory rows ``micro`` / ``token``,
    and the decay factors ``Γ, d, Γ_L, Do, Γo`` of :func:`_decay_tables`.

    Built without ``D (LP, LP)``: ``d_j = D[L-1, j] = exp(Σ_{i>j} log γ_i)`` is a reverse
    cumulative sum of the next micro-step's ``log γ`` (loaded one row on), so the forward
    state kernel's serial chain runs no 2-D scan (each one a round of shared-memory barriers
    per chunk); same segment sums of non-positive terms, same exact resets."""
    il, tok, sub, ok_l, ir, ok_r, micro, token, lg_rows = _chunk_rows(
        c, b64, h, T, H, NH, C, LP, CP)
    lgm, lgt = _load_log_gamma(lg_ptr, lg_rows, ok_l, sub, token, ok_r, LP, CP, HAS_DECAY)
    seen = ir[:, None] >= tok[None, :]  # micro-step j is at or before token row r's output
    if HAS_DECAY:
        nxt = il + 1
        t_n = c * C + nxt // NH
        lg_next = tl.load(lg_ptr + (b64 * T + t_n) * H + h,
                          mask=(nxt % NH == 0) & (nxt // NH < C) & (t_n < T), other=0.0)
        lg_next = tl.maximum(lg_next.to(tl.float32), -1.0e30)
        d = tl.exp(tl.associative_scan(lg_next, 0, _sum_combine, reverse=True))
        gam = tl.exp(tl.associative_scan(lgm, 0, _sum_combine))
        gam_last = tl.exp(tl.reduce(lgm, 0, _sum_combine))
        seg_o = tl.associative_scan(tl.where(ir[:, None] > tok[None, :], lgt[:, None], 0.0), 0,
                                    _sum_combine)
        Do = tl.where(seen, tl.exp(seg_o), 0.0)
        gam_o = tl.exp(tl.associative_scan(lgt, 0, _sum_combine))
    else:
        d = tl.full([LP], 1.0, tl.float32)
        gam = tl.full([LP], 1.0, tl.float32)
        gam_last = 1.0
        Do = tl.where(seen, 1.0, 0.0)
        gam_o = tl.full([CP], 1.0, tl.float32)
    return il, ok_l, ok_r, micro, token, gam, d, gam_last, Do, gam_o


@triton.jit
def _tm_tile(tm_ptr, chunk, il, LP: tl.constexpr):
    """Pointers of chunk ``chunk``'s WY inverse ``T (LP, LP)`` in the scratch ``tm`` (float32,
    or the inputs' 16-bit dtype with ``TM_HALF``)."""
    return tm_ptr + chunk * (LP * LP) + il[:, None] * LP + il[None, :]


@triton.jit
def _mm(a, b, acc, PREC: tl.constexpr, HALF_OPS: tl.constexpr, like_ptr):
    """``a b (+ acc)`` in float32. With ``HALF_OPS`` both operands are rounded to the 16-bit
    dtype of ``like_ptr``'s elements first, as fla does (the tensor cores at twice the TF32
    rate, half the registers per operand); otherwise ``tl.dot`` at ``PREC``."""
    if HALF_OPS:
        dt = like_ptr.dtype.element_ty
        out = tl.dot(a.to(dt), b.to(dt), acc=acc)
    else:
        out = tl.dot(a, b, acc=acc, input_precision=PREC)
    return out


@triton.jit
def _wy_keys(Tm, beta, gam, K, PREC: tl.constexpr, HALF_OPS: tl.constexpr = False,
             like_ptr=None):
    """``Wk = T diag(βΓ) K (LP, BK)``: the keys' side of the chunk's WY form."""
    return _mm(Tm, (beta * gam)[:, None] * K, None, PREC, HALF_OPS, like_ptr)


@triton.jit
def _dot_t(a_ptr, a_rows, a_ok, b_ptr, b_rows, b_ok, DK, RA: tl.constexpr, RB: tl.constexpr,
           BK: tl.constexpr, KS: tl.constexpr, PREC: tl.constexpr):
    """``A Bᵀ (RA, RB)`` of two row sets of ``(·, d_k)`` inputs, contracted over ``d_k`` in
    slices of ``KS`` columns loaded from memory (small operands keep float32 FMA dots out of
    spills). With tensor-core precision and 16-bit inputs the operands stay in their own
    dtype: the products of two stored bf16/fp16 values are exact either way, and 16-bit
    operands run the tensor cores at twice the TF32 rate with half the registers."""
    acc = tl.zeros([RA, RB], dtype=tl.float32)
    raw: tl.constexpr = (PREC != "ieee") and (a_ptr.dtype.element_ty == b_ptr.dtype.element_ty) \
        and (a_ptr.dtype.element_ty != tl.float32)
    for j in tl.static_range(BK // KS):
        cols = j * KS + tl.arange(0, KS)
        a = tl.load(a_ptr + a_rows[:, None] * DK + cols[None, :],
                    mask=a_ok[:, None] & (cols[None, :] < DK), other=0.0)
        b = tl.load(b_ptr + b_rows[:, None] * DK + cols[None, :],
                    mask=b_ok[:, None] & (cols[None, :] < DK), other=0.0)
        if not raw:
            a = a.to(tl.float32)
            b = b.to(tl.float32)
        acc = tl.dot(a, tl.trans(b), acc=acc, input_precision=PREC)
    return acc


@triton.jit
def _gram(k_ptr, q_ptr, micro, ok_l, token, ok_r, DK, LP: tl.constexpr, CP: tl.constexpr,
          BK: tl.constexpr, KS: tl.constexpr, PREC: tl.constexpr):
    """``K Kᵀ (LP,LP)`` and ``Q Kᵀ (CP,LP)`` (see :func:`_dot_t`)."""
    KK = _dot_t(k_ptr, micro, ok_l, k_ptr, micro, ok_l, DK, LP, LP, BK, KS, PREC)
    QK = _dot_t(q_ptr, token, ok_r, k_ptr, micro, ok_l, DK, CP, LP, BK, KS, PREC)
    return KK, QK


@triton.jit
def _inv_unit_lower_blocked(A, LP: tl.constexpr, SUB: tl.constexpr, PREC: tl.constexpr):
    """``(I + A)⁻¹`` by blocks of ``SUB`` rows, with matrix products only (tensor cores for
    half inputs, no serial row loop): all diagonal blocks at once as ``T_d = (I + A_d)⁻¹ =
    (I − A_d)(I + A_d²)(I + A_d⁴)…`` (exact: ``A_d^SUB = 0``), then with the strictly
    block-lower ``N = T_d A_off`` (``N^P = 0``) ``(I + A)⁻¹ = Σ_m (−N)^m T_d`` by Horner's rule.

    The products stay within a ``SUB``-block, where ``|A_ij| ≤ β|k_i||k_j|``: for unit keys
    and ``β ≤ 2`` the float32 result is as accurate as substitution (a few 1e-7 relative)."""
    il = tl.arange(0, LP)
    blk_r = il[:, None] // SUB
    blk_c = il[None, :] // SUB
    Ad = tl.where(blk_r == blk_c, A, 0.0)
    Td = tl.where(il[:, None] == il[None, :], 1.0, 0.0) - Ad
    tl.static_assert(SUB == 16, "the doubling below covers A_d^SUB = 0 for SUB = 16")
    A2 = tl.dot(Ad, Ad, input_precision=PREC)
    A4 = tl.dot(A2, A2, input_precision=PREC)
    Td += tl.dot(Td, A2, input_precision=PREC)
    Td += tl.dot(Td, A4, input_precision=PREC)
    Td += tl.dot(Td, tl.dot(A4, A4, input_precision=PREC), input_precision=PREC)
    if LP > SUB:
        Nm = tl.dot(Td, tl.where(blk_r > blk_c, A, 0.0), input_precision=PREC)
        Tm = Td
        for _ in tl.static_range(LP // SUB - 1):
            Tm = Td - tl.dot(Nm, Tm, input_precision=PREC)
    else:
        Tm = Td
    return Tm


@triton.jit
def _wy_inverse(KK, beta, D, il, LP: tl.constexpr, SUB: tl.constexpr, PREC: tl.constexpr):
    """``T = (I + A)⁻¹`` with ``A = strict_lower(diag(β) (D ⊙ K Kᵀ))``."""
    A = tl.where(il[:, None] > il[None, :], beta[:, None] * D * KK, 0.0)
    return _inv_unit_lower_blocked(A, LP, SUB, PREC)


@triton.jit
def _store_chunk_output(q_ptr, k_ptr, o_ptr, token, ok_r, micro, ok_l, Do, gam_o, QS, W, iv,
                        DK, DV, CP: tl.constexpr, LP: tl.constexpr, BK: tl.constexpr,
                        KS: tl.constexpr, PREC: tl.constexpr, HALF_OPS: tl.constexpr = False):
    """Store the chunk's output ``O = diag(Γo) Q S + Po W`` (``Po = Do ⊙ Q Kᵀ``; ``QS = Q S``
    given) in columns ``iv`` of ``o``, in its dtype (``HALF_OPS``: see :func:`_mm`)."""
    Po = Do * _dot_t(q_ptr, token, ok_r, k_ptr, micro, ok_l, DK, CP, LP, BK, KS, PREC)
    O = _mm(Po, W, gam_o[:, None] * QS, PREC, HALF_OPS, q_ptr)
    tl.store(o_ptr + token[:, None] * DV + iv[None, :], O.to(o_ptr.dtype.element_ty),
             mask=ok_r[:, None] & (iv[None, :] < DV))


@triton.jit
def _seq_tile(ptr, n, bh64, H, DK, DV, ik, iv):
    """Pointers of the ``(BK, VS)`` tile of a per-sequence state ``(N, H, DK, DV)`` at
    sequence ``n`` and head ``bh64`` (int64; packed calls have ``B = 1``, so ``bh = h``)."""
    return ptr + (bh64 + n * H) * DK * DV + ik[:, None] * DV + iv[None, :]


@triton.jit
def _chunk_slice_program(c, bh, col, lg_ptr, T, H, NC, NH: tl.constexpr, C: tl.constexpr,
                         LP: tl.constexpr, CP: tl.constexpr, VS: tl.constexpr,
                         HAS_DECAY: tl.constexpr):
    """Where the program ``(c, bh, col)`` of the grid ``(NC, B·H, BV/VS)`` (``fwd_out``) works: its first value column ``v0`` and columns ``iv``, its chunk's scratch
    index ``chunk`` (``bh·NC + c``) and the chunk's
    :func:`~mingru_kernels._delta_chunk._state_step_tables`."""
    v0 = col * VS
    il, ok_l, ok_r, micro, token, gam, d, gam_last, Do, gam_o = _state_step_tables(
        c, (bh // H).to(tl.int64), bh % H, lg_ptr, T, H, NH, C, LP, CP, HAS_DECAY)
    return (v0, v0 + tl.arange(0, VS), bh.to(tl.int64) * NC + c, il, ok_l, ok_r, micro, token,
            gam, d, gam_last, Do, gam_o)


@triton.jit
def _start_carry(src_ptr, dst_ptr, cu_ptr, NSEQ, bh64, H, DK, DV, ik, iv, user, user_mask,
                 BK: tl.constexpr, VS: tl.constexpr, HAS_SRC: tl.constexpr,
                 HAS_DST: tl.constexpr, PACKED: tl.constexpr):
    """The ``(BK, VS)`` carry a serial state walk starts from, in float32: ``src`` (``h0`` in
    the forward, ``dh_T`` in the backward; zeros without ``HAS_SRC``) at ``user``, or zeros
    when ``PACKED``, where each sequence's own start is taken at its first chunk. Packed, it
    also writes an empty sequence's result straight through: ``dst[n] = src[n]`` (``h_T`` from
    ``h0``, ``dh0`` from ``dh_T``; with ``HAS_DST``)."""
    if PACKED:
        if HAS_DST:
            for n in range(NSEQ):
                empty = tl.load(cu_ptr + n + 1) == tl.load(cu_ptr + n)
                if HAS_SRC:
                    x = tl.load(_seq_tile(src_ptr, n, bh64, H, DK, DV, ik, iv),
                                mask=tl.where(empty, user_mask, False), other=0.0).to(tl.float32)
                else:
                    x = tl.zeros([BK, VS], dtype=tl.float32)
                tl.store(_seq_tile(dst_ptr, n, bh64, H, DK, DV, ik, iv),
                         x.to(dst_ptr.dtype.element_ty), mask=tl.where(empty, user_mask, False))
        carry = tl.zeros([BK, VS], dtype=tl.float32)
    elif HAS_SRC:
        carry = tl.load(src_ptr + user, mask=user_mask, other=0.0).to(tl.float32)
    else:
        carry = tl.zeros([BK, VS], dtype=tl.float32)
    return carry


@triton.jit
def _sequence_restart(carry, table_ptr, c, src_ptr, bh64, H, DK, DV, ik, iv, user_mask,
                      BK: tl.constexpr, VS: tl.constexpr, HAS_SRC: tl.constexpr):
    """A packed walk's carry at chunk ``c``: where ``table[c] = n ≥ 0`` (the forward's
    ``cseq``: chunk ``c`` starts sequence ``n``; the backward's ``cend``: it ends it) the walk
    restarts from ``src[n]`` (``h0``, ``dh_T``; zeros without ``HAS_SRC``), else it keeps
    ``carry``."""
    n = tl.load(table_ptr + c)
    restarts = n >= 0
    if HAS_SRC:
        x = tl.load(_seq_tile(src_ptr, tl.maximum(n, 0), bh64, H, DK, DV, ik, iv),
                    mask=tl.where(restarts, user_mask, False), other=0.0).to(tl.float32)
    else:
        x = tl.zeros([BK, VS], dtype=tl.float32)
    return tl.where(restarts, x, carry)


@triton.jit
def _walk_program(bh, col, H, DK, DV, BK: tl.constexpr, BV: tl.constexpr, VS: tl.constexpr):
    """Where the serial walk program ``(bh, col)`` works: ``bh`` as int64, its batch row and
    head, the state rows ``ik`` and columns ``iv`` (from ``v0 = col·VS``), their offsets ``kv``
    in a padded ``(BK, BV)`` chunk tile, and ``user``, ``user_mask``: the same tile in a
    ``(B·H, DK, DV)`` state of the op's own shape."""
    bh64 = bh.to(tl.int64)
    ik = tl.arange(0, BK)
    v0 = col * VS
    iv = v0 + tl.arange(0, VS)
    user = bh64 * DK * DV + ik[:, None] * DV + iv[None, :]
    user_mask = (ik[:, None] < DK) & (iv[None, :] < DV)
    return (bh64, (bh // H).to(tl.int64), bh % H, ik, v0, iv, ik[:, None] * BV + iv[None, :],
            user, user_mask)


# ----------------------------------------------------------------------------- one-launch walks
# A walk and the per-chunk programs that read what it stores, in one grid (FUSED_BWD).
# ``sync`` (int32, zeroed before the launch): one ticket counter per lane (``(b, h)``), then
# one flag per lane and chunk, counting the column slices published.


@triton.jit
def _lane_ticket(sync_ptr, per_lane):
    """``(lane, ticket, flags_ptr)`` of this program in a grid of ``per_lane`` programs per
    lane: lane ``program_id % n_lanes``, its ticket from the lane's counter (tickets go out
    in the order programs start, so a program that waits on a lower ticket waits on one
    already running), and the start of the per-chunk flags."""
    n_lanes = tl.num_programs(0) // per_lane
    lane = tl.program_id(0) % n_lanes
    ticket = tl.atomic_add(sync_ptr + lane, 1, sem="relaxed")
    return lane, ticket, sync_ptr + n_lanes


@triton.jit
def _publish_chunk(flags_ptr, chunk):
    """Count one more column slice of chunk ``chunk`` (``bh·NC + c``) as stored: the barrier
    orders every thread's stores before the one release that makes them visible."""
    tl.debug_barrier()
    tl.atomic_add(flags_ptr + chunk, 1, sem="release", scope="gpu")


@triton.jit
def _wait_chunk(flags_ptr, lane, NC, c, NCOL: tl.constexpr):
    """Spin (acquire) until all ``NCOL`` column slices of chunk ``c`` of ``lane`` are out."""
    flag = flags_ptr + lane.to(tl.int64) * NC + c
    done = tl.atomic_add(flag, 0, sem="acquire", scope="gpu")
    while done < NCOL:
        done = tl.atomic_add(flag, 0, sem="acquire", scope="gpu")
