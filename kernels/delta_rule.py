"""Triton kernels for the delta rule (DeltaNet / DeltaProduct) in the chunked WY / UT form.

Op: ``delta_rule(q, k, v, beta, log_gamma, h0) -> (o, h_T)`` with ``q (B,T,H,dk)``,
``k (B,T,nh,H,dk)``, ``v (B,T,nh,H,dv)``, ``beta (B,T,nh,H)``, ``log_gamma (B,T,H)``,
``h0 (B,H,dk,dv)``. Per token: ``S ← γ S``; for each micro-step ``j``:
``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``; then ``o_t = Sᵀ q_t``.

Layout of the work. The ``nh`` micro-steps of a token make the sequence one of ``T·nh``
rank-1 updates (``γ`` on each token's first micro-step only). A chunk holds ``C`` whole
tokens, i.e. ``C·nh`` micro-steps padded to ``LP`` (a power of two ≥ 16) with identity steps
(``β = 0``, ``k = 0``, ``γ = 1``), so outputs (one per token, after its last micro-step) never
straddle chunks. With the chunk's start state ``S``, decay ``Γ_i`` (from the chunk start,
inclusive), ``D_ij = Γ_i/Γ_j`` (``j ≤ i``) and ``A = strict_lower(diag(β)(D ⊙ K Kᵀ))``::

    T  = (I + A)⁻¹,   U = T diag(β) V,   Wk = T diag(βΓ) K,   W = U − Wk S
    O  = diag(Γo) Q S + Po W                 Po = Do ⊙ Q Kᵀ (token rows × micro-steps)
    S' = Γ_L S + Kᵀ diag(d) W                d_j = D_{L-1, j}, Γ_L = Γ_{L-1}

Forward: ``delta_rule_fwd_prep_kernel`` (parallel over chunks) builds the ``S``-independent
``Wk`` and ``U`` of every chunk; ``delta_rule_fwd_state_kernel`` (serial over chunks; one
program per (b, h) and slice of state columns) stores each chunk's start state, forms
``W = U − Wk S``, writes the chunk's output ``O`` and steps the state. Storing ``Wk`` and ``U``
(``2·LP`` rows per chunk) instead of chunk maps ``S' = M S + N``, ``O = Qeff S + Ou`` (two
``d_k × d`` matrices and two of ``C`` rows per chunk, each re-read) cuts the forward's scratch
traffic by more than half: ``Po``, ``d`` and ``Γ`` are rebuilt from ``q, k, log γ`` in the state
kernel, whose inputs are far smaller than the maps. With ``OUT_PASS`` (few ``(b, h)`` rows,
where the serial chain is the time) the state kernel writes no ``O``:
``delta_rule_fwd_out_kernel`` forms it parallel over chunks from the stored states, ``Wk``
and ``U``. Backward:
``delta_rule_bwd_state_kernel`` runs the adjoint of that chunk step backwards and stores each
chunk's end-state gradient; ``delta_rule_bwd_grads_kernel`` (parallel) recomputes the chunk and
writes the gradients of ``q, k, v, β, log γ``; ``delta_rule_bwd_kernel`` runs both in one
launch, each chunk's gradients formed as soon as the adjoint has passed it (``FUSED_BWD``).

Packed sequences (``PACKED``, ``B = 1``). The launchers lay the ``N`` sequences out
chunk-aligned — each starts at a chunk boundary, the gaps are identity steps — so no chunk
straddles two sequences and the per-chunk kernels need no change. The two state kernels take
three int32 tables: ``cseq[c]`` (the sequence chunk ``c`` starts, or −1), ``cend[c]`` (the
sequence whose last chunk it is, or −1) and ``cu`` (the ``N+1`` offsets, for the empty
sequences). Forward: a chunk that starts sequence ``n`` starts from ``h0[n]`` (zeros without
``h0``) instead of the carried state, the state after a chunk that ends sequence ``n`` is
stored as ``h_T[n]`` and an empty sequence's ``h_T[n]`` is its ``h0[n]``; ``h0, h_T`` are
``(N, H, d_k, d_v)``. Backward: the adjoint entering a sequence's last chunk is ``dh_T[n]``
(not the next chunk's), the adjoint of a starting chunk's start state is written as
``dh0[n]`` and then cut, and an empty sequence's ``dh0[n]`` is its ``dh_T[n]``.

Register budget. Float32 ``tl.dot`` without TF32 runs on FMA units and holds whole rows and
columns of its operands in registers, so with exact float32 products no product contracts
over more than ``LP`` (chunk) or a ``KS = 16``-wide slice of ``d_k``: contractions over
``d_k`` are summed over slices loaded from memory, and the value side of a chunk is handled
``VS`` columns at a time. Tensor-core products (bfloat16/float16 inputs, ``allow_tf32``, or
float32's split products at 64-wide heads) spread their operands over the warps: there the
slices are 64 wide.

Numerics. All arithmetic is float32 (inputs are cast on load). Dots use ``PREC``: ``"ieee"``
(exact float32 products) for float32 inputs, ``"tf32x3"`` (float32-accurate split products)
for float32 inputs at 64-wide heads, ``"tf32"`` for half inputs or when the caller passes
``allow_tf32``. Decay factors are ``exp`` of segment sums built by masked
cumulative sums of the non-positive ``log γ`` — never ``exp`` of a difference of cumulative
sums — so a gap of ``log γ = −1e10`` (or ``−inf``, floored to ``-1e30``) is an
exact reset with no NaN. ``T`` is a runtime argument: nothing is specialised on it.

This module imports only ``triton``; the chunk algebra the kernels share (indices, loads,
decay tables, the WY inverse) is in :mod:`mingru_kernels._delta_chunk`, and the backward
kernels, re-exported here, are written in :mod:`mingru_kernels._delta_rule_bwd`. The pure-Python
launch metadata lives in :mod:`mingru_kernels.launch.delta_rule`.
"""

