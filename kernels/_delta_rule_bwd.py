"""The delta rule's backward kernels, re-exported by :mod:`mingru_kernels.delta_rule` (whose
docstring gives the op, the chunk algebra, the layout of the work and the numerics):
``delta_rule_bwd_state_kernel`` (serial over chunks: the state adjoint, stored per chunk),
``delta_rule_bwd_grads_kernel`` (parallel over chunks: the gradients of every input) and
``delta_rule_bwd_kernel`` (both in one launch).

Imports only ``triton`` and the shared chunk algebra of :mod:`mingru_kernels._delta_chunk`.
"""

import triton
import triton.language as tl

# Sums are spelled ``tl.reduce(x, axis, _sum_combine)`` / ``tl.associative_scan(...)``: the
# same code as ``tl.sum`` / ``tl.cumsum`` on GPU, but Triton's interpreter re-patches the
# language on every call of those jit wrappers (milliseconds each), which made the CPU tests
# several times slower; with the combine function passed directly it runs numpy's sum.
from triton.language.standard import _sum_combine

from mingru_kernels._delta_chunk import (
    _chunk_rows,
    _decay_tables,
    _dot_t,
    _gram,
    _lane_ticket,
    _ld,
    _lds,
    _load_gates,
    _mm,
    _publish_chunk,
    _seq_tile,
    _sequence_restart,
    _start_carry,
    _state_step_tables,
    _tm_tile,
    _wait_chunk,
    _walk_program,
    _wy_inverse,
    _wy_keys,
)


@triton.jit
def _chunk_keys(k_ptr, beta_ptr, wk_ptr, tm_ptr, chunk, il, micro, ok_l, gam, DK,
                LP: tl.constexpr, BK: tl.constexpr, PREC: tl.constexpr,
                WU_IN_STATE: tl.constexpr, HALF_OPS: tl.constexpr):
    """The chunk's ``Wk (LP, BK)`` in float32: formed from its WY inverse ``T`` (``tm``),
    ``k`` and ``β`` with ``WU_IN_STATE``, else read from the forward's ``wk``."""
    if WU_IN_STATE:
        beta = tl.load(beta_ptr + micro, mask=ok_l, other=0.0).to(tl.float32)
        Wk = _wy_keys(tl.load(_tm_tile(tm_ptr, chunk, il, LP)).to(tl.float32), beta, gam,
                      _ld(k_ptr, micro, ok_l, 0, DK, BK), PREC, HALF_OPS, k_ptr)
    else:
        Wk = tl.load(wk_ptr + chunk * (LP * BK) + il[:, None] * BK
                     + tl.arange(0, BK)[None, :]).to(tl.float32)
    return Wk


