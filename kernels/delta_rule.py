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

so per chunk ``O = Qeff S + Ou`` and ``S' = M S + N`` with ``S``-independent
``Qeff, Ou, M, N``. Forward: ``delta_fwd_prep_kernel`` (parallel over chunks) builds them,
``delta_fwd_state_kernel`` (one program per (b, h), serial over chunks) runs
``S ← M S + N`` and stores every chunk's start state, ``delta_fwd_out_kernel`` (parallel)
writes ``O``. Backward: ``delta_bwd_state_kernel`` runs ``dS ← Mᵀ dS + Qeffᵀ dO`` backwards
and stores each chunk's end-state gradient; ``delta_bwd_grads_kernel`` (parallel) recomputes
the chunk and writes the gradients of ``q, k, v, β, log γ``.

Numerics. All arithmetic is float32 (inputs are cast on load; dots use ``DOT_PRECISION``,
``"ieee"`` by default: no TF32). Decay factors are ``exp`` of segment sums built by masked
cumulative sums of the non-positive ``log γ`` — never ``exp`` of a difference of cumulative
sums — so a gap of ``log γ = −1e10`` (or ``−inf``, floored to ``LOG_GAMMA_FLOOR``) is an
exact reset with no NaN. ``T`` is a runtime argument: nothing is specialised on it.