import triton
import triton.language as tl

from mingru_kernels._delta_chunk import (
    _chunk_rows,
    _chunk_slice_program,
    _decay_tables,
    _dot_t,
    _ld,
    _lds,
    _load_gates,
    _mm,
    _seq_tile,
    _sequence_restart,
    _start_carry,
    _state_step_tables,
    _store_chunk_output,
    _tm_tile,
    _walk_program,
    _wy_inverse,
    _wy_keys,
)

# The backward kernels live in their own module (one file would pass 650 lines), re-exported
# so that every kernel of the op keeps its one name, ``mingru_kernels.delta_rule.<kernel>``.
from mingru_kernels._delta_rule_bwd import (
    delta_rule_bwd_grads_kernel,
    delta_rule_bwd_kernel,
    delta_rule_bwd_state_kernel,
)

# ----------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------


@triton.jit
def delta_rule_fwd_prep_kernel(
    k_ptr, v_ptr, beta_ptr, lg_ptr,
    wk_ptr, u_ptr, tm_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    SUB: tl.constexpr, HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
    WU_IN_STATE: tl.constexpr = False, STORE_TM: tl.constexpr = True,
):
    """Grid ``(NC, B·H)``. Per chunk: ``Wk = T diag(βΓ) K (LP,BK)``, ``U = T diag(β) V
    (LP,BV)`` and, with ``STORE_TM``, the WY inverse ``T (LP,LP)`` itself (the backward reads
    it instead of inverting again) into scratch laid out ``(B·H, NC, LP, ·)``; the value side
    in column slices of ``VS``. With ``WU_IN_STATE``
    only ``T``: the state kernels form ``Wk`` and ``U`` from it."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    il, tok, sub, ok_l, ir, ok_r, micro, token, lg_rows = _chunk_rows(
        c, (bh // H).to(tl.int64), bh % H, T, H, NH, C, LP, CP)
    beta, lgm, lgt = _load_gates(beta_ptr, lg_ptr, micro, ok_l, sub, lg_rows, token, ok_r,
                                 LP, CP, HAS_DECAY)
    D, gam, d, gam_last, Do, gam_o = _decay_tables(lgm, lgt, il, tok, ir, LP, CP, HAS_DECAY)
    KK = _dot_t(k_ptr, micro, ok_l, k_ptr, micro, ok_l, DK, LP, LP, BK, KS, PREC)
    Tm = _wy_inverse(KK, beta, D, il, LP, SUB, PREC)
    chunk = bh.to(tl.int64) * NC + c
    if STORE_TM or WU_IN_STATE:
        tl.store(_tm_tile(tm_ptr, chunk, il, LP), Tm.to(tm_ptr.dtype.element_ty))
    if not WU_IN_STATE:
        Wk = _wy_keys(Tm, beta, gam, _ld(k_ptr, micro, ok_l, 0, DK, BK), PREC)
        ik = tl.arange(0, BK)
        tl.store(wk_ptr + chunk * (LP * BK) + il[:, None] * BK + ik[None, :],
                 Wk.to(wk_ptr.dtype.element_ty))
        for vb in range(BV // VS):
            iv = vb * VS + tl.arange(0, VS)
            Ub = _mm(Tm, beta[:, None] * _ld(v_ptr, micro, ok_l, vb * VS, DV, VS), None,
                     PREC, False, k_ptr)
            tl.store(u_ptr + chunk * (LP * BV) + il[:, None] * BV + iv[None, :],
                     Ub.to(u_ptr.dtype.element_ty))


@triton.jit
def delta_rule_fwd_state_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, h0_ptr, wk_ptr, u_ptr, tm_ptr,
    states_ptr, o_ptr, ht_ptr, cseq_ptr, cend_ptr, cu_ptr,
    T, H, DK, DV, NC, NSEQ,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    HAS_DECAY: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr, PREC: tl.constexpr,
    REG_STATE: tl.constexpr = False, WU_IN_STATE: tl.constexpr = False,
    OUT_PASS: tl.constexpr = False, STATE_HALF_OPS: tl.constexpr = False,
):
    """Grid ``(B·H, BV/VS)``: one program per (b, h) and slice of ``VS`` state columns, serial
    over chunks. Per chunk, from its start state ``S`` (stored as ``states[c]``)::

        W = U − Wk S      O = diag(Γo) Q S + Po W      S ← Γ_L S + Kᵀ diag(d) W

    with ``Po = Do ⊙ Q Kᵀ`` built from ``q, k`` and ``log γ`` in the chunk; ``O`` is written
    here, in the output dtype, and ``h_T`` (the last ``S``) too. Launch with ``num_stages=1``
    unless ``REG_STATE``: the products with ``S`` re-read the state just stored (slices of
    ``KS`` rows) behind a barrier — or, with ``REG_STATE`` (needs ``KS == BK``: one slice),
    take it from registers, and pipelining may prefetch the next chunk's tiles.
    ``WU_IN_STATE`` (needs ``REG_STATE``) forms ``Wk`` and ``U`` here from the chunk's ``T``
    (``tm``), ``k``, ``v`` and ``β`` instead of reading them from ``wk`` and ``u``.
    ``OUT_PASS`` (needs ``REG_STATE``) takes the output off this serial chain: ``o`` is not
    written here, :func:`delta_rule_fwd_out_kernel` forms it from the stored states, ``Wk``
    and ``U``, parallel over chunks.

    ``PACKED`` (``B = 1``; ``NSEQ`` sequences laid out chunk-aligned, see the launchers):
    ``h0`` and ``h_T`` are ``(NSEQ, H, DK, DV)``; ``cseq[c]`` (int32) is the sequence chunk
    ``c`` starts (its start state is then ``h0[cseq[c]]``, zeros without ``h0``) or −1,
    ``cend[c]`` the sequence whose last chunk it is (its end state is stored as
    ``h_T[cend[c]]``) or −1; ``cu (NSEQ+1)`` (int32 offsets) finds the empty sequences,
    whose ``h_T`` is their ``h0``. Otherwise the three tables are never read.

    ``STATE_HALF_OPS`` (with ``REG_STATE``, half inputs): the chunk's products take 16-bit
    operands (the carried ``S`` rounded for the product, kept in float32), as fla's state
    kernel does; see :func:`~mingru_kernels._delta_chunk._mm`."""
    bh64, b64, h, ik, v0, iv, kv, user, user_mask = _walk_program(
        tl.program_id(0), tl.program_id(1), H, DK, DV, BK, BV, VS)
    S = _start_carry(h0_ptr, ht_ptr, cu_ptr, NSEQ, bh64, H, DK, DV, ik, iv, user, user_mask,
                     BK, VS, HAS_H0, True, PACKED)
    for c in range(NC):
        if PACKED:
            S = _sequence_restart(S, cseq_ptr, c, h0_ptr, bh64, H, DK, DV, ik, iv, user_mask,
                                  BK, VS, HAS_H0)
        il, ok_l, ok_r, micro, token, gam, d, gam_last, Do, gam_o = _state_step_tables(
            c, b64, h, lg_ptr, T, H, NH, C, LP, CP, HAS_DECAY)
        chunk = bh64 * NC + c
        sbase = chunk * (BK * BV)
        tl.store(states_ptr + sbase + kv, S.to(states_ptr.dtype.element_ty))
        wk_rows = wk_ptr + chunk * (LP * BK) + il[:, None] * BK
        K = _ld(k_ptr, micro, ok_l, 0, DK, BK)
        if WU_IN_STATE:
            tl.static_assert(REG_STATE, "WU_IN_STATE holds Wk in registers: needs REG_STATE")
            beta = tl.load(beta_ptr + micro, mask=ok_l, other=0.0).to(tl.float32)
            Tm = tl.load(_tm_tile(tm_ptr, chunk, il, LP)).to(tl.float32)
            Wk = _wy_keys(Tm, beta, gam, K, PREC, STATE_HALF_OPS, k_ptr)
            U = _mm(Tm, beta[:, None] * _ld(v_ptr, micro, ok_l, v0, DV, VS), None, PREC,
                    STATE_HALF_OPS, k_ptr)
            WkS = _mm(Wk, S, None, PREC, STATE_HALF_OPS, k_ptr)
            if not OUT_PASS:
                QS = _mm(_ld(q_ptr, token, ok_r, 0, DK, BK), S, None, PREC, STATE_HALF_OPS,
                         k_ptr)
        elif REG_STATE:
            tl.static_assert(KS == BK, "REG_STATE multiplies the whole state tile at once")
            U = tl.load(u_ptr + chunk * (LP * BV) + il[:, None] * BV
                        + iv[None, :]).to(tl.float32)
            WkS = _mm(tl.load(wk_rows + ik[None, :]).to(tl.float32), S, None, PREC,
                      STATE_HALF_OPS, k_ptr)
            if not OUT_PASS:
                QS = _mm(_ld(q_ptr, token, ok_r, 0, DK, BK), S, None, PREC, STATE_HALF_OPS,
                         k_ptr)
        else:
            tl.static_assert(not STATE_HALF_OPS, "STATE_HALF_OPS needs REG_STATE")
            tl.static_assert(not OUT_PASS, "OUT_PASS needs REG_STATE")
            tl.debug_barrier()
            WkS = tl.zeros([LP, VS], dtype=tl.float32)
            QS = tl.zeros([CP, VS], dtype=tl.float32)
            for j in tl.static_range(BK // KS):
                jj = j * KS + tl.arange(0, KS)
                Sj = tl.load(states_ptr + sbase + jj[:, None] * BV + iv[None, :]).to(tl.float32)
                WkS = tl.dot(tl.load(wk_rows + jj[None, :]).to(tl.float32), Sj, acc=WkS,
                             input_precision=PREC)
                QS = tl.dot(_ld(q_ptr, token, ok_r, j * KS, DK, KS), Sj, acc=QS,
                            input_precision=PREC)
            U = tl.load(u_ptr + chunk * (LP * BV) + il[:, None] * BV
                        + iv[None, :]).to(tl.float32)
        W = U - WkS
        if not OUT_PASS:
            _store_chunk_output(q_ptr, k_ptr, o_ptr, token, ok_r, micro, ok_l, Do, gam_o, QS, W,
                                iv, DK, DV, CP, LP, BK, KS, PREC, STATE_HALF_OPS)
        Kd = d[:, None] * K
        S = _mm(tl.trans(Kd), W, gam_last * S, PREC, STATE_HALF_OPS, k_ptr)
        if PACKED:
            e = tl.load(cend_ptr + c)
            tl.store(_seq_tile(ht_ptr, tl.maximum(e, 0), bh64, H, DK, DV, ik, iv),
                     S.to(ht_ptr.dtype.element_ty), mask=tl.where(e >= 0, user_mask, False))
    if not PACKED:
        tl.store(ht_ptr + user, S.to(ht_ptr.dtype.element_ty), mask=user_mask)


@triton.jit
def delta_rule_fwd_out_kernel(
    q_ptr, k_ptr, lg_ptr, states_ptr, wk_ptr, u_ptr, o_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
):
    """Grid ``(NC, B·H, BV/VS)``: the output of the state kernel's ``OUT_PASS``, parallel
    over chunks. From the chunk's start state ``S = states[c]`` and the stored
    ``Wk (B·H, NC, LP, BK)`` and ``U (B·H, NC, LP, BV)``::

        W = U − Wk S        O = diag(Γo) Q S + Po W        Po = Do ⊙ Q Kᵀ

    — the products the state kernel otherwise runs per chunk, off its serial chain (where
    ``B·H`` gives that kernel fewer programs than the GPU has SMs, its chain is the time)."""
    v0, iv, chunk, il, ok_l, ok_r, micro, token, gam, d, gam_last, Do, gam_o = \
        _chunk_slice_program(tl.program_id(0), tl.program_id(1), tl.program_id(2), lg_ptr, T,
                             H, NC, NH, C, LP, CP, VS, HAS_DECAY)
    W = tl.load(u_ptr + chunk * (LP * BV) + il[:, None] * BV + iv[None, :]).to(tl.float32)
    QS = tl.zeros([CP, VS], dtype=tl.float32)
    for j in tl.static_range(BK // KS):
        jj = j * KS + tl.arange(0, KS)
        Sj = _lds(states_ptr, chunk * (BK * BV), j * KS, KS, BV, v0, VS)
        QS = _mm(_ld(q_ptr, token, ok_r, j * KS, DK, KS), Sj, QS, PREC, False, q_ptr)
        Wk = tl.load(wk_ptr + chunk * (LP * BK) + il[:, None] * BK + jj[None, :])
        W -= _mm(Wk.to(tl.float32), Sj, None, PREC, False, q_ptr)
    _store_chunk_output(q_ptr, k_ptr, o_ptr, token, ok_r, micro, ok_l, Do, gam_o, QS, W, iv,
                        DK, DV, CP, LP, BK, KS, PREC)


__all__ = [
    "delta_rule_bwd_grads_kernel",
    "delta_rule_bwd_kernel",
    "delta_rule_bwd_state_kernel",
    "delta_rule_fwd_out_kernel",
    "delta_rule_fwd_prep_kernel",
    "delta_rule_fwd_state_kernel",
]