@triton.jit
def _bwd_state_step(q_ptr, k_ptr, beta_ptr, lg_ptr, do_ptr, wk_ptr, tm_ptr, dstates_ptr, dS,
                    c, b64, h, chunk, dbase, iv, v0, T, H, DK, DV,
                    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
                    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
                    HAS_DECAY: tl.constexpr, PREC: tl.constexpr, REG_STATE: tl.constexpr,
                    WU_IN_STATE: tl.constexpr, STATE_HALF_OPS: tl.constexpr):
    """One chunk of :func:`delta_rule_bwd_state_kernel`: ``∂L/∂S_c`` from ``dS' = dS`` (just
    stored at ``dstates[c]``)."""
    il, ok_l, ok_r, micro, token, gam, d, gam_last, Do, gam_o = _state_step_tables(
        c, b64, h, lg_ptr, T, H, NH, C, LP, CP, HAS_DECAY)
    if REG_STATE:
        tl.static_assert(KS == BK, "REG_STATE multiplies the whole state tile at once")
        KdS = _mm(_ld(k_ptr, micro, ok_l, 0, DK, BK), dS, None, PREC, STATE_HALF_OPS, k_ptr)
    else:
        tl.static_assert(not STATE_HALF_OPS, "STATE_HALF_OPS needs REG_STATE")
        tl.debug_barrier()
        KdS = tl.zeros([LP, VS], dtype=tl.float32)
        for j in tl.static_range(BK // KS):
            jj = j * KS + tl.arange(0, KS)
            KdS = tl.dot(_ld(k_ptr, micro, ok_l, j * KS, DK, KS),
                         tl.load(dstates_ptr + dbase + jj[:, None] * BV + iv[None, :]
                                 ).to(tl.float32),
                         acc=KdS, input_precision=PREC)
    Wk = _chunk_keys(k_ptr, beta_ptr, wk_ptr, tm_ptr, chunk, il, micro, ok_l, gam, DK, LP, BK,
                     PREC, WU_IN_STATE, STATE_HALF_OPS)
    dO = _ld(do_ptr, token, ok_r, v0, DV, VS)
    Po = Do * _dot_t(q_ptr, token, ok_r, k_ptr, micro, ok_l, DK, CP, LP, BK, KS, PREC)
    dW = _mm(tl.trans(Po), dO, d[:, None] * KdS, PREC, STATE_HALF_OPS, k_ptr)
    Qo = gam_o[:, None] * _ld(q_ptr, token, ok_r, 0, DK, BK)
    acc = _mm(tl.trans(Qo), dO, gam_last * dS, PREC, STATE_HALF_OPS, k_ptr)
    return acc - _mm(tl.trans(Wk), dW, None, PREC, STATE_HALF_OPS, k_ptr)


@triton.jit
def _bwd_state_program(
    bh, col, flags_ptr,
    q_ptr, k_ptr, beta_ptr, lg_ptr, dht_ptr, do_ptr, wk_ptr, tm_ptr,
    dstates_ptr, dh0_ptr, cseq_ptr, cend_ptr, cu_ptr,
    T, H, DK, DV, NC, NSEQ,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    HAS_DECAY: tl.constexpr, HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr,
    PACKED: tl.constexpr, PREC: tl.constexpr, REG_STATE: tl.constexpr = False,
    WU_IN_STATE: tl.constexpr = False, STATE_HALF_OPS: tl.constexpr = False,
    FUSED: tl.constexpr = False,
):
    """The program ``(bh, col)`` of :func:`delta_rule_bwd_state_kernel` (its docstring
    holds the algebra). ``FUSED`` (:func:`delta_rule_bwd_kernel`): after storing each chunk's
    ``dstates[c]`` it adds one to the int32 ``flags[bh·NC + c]`` with release semantics."""
    bh64, b64, h, ik, v0, iv, kv, user, user_mask = _walk_program(bh, col, H, DK, DV, BK, BV,
                                                                   VS)
    dS = _start_carry(dht_ptr, dh0_ptr, cu_ptr, NSEQ, bh64, H, DK, DV, ik, iv, user, user_mask,
                      BK, VS, HAS_DHT, HAS_H0, PACKED)
    for i in range(NC):
        c = NC - 1 - i
        if PACKED:
            dS = _sequence_restart(dS, cend_ptr, c, dht_ptr, bh64, H, DK, DV, ik, iv, user_mask,
                                   BK, VS, HAS_DHT)
        chunk = bh64 * NC + c
        dbase = chunk * (BK * BV)
        tl.store(dstates_ptr + dbase + kv, dS.to(dstates_ptr.dtype.element_ty))
        if FUSED:  # publish dS' of chunk c to the gradient programs of the same launch
            _publish_chunk(flags_ptr, chunk)
        dS = _bwd_state_step(q_ptr, k_ptr, beta_ptr, lg_ptr, do_ptr, wk_ptr, tm_ptr,
                             dstates_ptr, dS, c, b64, h, chunk, dbase, iv, v0, T, H, DK, DV,
                             NH, C, LP, CP, BK, BV, KS, VS, HAS_DECAY, PREC, REG_STATE,
                             WU_IN_STATE, STATE_HALF_OPS)
        if PACKED:
            s = tl.load(cseq_ptr + c)
            starts = s >= 0
            if HAS_H0:
                tl.store(_seq_tile(dh0_ptr, tl.maximum(s, 0), bh64, H, DK, DV, ik, iv),
                         dS.to(dh0_ptr.dtype.element_ty), mask=tl.where(starts, user_mask, False))
            dS = tl.where(starts, 0.0, dS)
    if HAS_H0:
        if not PACKED:
            tl.store(dh0_ptr + user, dS.to(dh0_ptr.dtype.element_ty), mask=user_mask)


@triton.jit
def delta_rule_bwd_state_kernel(
    q_ptr, k_ptr, beta_ptr, lg_ptr, dht_ptr, do_ptr, wk_ptr, tm_ptr,
    dstates_ptr, dh0_ptr, cseq_ptr, cend_ptr, cu_ptr,
    T, H, DK, DV, NC, NSEQ,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    HAS_DECAY: tl.constexpr, HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr,
    PACKED: tl.constexpr, PREC: tl.constexpr, REG_STATE: tl.constexpr = False,
    WU_IN_STATE: tl.constexpr = False, STATE_HALF_OPS: tl.constexpr = False,
):
    """Grid ``(B·H, BV/VS)``. Backwards over chunks: ``dstates[c] = ∂L/∂S_{c+1} = dS'`` and,
    the adjoint of the forward state kernel's chunk step::

        dW = diag(d) K dS' + Poᵀ dO      ∂L/∂S_c = Γ_L dS' + (diag(Γo) Q)ᵀ dO − Wkᵀ dW

    ``dh0 = ∂L/∂S_0``. ``num_stages=1`` (``K dS'`` re-reads the slice just stored, as the
    forward state kernel does, or with ``REG_STATE`` takes it from registers).
    ``WU_IN_STATE``: ``Wk`` is formed here from ``T`` (``tm``), ``k`` and ``β``, as the
    forward state kernel does, instead of read from ``wk``.

    ``PACKED`` (tables as in :func:`delta_rule_fwd_state_kernel`): the adjoint is cut at
    every sequence boundary — the last chunk of sequence ``n`` starts from ``dh_T[n]``
    (zeros without ``dh_T``), not from the next chunk's adjoint, and the adjoint of the start
    state of the chunk that starts sequence ``n`` is ``dh0[n]``; an empty sequence's
    ``dh0[n]`` is its ``dh_T[n]``. ``STATE_HALF_OPS``: as in the forward state kernel."""
    _bwd_state_program(
        tl.program_id(0), tl.program_id(1), dstates_ptr, q_ptr, k_ptr, beta_ptr, lg_ptr, dht_ptr,
        do_ptr, wk_ptr, tm_ptr, dstates_ptr, dh0_ptr, cseq_ptr, cend_ptr, cu_ptr, T, H, DK, DV,
        NC, NSEQ, NH, C, LP, CP, BK, BV, KS, VS, HAS_DECAY, HAS_DHT, HAS_H0, PACKED, PREC,
        REG_STATE, WU_IN_STATE, STATE_HALF_OPS)


@triton.jit
def _bwd_grads_program(
    c, bh,
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, states_ptr, dstates_ptr, tm_ptr, do_ptr,
    dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    SUB: tl.constexpr, HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
    SAVED_TM: tl.constexpr = True, HALF_OPS: tl.constexpr = False,
    CG: tl.constexpr = False,
):
    """The program ``(c, bh)`` of :func:`delta_rule_bwd_grads_kernel` (its docstring holds
    the algebra). ``CG``: ``dstates`` is read through L2 only, as written by the state
    programs of the same launch (:func:`delta_rule_bwd_kernel`)."""
    b64 = (bh // H).to(tl.int64)
    h = bh % H
    il, tok, sub, ok_l, ir, ok_r, micro, token, lg_rows = _chunk_rows(
        c, b64, h, T, H, NH, C, LP, CP)
    beta, lgm, lgt = _load_gates(beta_ptr, lg_ptr, micro, ok_l, sub, lg_rows, token, ok_r,
                                 LP, CP, HAS_DECAY)
    D, gam, d, gam_last, Do, gam_o = _decay_tables(lgm, lgt, il, tok, ir, LP, CP, HAS_DECAY)
    KK, QK = _gram(k_ptr, q_ptr, micro, ok_l, token, ok_r, DK, LP, CP, BK, KS, PREC)
    Po = Do * QK
    chunk = bh.to(tl.int64) * NC + c
    if SAVED_TM:
        Tm = tl.load(_tm_tile(tm_ptr, chunk, il, LP)).to(tl.float32)
    else:
        Tm = _wy_inverse(KK, beta, D, il, LP, SUB, PREC)
    sbase = chunk * (BK * BV)  # states and dstates share one layout
    dbase = sbase

    dOW = tl.zeros([CP, LP], dtype=tl.float32)  # dO Wᵀ
    dRW = tl.zeros([LP, LP], dtype=tl.float32)  # dR Wᵀ
    dK = tl.zeros([LP, BK], dtype=tl.float32)
    dQ = tl.zeros([CP, BK], dtype=tl.float32)
    dbeta = tl.zeros([LP], dtype=tl.float32)
    z_ks = tl.zeros([LP], dtype=tl.float32)  # rowsum(K S ⊙ dR)
    z_kds = tl.zeros([LP], dtype=tl.float32)  # rowsum(K dS' ⊙ W)
    z_qs = tl.zeros([CP], dtype=tl.float32)  # rowsum(Q S ⊙ dO)
    z_sds = tl.zeros([BK], dtype=tl.float32)  # rowsum(S ⊙ dS')
    for vb in range(BV // VS):
        v0 = vb * VS
        S_b = _lds(states_ptr, sbase, 0, BK, BV, v0, VS)
        dS_b = _lds(dstates_ptr, dbase, 0, BK, BV, v0, VS, CG)
        dO_b = _ld(do_ptr, token, ok_r, v0, DV, VS)
        KS_b = tl.zeros([LP, VS], dtype=tl.float32)
        KdS_b = tl.zeros([LP, VS], dtype=tl.float32)
        QS_b = tl.zeros([CP, VS], dtype=tl.float32)
        for j in tl.static_range(BK // KS):
            Kj = _ld(k_ptr, micro, ok_l, j * KS, DK, KS)
            Sj = _lds(states_ptr, sbase, j * KS, KS, BV, v0, VS)
            KS_b = _mm(Kj, Sj, KS_b, PREC, HALF_OPS, k_ptr)
            KdS_b = _mm(Kj, _lds(dstates_ptr, dbase, j * KS, KS, BV, v0, VS, CG), KdS_b, PREC,
                        HALF_OPS, k_ptr)
            if HAS_DECAY:
                QS_b = _mm(_ld(q_ptr, token, ok_r, j * KS, DK, KS), Sj, QS_b, PREC, HALF_OPS,
                           k_ptr)
        Vr = _ld(v_ptr, micro, ok_l, v0, DV, VS) - gam[:, None] * KS_b
        W_b = _mm(Tm, beta[:, None] * Vr, None, PREC, HALF_OPS, k_ptr)
        dW_b = _mm(tl.trans(Po), dO_b, None, PREC, HALF_OPS, k_ptr) + d[:, None] * KdS_b
        dR_b = _mm(tl.trans(Tm), dW_b, None, PREC, HALF_OPS, k_ptr)
        iv = v0 + tl.arange(0, VS)
        tl.store(dv_ptr + micro[:, None] * DV + iv[None, :],
                 (beta[:, None] * dR_b).to(dv_ptr.dtype.element_ty),
                 mask=ok_l[:, None] & (iv[None, :] < DV))
        dOW = _mm(dO_b, tl.trans(W_b), dOW, PREC, HALF_OPS, k_ptr)
        dRW = _mm(dR_b, tl.trans(W_b), dRW, PREC, HALF_OPS, k_ptr)
        dK += d[:, None] * _mm(W_b, tl.trans(dS_b), None, PREC, HALF_OPS, k_ptr)
        dK -= (beta * gam)[:, None] * _mm(dR_b, tl.trans(S_b), None, PREC, HALF_OPS, k_ptr)
        dQ += gam_o[:, None] * _mm(dO_b, tl.trans(S_b), None, PREC, HALF_OPS, k_ptr)
        dbeta += tl.reduce(Vr * dR_b, 1, _sum_combine)
        if HAS_DECAY:
            z_ks += tl.reduce(KS_b * dR_b, 1, _sum_combine)
            z_kds += tl.reduce(KdS_b * W_b, 1, _sum_combine)
            z_qs += tl.reduce(QS_b * dO_b, 1, _sum_combine)
            z_sds += tl.reduce(S_b * dS_b, 1, _sum_combine)

    dA = tl.where(il[:, None] > il[None, :], -dRW, 0.0)
    At = beta[:, None] * dA * D  # Ã
    Pd = Do * dOW
    K = _ld(k_ptr, micro, ok_l, 0, DK, BK)
    Q = _ld(q_ptr, token, ok_r, 0, DK, BK)
    dK += _mm(tl.trans(Pd), Q, None, PREC, HALF_OPS, k_ptr)
    dK += (_mm(At, K, None, PREC, HALF_OPS, k_ptr)
           + _mm(tl.trans(At), K, None, PREC, HALF_OPS, k_ptr))
    dQ += _mm(Pd, K, None, PREC, HALF_OPS, k_ptr)
    dbeta += tl.reduce(dA * D * KK, 1, _sum_combine)
    ik = tl.arange(0, BK)
    tl.store(dq_ptr + token[:, None] * DK + ik[None, :], dQ.to(dq_ptr.dtype.element_ty),
             mask=ok_r[:, None] & (ik[None, :] < DK))
    tl.store(dk_ptr + micro[:, None] * DK + ik[None, :], dK.to(dk_ptr.dtype.element_ty),
             mask=ok_l[:, None] & (ik[None, :] < DK))
    tl.store(dbeta_ptr + micro, dbeta.to(dbeta_ptr.dtype.element_ty), mask=ok_l)

    if HAS_DECAY:
        # z = (∂L/∂factor)·factor for every decay factor; ∂L/∂log γ_l sums the z whose
        # segment contains l. D_ij covers (j, i]; Γ_i covers [0, i]; d_j covers (j, L-1];
        # Γ_L covers everything; Do_rj and Γo_r cover tokens (tok(j), r] and [0, r].
        Z = At * KK
        z_gam = -beta * gam * z_ks
        z_d = d * z_kds
        z_last = gam_last * tl.reduce(z_sds, 0, _sum_combine)
        Zo = dOW * Po
        z_gam_o = gam_o * z_qs
        left = tl.associative_scan(Z, 1, _sum_combine) - Z  # [i, l] = Σ_{j<l} Z[i, j]
        on_or_after = il[:, None] >= il[None, :]  # [i, l]: i ≥ l
        g = tl.reduce(tl.where(on_or_after, left + z_gam[:, None], 0.0), 0, _sum_combine)
        g += tl.associative_scan(z_d, 0, _sum_combine) - z_d + z_last
        left_o = tl.associative_scan(Zo, 1, _sum_combine) - Zo
        g += tl.reduce(tl.where(ir[:, None] >= tok[None, :], left_o + z_gam_o[:, None], 0.0),
                       0, _sum_combine)
        # log γ of a token acts on its first micro-step only.
        tl.store(dlg_ptr + lg_rows, g.to(dlg_ptr.dtype.element_ty), mask=ok_l & (sub == 0))


@triton.jit
def delta_rule_bwd_grads_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, states_ptr, dstates_ptr, tm_ptr, do_ptr,
    dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    SUB: tl.constexpr, HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
    SAVED_TM: tl.constexpr = True, HALF_OPS: tl.constexpr = False,
):
    """Grid ``(NC, B·H)``. Recomputes the chunk from its start state ``S = states[c]`` and
    the forward's WY inverse ``T = tm[c]`` (``SAVED_TM``; otherwise inverted again here) and,
    with ``dO`` and ``dS' = dstates[c]``, writes ``dq, dk, dv, dβ`` and ``d log γ``.

    With ``R = diag(β)(V − diag(Γ) K S)`` and ``W = T R`` (value side in column slices)::

        dW = Poᵀ dO + diag(d) K dS'            dR = Tᵀ dW        dA = −strict(dR Wᵀ)
        dQ = diag(Γo) dO Sᵀ + (Do ⊙ dO Wᵀ) K    dV = diag(β) dR
        dK = (Do ⊙ dO Wᵀ)ᵀ Q + diag(d) W dS'ᵀ − diag(βΓ) dR Sᵀ + Ã K + Ãᵀ K,  Ã = diag(β)(dA ⊙ D)
        dβ = rowsum((V − diag(Γ) K S) ⊙ dR) + rowsum(dA ⊙ D ⊙ K Kᵀ)

    and ``d log γ`` collects ``∂/∂ log γ_l`` of every decay factor whose segment covers
    micro-step ``l`` (rectangle sums of ``dD ⊙ D``, built with cumulative sums)."""
    _bwd_grads_program(
        tl.program_id(0), tl.program_id(1), q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, states_ptr,
        dstates_ptr, tm_ptr, do_ptr, dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr, T, H, DK, DV, NC,
        NH, C, LP, CP, BK, BV, KS, VS, SUB, HAS_DECAY, PREC, SAVED_TM, HALF_OPS)


@triton.jit
def delta_rule_bwd_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, dht_ptr, do_ptr, wk_ptr, tm_ptr,
    states_ptr, dstates_ptr, dh0_ptr, cseq_ptr, cend_ptr, cu_ptr,
    dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr, sync_ptr,
    T, H, DK, DV, NC, NSEQ,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
    SUB: tl.constexpr, HAS_DECAY: tl.constexpr, HAS_DHT: tl.constexpr,
    HAS_H0: tl.constexpr, PACKED: tl.constexpr, PREC: tl.constexpr,
    REG_STATE: tl.constexpr = False, WU_IN_STATE: tl.constexpr = False,
    STATE_HALF_OPS: tl.constexpr = False,
    SAVED_TM: tl.constexpr = True, HALF_OPS: tl.constexpr = False,
):
    """The backward's state kernel and per-chunk kernel in one launch (``FUSED_BWD``), so
    that the gradients of a chunk are formed while the serial adjoint walks on through the
    chunks before it: 1-D grid of ``B·H · (BV/VS + NC)`` programs, ``VS`` the state
    programs' columns (the per-chunk programs use the same).

    Each program takes a ticket from its lane's counter (lane = ``program_id % B·H``, one
    ``(b, h)``; ``sync[lane]``, int32, zeroed before the launch): the first ``BV/VS``
    tickets of a lane run :func:`delta_rule_bwd_state_kernel`'s column programs, which
    publish every chunk's ``dstates[c]`` by adding one to ``flags[bh·NC + c]``
    (``sync[B·H + …]``, release); ticket ``BV/VS + i`` runs
    :func:`delta_rule_bwd_grads_kernel`'s program of chunk ``c = NC − 1 − i`` once all
    ``BV/VS`` slices of its ``dstates[c]`` are out (acquire), in the order the adjoint
    produces them. Tickets go out in the order programs start, so a waiting program only
    waits on state programs that have already started, and those never wait: no deadlock
    whatever order the hardware runs the grid in (as in the look-back scans of
    :mod:`mingru_kernels._scan_common`)."""
    NCOL: tl.constexpr = BV // VS
    lane, ticket, flags_ptr = _lane_ticket(sync_ptr, NCOL + NC)
    if ticket < NCOL:
        _bwd_state_program(
            lane, ticket, flags_ptr, q_ptr, k_ptr, beta_ptr, lg_ptr, dht_ptr, do_ptr, wk_ptr,
            tm_ptr, dstates_ptr, dh0_ptr, cseq_ptr, cend_ptr, cu_ptr, T, H, DK, DV, NC, NSEQ,
            NH, C, LP, CP, BK, BV, KS, VS, HAS_DECAY, HAS_DHT, HAS_H0, PACKED, PREC,
            REG_STATE, WU_IN_STATE, STATE_HALF_OPS, True)
    else:
        c = NC - 1 - (ticket - NCOL)
        _wait_chunk(flags_ptr, lane, NC, c, NCOL)
        _bwd_grads_program(
            c, lane, q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, states_ptr, dstates_ptr, tm_ptr,
            do_ptr, dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr, T, H, DK, DV, NC, NH, C, LP,
            CP, BK, BV, KS, VS, SUB, HAS_DECAY, PREC, SAVED_TM, HALF_OPS, True)