This module imports only ``triton``; the pure-Python launch metadata at the bottom is shared
by the PyTorch launcher and a future JAX launcher.
"""

import triton
import triton.language as tl
from triton.language.standard import _sum_combine

# ----------------------------------------------------------------------------------------
# helpers (inlined into the kernels)
# ----------------------------------------------------------------------------------------


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
def _load_chunk(q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, b, h, T, H, DK, DV,
                tok, sub, t_l, ok_l, ir, t_r, ok_r,
                NH: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
                BK: tl.constexpr, BV: tl.constexpr, HAS_DECAY: tl.constexpr):
    """Load a chunk as float32: ``K (LP,BK)``, ``V (LP,BV)``, ``β (LP)``, per-micro-step
    ``log γ`` (``LP``, zero except on a token's first micro-step), ``Q (CP,BK)`` and
    per-token ``log γ`` (``CP``). Padding rows/columns load zeros."""
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    b64 = b.to(tl.int64)
    micro = ((b64 * T + t_l) * NH + sub) * H + h  # row index into (B, T, nh, H)
    K = tl.load(k_ptr + micro[:, None] * DK + ik[None, :],
                mask=ok_l[:, None] & (ik[None, :] < DK), other=0.0).to(tl.float32)
    V = tl.load(v_ptr + micro[:, None] * DV + iv[None, :],
                mask=ok_l[:, None] & (iv[None, :] < DV), other=0.0).to(tl.float32)
    beta = tl.load(beta_ptr + micro, mask=ok_l, other=0.0).to(tl.float32)
    token = (b64 * T + t_r) * H + h  # row index into (B, T, H)
    Q = tl.load(q_ptr + token[:, None] * DK + ik[None, :],
                mask=ok_r[:, None] & (ik[None, :] < DK), other=0.0).to(tl.float32)
    if HAS_DECAY:
        first = ok_l & (sub == 0)
        lgm = tl.load(lg_ptr + (b64 * T + t_l) * H + h, mask=first, other=0.0).to(tl.float32)
        lgt = tl.load(lg_ptr + token, mask=ok_r, other=0.0).to(tl.float32)
        # -inf (and anything below) is an exact reset either way; the floor keeps sums finite.
        lgm = tl.maximum(lgm, -1.0e30)
        lgt = tl.maximum(lgt, -1.0e30)
    else:
        lgm = tl.zeros([LP], dtype=tl.float32)
        lgt = tl.zeros([CP], dtype=tl.float32)
    return K, V, beta, lgm, Q, lgt


@triton.jit
def _decay_tables(lgm, lgt, il, tok, ir, LP: tl.constexpr, CP: tl.constexpr,
                  HAS_DECAY: tl.constexpr):
    """``D (LP,LP)``, ``Γ (LP)``, ``d = D[L-1] (LP)``, ``Γ_L``, ``Do (CP,LP)``, ``Γo (CP)``.

    Every factor is ``exp`` of a segment sum of non-positive terms (masked cumulative sum):
    no cancellation and no ``inf − inf`` even when one ``log γ`` is ``−1e30``."""
    causal = il[:, None] >= il[None, :]
    seen = ir[:, None] >= tok[None, :]  # micro-step j is at or before token row r's output
    if HAS_DECAY:
        seg = tl.associative_scan(tl.where(il[:, None] > il[None, :], lgm[:, None], 0.0), 0, _sum_combine)
        D = tl.where(causal, tl.exp(seg), 0.0)
        gam = tl.exp(tl.associative_scan(lgm, 0, _sum_combine))
        seg_o = tl.associative_scan(tl.where(ir[:, None] > tok[None, :], lgt[:, None], 0.0), 0, _sum_combine)
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
def _inv_unit_lower(A, N: tl.constexpr):
    """``(I + A)⁻¹`` for a strictly lower ``N×N`` ``A``, by forward substitution on rows:
    ``T[i] = e_i − Σ_{c<i} A[i, c] T[c]`` (rows ``c < i`` are final when row ``i`` is made)."""
    idx = tl.arange(0, N)
    At = tl.trans(A)  # column i of Aᵀ is row i of A, already indexed like T's rows
    Tm = tl.where(idx[:, None] == idx[None, :], 1.0, 0.0)
    for i in range(1, N):
        a = tl.reduce(tl.where(idx[None, :] == i, At, 0.0), 1, _sum_combine)
        row = tl.reduce(a[:, None] * Tm, 0, _sum_combine)
        Tm = tl.where(idx[:, None] == i, Tm - row[None, :], Tm)
    return Tm


@triton.jit
def _inv_unit_lower_blocked(A, LP: tl.constexpr, SUB: tl.constexpr, PREC: tl.constexpr):
    """``(I + A)⁻¹`` by blocks of ``SUB`` rows: the diagonal blocks ``T_pp`` by substitution
    (cut out and put back with exact 0/1 selector products), then with
    ``T_d = blockdiag(T_pp)`` and ``N = T_d A_off`` (strictly block-lower, ``N^P = 0``):
    ``(I + A)⁻¹ = Σ_m (−N)^m T_d``, summed by Horner's rule."""
    il = tl.arange(0, LP)
    isub = tl.arange(0, SUB)
    Td = tl.zeros([LP, LP], dtype=tl.float32)
    for p in tl.static_range(LP // SUB):
        E = tl.where(il[:, None] == p * SUB + isub[None, :], 1.0, 0.0)  # (LP, SUB)
        App = tl.dot(tl.trans(E), tl.dot(A, E, input_precision=PREC), input_precision=PREC)
        Tpp = _inv_unit_lower(App, SUB)
        Td += tl.dot(tl.dot(E, Tpp, input_precision=PREC), tl.trans(E), input_precision=PREC)
    A_off = tl.where(il[:, None] // SUB > il[None, :] // SUB, A, 0.0)
    Nm = tl.dot(Td, A_off, input_precision=PREC)
    Tm = Td
    for _ in tl.static_range(LP // SUB - 1):
        Tm = Td - tl.dot(Nm, Tm, input_precision=PREC)
    return Tm


@triton.jit
def _wy_inverse(K, beta, D, il, LP: tl.constexpr, SUB: tl.constexpr,
                BLOCKED: tl.constexpr, PREC: tl.constexpr):
    """``KKᵀ``, ``D ⊙ KKᵀ`` and ``T = (I + strict(diag(β) D ⊙ KKᵀ))⁻¹``."""
    KK = tl.dot(K, tl.trans(K), input_precision=PREC)
    DKK = D * KK
    A = tl.where(il[:, None] > il[None, :], beta[:, None] * DKK, 0.0)
    if BLOCKED:
        Tm = _inv_unit_lower_blocked(A, LP, SUB, PREC)
    else:
        Tm = _inv_unit_lower(A, LP)
    return KK, DKK, Tm


# ----------------------------------------------------------------------------------------
# forward
# ----------------------------------------------------------------------------------------


@triton.jit
def delta_fwd_prep_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr,
    m_ptr, n_ptr, qeff_ptr, ou_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, SUB: tl.constexpr, BLOCKED: tl.constexpr,
    HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
):
    """Grid ``(NC, B·H)``. Per chunk: ``M = Γ_L I − Kᵀdiag(d) Wk (BK,BK)``,
    ``N = Kᵀdiag(d) U (BK,BV)``, ``Qeff = diag(Γo) Q − Po Wk (CP,BK)``, ``Ou = Po U (CP,BV)``
    into float32 scratch laid out ``(B·H, NC, ·, ·)``."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    il, tok, sub, t_l, ok_l, ir, t_r, ok_r = _chunk_index(c, T, NH, C, LP, CP)
    K, V, beta, lgm, Q, lgt = _load_chunk(q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, b, h, T, H,
                                          DK, DV, tok, sub, t_l, ok_l, ir, t_r, ok_r,
                                          NH, LP, CP, BK, BV, HAS_DECAY)
    D, gam, d, gam_last, Do, gam_o = _decay_tables(lgm, lgt, il, tok, ir, LP, CP, HAS_DECAY)
    KK, DKK, Tm = _wy_inverse(K, beta, D, il, LP, SUB, BLOCKED, PREC)
    U = tl.dot(Tm, beta[:, None] * V, input_precision=PREC)
    Wk = tl.dot(Tm, (beta * gam)[:, None] * K, input_precision=PREC)
    Kd = d[:, None] * K
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    eye = tl.where(ik[:, None] == ik[None, :], 1.0, 0.0)
    M = gam_last * eye - tl.dot(tl.trans(Kd), Wk, input_precision=PREC)
    N = tl.dot(tl.trans(Kd), U, input_precision=PREC)
    Po = Do * tl.dot(Q, tl.trans(K), input_precision=PREC)
    Qeff = gam_o[:, None] * Q - tl.dot(Po, Wk, input_precision=PREC)
    Ou = tl.dot(Po, U, input_precision=PREC)
    chunk = bh.to(tl.int64) * NC + c
    tl.store(m_ptr + chunk * (BK * BK) + ik[:, None] * BK + ik[None, :], M)
    tl.store(n_ptr + chunk * (BK * BV) + ik[:, None] * BV + iv[None, :], N)
    tl.store(qeff_ptr + chunk * (CP * BK) + ir[:, None] * BK + ik[None, :], Qeff)
    tl.store(ou_ptr + chunk * (CP * BV) + ir[:, None] * BV + iv[None, :], Ou)


@triton.jit
def delta_fwd_state_kernel(
    h0_ptr, m_ptr, n_ptr, states_ptr, ht_ptr,
    DK, DV, NC,
    BK: tl.constexpr, BV: tl.constexpr, HAS_H0: tl.constexpr, PREC: tl.constexpr,
):
    """Grid ``(B·H,)``. ``states[c] = S_c`` (chunk start states, ``c = 0..NC``) by
    ``S_{c+1} = M_c S_c + N_c``; ``h_T = S_NC`` also in the output dtype."""
    bh = tl.program_id(0)
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    kv = ik[:, None] * BV + iv[None, :]
    user = bh.to(tl.int64) * DK * DV + ik[:, None] * DV + iv[None, :]
    user_mask = (ik[:, None] < DK) & (iv[None, :] < DV)
    if HAS_H0:
        S = tl.load(h0_ptr + user, mask=user_mask, other=0.0).to(tl.float32)
    else:
        S = tl.zeros([BK, BV], dtype=tl.float32)
    base = bh.to(tl.int64) * NC
    for c in range(NC):
        tl.store(states_ptr + (base + bh + c) * (BK * BV) + kv, S)
        M = tl.load(m_ptr + (base + c) * (BK * BK) + ik[:, None] * BK + ik[None, :])
        N = tl.load(n_ptr + (base + c) * (BK * BV) + kv)
        S = tl.dot(M, S, input_precision=PREC) + N
    tl.store(states_ptr + (base + bh + NC) * (BK * BV) + kv, S)
    tl.store(ht_ptr + user, S.to(ht_ptr.dtype.element_ty), mask=user_mask)


@triton.jit
def delta_fwd_out_kernel(
    qeff_ptr, ou_ptr, states_ptr, o_ptr,
    T, H, DV, NC,
    C: tl.constexpr, CP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    PREC: tl.constexpr,
):
    """Grid ``(NC, B·H)``. ``O = Qeff S_c + Ou`` for the chunk's tokens."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    ir = tl.arange(0, CP)
    chunk = bh.to(tl.int64) * NC + c
    S = tl.load(states_ptr + (chunk + bh) * (BK * BV) + ik[:, None] * BV + iv[None, :])
    Qeff = tl.load(qeff_ptr + chunk * (CP * BK) + ir[:, None] * BK + ik[None, :])
    Ou = tl.load(ou_ptr + chunk * (CP * BV) + ir[:, None] * BV + iv[None, :])
    O = tl.dot(Qeff, S, input_precision=PREC) + Ou
    t_r = c * C + ir
    ok_r = (ir < C) & (t_r < T)
    token = (b.to(tl.int64) * T + t_r) * H + h
    tl.store(o_ptr + token[:, None] * DV + iv[None, :], O.to(o_ptr.dtype.element_ty),
             mask=ok_r[:, None] & (iv[None, :] < DV))


# ----------------------------------------------------------------------------------------
# backward
# ----------------------------------------------------------------------------------------


@triton.jit
def delta_bwd_state_kernel(
    dht_ptr, do_ptr, m_ptr, qeff_ptr, dstates_ptr, dh0_ptr,
    T, H, DK, DV, NC,
    C: tl.constexpr, CP: tl.constexpr, BK: tl.constexpr, BV: tl.constexpr,
    HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr, PREC: tl.constexpr,
):
    """Grid ``(B·H,)``. Backwards over chunks: ``dstates[c] = ∂L/∂S_{c+1}`` and
    ``∂L/∂S_c = M_cᵀ ∂L/∂S_{c+1} + Qeff_cᵀ dO_c``; ``dh0 = ∂L/∂S_0``."""
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    ir = tl.arange(0, CP)
    kv = ik[:, None] * BV + iv[None, :]
    user = bh.to(tl.int64) * DK * DV + ik[:, None] * DV + iv[None, :]
    user_mask = (ik[:, None] < DK) & (iv[None, :] < DV)
    if HAS_DHT:
        dS = tl.load(dht_ptr + user, mask=user_mask, other=0.0).to(tl.float32)
    else:
        dS = tl.zeros([BK, BV], dtype=tl.float32)
    base = bh.to(tl.int64) * NC
    for i in range(NC):
        c = NC - 1 - i
        tl.store(dstates_ptr + (base + c) * (BK * BV) + kv, dS)
        # M_cᵀ straight from memory: element (a, b) of Mᵀ is M[b, a].
        Mt = tl.load(m_ptr + (base + c) * (BK * BK) + ik[None, :] * BK + ik[:, None])
        Qeff = tl.load(qeff_ptr + (base + c) * (CP * BK) + ir[:, None] * BK + ik[None, :])
        t_r = c * C + ir
        ok_r = (ir < C) & (t_r < T)
        token = (b.to(tl.int64) * T + t_r) * H + h
        dO = tl.load(do_ptr + token[:, None] * DV + iv[None, :],
                     mask=ok_r[:, None] & (iv[None, :] < DV), other=0.0).to(tl.float32)
        dS = tl.dot(Mt, dS, input_precision=PREC) + tl.dot(tl.trans(Qeff), dO,
                                                           input_precision=PREC)
    if HAS_H0:
        tl.store(dh0_ptr + user, dS.to(dh0_ptr.dtype.element_ty), mask=user_mask)


@triton.jit
def delta_bwd_grads_kernel(
    q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, states_ptr, dstates_ptr, do_ptr,
    dq_ptr, dk_ptr, dv_ptr, dbeta_ptr, dlg_ptr,
    T, H, DK, DV, NC,
    NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
    BK: tl.constexpr, BV: tl.constexpr, SUB: tl.constexpr, BLOCKED: tl.constexpr,
    HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
):
    """Grid ``(NC, B·H)``. Recomputes the chunk from its start state ``S = states[c]`` and,
    with ``dO`` and ``dS' = dstates[c]``, writes ``dq, dk, dv, dβ`` and ``d log γ``.

    With ``R = diag(β)(V − diag(Γ) K S)`` and ``W = T R``::

        dW = Poᵀ dO + diag(d) K dS'            dR = Tᵀ dW        dA = −strict(dR Wᵀ)
        dQ = diag(Γo) dO Sᵀ + (Do ⊙ dO Wᵀ) K    dV = diag(β) dR
        dK = (Do ⊙ dO Wᵀ)ᵀ Q + diag(d) W dS'ᵀ − diag(βΓ) dR Sᵀ + Ã K + Ãᵀ K,  Ã = diag(β)(dA ⊙ D)
        dβ = rowsum((V − diag(Γ) K S) ⊙ dR) + rowsum(dA ⊙ D ⊙ K Kᵀ)

    and ``d log γ`` collects ``∂/∂ log γ_l`` of every decay factor whose segment covers
    micro-step ``l`` (rectangle sums of ``dD ⊙ D``, built with cumulative sums)."""
    c = tl.program_id(0)
    bh = tl.program_id(1)
    b = bh // H
    h = bh % H
    il, tok, sub, t_l, ok_l, ir, t_r, ok_r = _chunk_index(c, T, NH, C, LP, CP)
    K, V, beta, lgm, Q, lgt = _load_chunk(q_ptr, k_ptr, v_ptr, beta_ptr, lg_ptr, b, h, T, H,
                                          DK, DV, tok, sub, t_l, ok_l, ir, t_r, ok_r,
                                          NH, LP, CP, BK, BV, HAS_DECAY)
    ik = tl.arange(0, BK)
    iv = tl.arange(0, BV)
    kv = ik[:, None] * BV + iv[None, :]
    chunk = bh.to(tl.int64) * NC + c
    S = tl.load(states_ptr + (chunk + bh) * (BK * BV) + kv)
    dSn = tl.load(dstates_ptr + chunk * (BK * BV) + kv)
    b64 = b.to(tl.int64)
    token = (b64 * T + t_r) * H + h
    dO = tl.load(do_ptr + token[:, None] * DV + iv[None, :],
                 mask=ok_r[:, None] & (iv[None, :] < DV), other=0.0).to(tl.float32)

    D, gam, d, gam_last, Do, gam_o = _decay_tables(lgm, lgt, il, tok, ir, LP, CP, HAS_DECAY)
    KK, DKK, Tm = _wy_inverse(K, beta, D, il, LP, SUB, BLOCKED, PREC)
    strict = il[:, None] > il[None, :]

    KS = tl.dot(K, S, input_precision=PREC)  # (LP, BV)
    Vr = V - gam[:, None] * KS  # R = diag(β) Vr
    W = tl.dot(Tm, beta[:, None] * Vr, input_precision=PREC)
    QK = tl.dot(Q, tl.trans(K), input_precision=PREC)  # (CP, LP)
    Po = Do * QK
    dOW = tl.dot(dO, tl.trans(W), input_precision=PREC)  # (CP, LP)
    Pd = Do * dOW
    KdS = tl.dot(K, dSn, input_precision=PREC)  # (LP, BV)
    dW = tl.dot(tl.trans(Po), dO, input_precision=PREC) + d[:, None] * KdS
    dR = tl.dot(tl.trans(Tm), dW, input_precision=PREC)
    dA = tl.where(strict, -tl.dot(dR, tl.trans(W), input_precision=PREC), 0.0)
    At = beta[:, None] * dA * D

    dK = tl.dot(tl.trans(Pd), Q, input_precision=PREC)
    dK += d[:, None] * tl.dot(W, tl.trans(dSn), input_precision=PREC)
    dK -= (beta * gam)[:, None] * tl.dot(dR, tl.trans(S), input_precision=PREC)
    dK += tl.dot(At, K, input_precision=PREC) + tl.dot(tl.trans(At), K, input_precision=PREC)
    dV = beta[:, None] * dR
    dbeta = tl.reduce(Vr * dR, 1, _sum_combine) + tl.reduce(dA * DKK, 1, _sum_combine)
    dQ = gam_o[:, None] * tl.dot(dO, tl.trans(S), input_precision=PREC)
    dQ += tl.dot(Pd, K, input_precision=PREC)

    micro = ((b64 * T + t_l) * NH + sub) * H + h
    tl.store(dq_ptr + token[:, None] * DK + ik[None, :], dQ.to(dq_ptr.dtype.element_ty),
             mask=ok_r[:, None] & (ik[None, :] < DK))
    tl.store(dk_ptr + micro[:, None] * DK + ik[None, :], dK.to(dk_ptr.dtype.element_ty),
             mask=ok_l[:, None] & (ik[None, :] < DK))
    tl.store(dv_ptr + micro[:, None] * DV + iv[None, :], dV.to(dv_ptr.dtype.element_ty),
             mask=ok_l[:, None] & (iv[None, :] < DV))
    tl.store(dbeta_ptr + micro, dbeta.to(dbeta_ptr.dtype.element_ty), mask=ok_l)

    if HAS_DECAY:
        # z = (∂L/∂factor)·factor for every decay factor; ∂L/∂log γ_l sums the z whose
        # segment contains l. D_ij covers (j, i]; Γ_i covers [0, i]; d_j covers (j, L-1];
        # Γ_L covers everything; Do_rj and Γo_r cover tokens (tok(j), r] and [0, r].
        Z = At * KK
        z_gam = -beta * gam * tl.reduce(KS * dR, 1, _sum_combine)
        z_d = d * tl.reduce(KdS * W, 1, _sum_combine)
        z_last = gam_last * tl.reduce(tl.reduce(S * dSn, 1, _sum_combine), 0, _sum_combine)
        Zo = dOW * Po
        z_gam_o = gam_o * tl.reduce(tl.dot(Q, S, input_precision=PREC) * dO, 1, _sum_combine)
        on_or_after = il[:, None] >= il[None, :]  # [i, l]: i ≥ l
        left = tl.associative_scan(Z, 1, _sum_combine) - Z  # [i, l] = Σ_{j<l} Z[i, j]
        g = tl.reduce(tl.where(on_or_after, left + z_gam[:, None], 0.0), 0, _sum_combine)
        g += tl.associative_scan(z_d, 0, _sum_combine) - z_d + z_last
        left_o = tl.associative_scan(Zo, 1, _sum_combine) - Zo
        g += tl.reduce(tl.where(ir[:, None] >= tok[None, :], left_o + z_gam_o[:, None], 0.0),
                       0, _sum_combine)
        # log γ of a token acts on its first micro-step only.
        tl.store(dlg_ptr + (b64 * T + t_l) * H + h, g.to(dlg_ptr.dtype.element_ty),
                 mask=ok_l & (sub == 0))


# ----------------------------------------------------------------------------------------
# launch metadata (pure Python; shared by the PyTorch and JAX launchers)
# ----------------------------------------------------------------------------------------

SUB = 16
"""Rows per diagonal block of the blocked triangular inverse (``tl.dot`` needs ≥ 16)."""

MAX_NH = 64
"""Largest ``nh`` served (a chunk must hold at least one token's micro-steps)."""

MAX_HEAD_DIM = 128
"""Largest ``d_k`` / ``d_v`` served (register budget of the per-chunk tiles)."""

DEFAULT_MICRO_CHUNK = 32
"""Micro-steps per chunk ``LP`` when not overridden (a power of two, 16..64)."""

DOT_PRECISION = "ieee"
"""``tl.dot`` precision for float32 operands: exact float32 products, no TF32."""

LOG_GAMMA_FLOOR = -1.0e30
"""``log γ`` is floored here on load (mirrors the literal in ``_load_chunk``)."""


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def block_size(n: int) -> int:
    """Padded tile width for a head dimension: a power of two, at least 16."""
    return max(16, _next_pow2(n))


def launch_config(nh: int, dk: int, dv: int, micro_chunk: int = 0, blocked: bool | None = None):
    """Compile-time parameters of every kernel of this op.

    ``micro_chunk`` (``LP``, micro-steps per chunk; 0 = default) must be a power of two in
    ``[16, 64]`` and at least ``nh``. Returns a dict with ``NH, C, LP, CP, BK, BV, SUB,
    BLOCKED, PREC`` (``C`` tokens per chunk, ``CP`` its padded row count) and ``num_warps``.
    Nothing depends on ``T``.
    """
    if not 1 <= nh <= MAX_NH:
        raise ValueError(f"nh must be in [1, {MAX_NH}]; got {nh}")
    lp = micro_chunk or max(DEFAULT_MICRO_CHUNK, _next_pow2(nh))
    if lp not in (16, 32, 64) or lp < nh:
        raise ValueError(f"micro_chunk must be 16, 32 or 64 and >= nh ({nh}); got {lp}")
    C = lp // nh
    bk, bv = block_size(dk), block_size(dv)
    if blocked is None:
        blocked = lp > 32
    return {
        "NH": nh,
        "C": C,
        "LP": lp,
        "CP": max(16, _next_pow2(C)),
        "BK": bk,
        "BV": bv,
        "SUB": SUB,
        "BLOCKED": bool(blocked) and lp > SUB,
        "PREC": DOT_PRECISION,
        "num_warps": 4 if max(bk, bv) * lp <= 2048 else 8,
    }


def n_chunks(T: int, cfg) -> int:
    """Number of chunks for a sequence of ``T`` tokens."""
    return -(-T // cfg["C"])


def scratch_shapes(BH: int, T: int, cfg):
    """Float32 scratch shapes: ``states (BH, NC+1, BK, BV)``, ``M (BH, NC, BK, BK)``,
    ``N (BH, NC, BK, BV)``, ``Qeff (BH, NC, CP, BK)``, ``Ou (BH, NC, CP, BV)``;
    ``dstates`` has the shape of ``N``."""
    nc = n_chunks(T, cfg)
    bk, bv, cp = cfg["BK"], cfg["BV"], cfg["CP"]
    return {
        "states": (BH, nc + 1, bk, bv),
        "M": (BH, nc, bk, bk),
        "N": (BH, nc, bk, bv),
        "Qeff": (BH, nc, cp, bk),
        "Ou": (BH, nc, cp, bv),
    }


def grid_chunks(T: int, BH: int, cfg):
    """Grid of the per-chunk kernels: ``(NC, B·H)``."""
    return (n_chunks(T, cfg), BH)


def grid_rows(BH: int):
    """Grid of the serial-over-chunks kernels: one program per ``(b, h)``."""
    return (BH,)


def kernel_constexprs(cfg, *names):
    """The subset of ``cfg`` a kernel takes as constexpr keyword arguments."""
    return {n: cfg[n] for n in names}
