"""Block affine scan ``H_t = A_t H_{t-1} + B_t``: fused Triton forward and backward kernels.

Shapes (row-major, contiguous): ``A (B, T, n, k, k)``, ``Bm (B, T, n, k, v)``; outputs
``P (B, T, n, k, k)`` (``P_t = A_t ⋯ A_1``) and ``Z (B, T, n, k, v)`` (zero-start solution),
so ``H_t = P_t H_0 + Z_t``. A *pair* is one ``(batch, block)``; pair ``q = b·n + blk``.

Parallel in T by segments (chunked scan with carry): two launches when ``nseg > 1``, one
otherwise.

1. ``matrix_affine_scan_fwd_kernel`` with ``COMPOSITE=True``: one program per (pair tile, segment) walks
   its segment from ``[I | 0]`` and writes the segment composite ``(P_seg, Z_seg)``.
2. ``matrix_affine_scan_fwd_kernel`` with ``COMPOSITE=False``: each program first folds the composites of
   the segments before its own (``X ← P_s X + [0 | Z_s]``: the carry pass, done where it is
   needed instead of in a launch of its own), then walks its segment again, writing
   ``P_t, Z_t``.

A segment walk is sequential in registers (fp32); a ``k×k`` block is a ``[k, k]`` slice of a
``[LP, k, k]`` tile (``LP`` pairs per program) and products are broadcast-multiply-sums (``tl.dot``
needs dims ≥ 16 on GPU and would use TF32). The next step's tiles are loaded before the current
step is computed, so global-load latency overlaps the arithmetic. The chain of dependent steps is
``2·seg_len + nseg`` instead of ``T``; :func:`mingru_kernels.launch.matrix_affine_scan.segment_plan` picks ``seg_len ≈ sqrt(T/2)``.

Backward (adjoint, walked right to left with the same two phases): with
``U_t = A_tᵀ [G_t | GP_t]`` (the adjoint passed to step ``t-1``),
``G_t = dZ_t + U^G_{t+1}``, ``GP_t = dP_t + U^P_{t+1}``,
``dA_t = G_t Z_{t-1}ᵀ + GP_t P_{t-1}ᵀ`` (``Z_0 = 0``, ``P_0 = I``), ``dB_t = G_t``. The segment
composite is ``(Ψ = A_sᵀ ⋯ A_eᵀ, U_loc)``; the backward reads only ``A``, the saved ``P, Z`` and
the incoming gradients.

Scratch: the composites, fp32 ``(npair, nseg, k, k)`` and ``(npair, nseg, k, w)`` — one
``k×k`` matrix per SEGMENT, never per token.

Framework-free: imports triton only. The launch metadata the torch and JAX launchers share
(sizes, segment plan, pairs per program) is :mod:`mingru_kernels.launch.matrix_affine_scan`.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["matrix_affine_scan_bwd_kernel", "matrix_affine_scan_fwd_kernel"]

# ----------------------------------------------------------------------------- helpers


@triton.jit
def _row_base(q, n, T, t0, row, ELEMS: tl.constexpr):
    """Offset of token ``t0`` of pair ``q`` in ``(B, T, ·)`` rows ``row`` elements apart whose
    block ``q % n`` holds ``ELEMS`` elements (int64): e.g. one block's columns of a
    projection's output."""
    qq = q.to(tl.int64)
    b = qq // n
    return (b * T + t0) * row + (qq - b * n) * ELEMS


@triton.jit
def _pair_base(q, n, T, t0, ELEMS: tl.constexpr):
    """Offset of token ``t0`` of pair ``q`` in a ``(B, T, n, ELEMS)`` tensor (int64)."""
    return _row_base(q, n, T, t0, n * ELEMS, ELEMS)


@triton.jit
def _grid(R: tl.constexpr, C: tl.constexpr, ROW_STRIDE: tl.constexpr):
    """``[1, R, C]`` offsets ``r·ROW_STRIDE + c`` of a row-major ``R × C`` block."""
    r = tl.arange(0, R)[:, None]
    c = tl.arange(0, C)[None, :]
    return (r * ROW_STRIDE + c)[None, :, :]


@triton.jit
def _eye(LP: tl.constexpr, K: tl.constexpr):
    r = tl.arange(0, K)
    return tl.zeros([LP, K, K], tl.float32) + (r[:, None] == r[None, :]).to(tl.float32)[None]


@triton.jit
def _mm(A, X):
    """Batched ``A @ X``: ``[LP, K, K] × [LP, K, W] → [LP, K, W]``."""
    return tl.sum(A[:, :, :, None] * X[:, None, :, :], axis=2)


@triton.jit
def _mtm(A, X):
    """Batched ``Aᵀ @ X``: ``[LP, K, K] × [LP, K, W] → [LP, K, W]``."""
    return tl.sum(A[:, :, :, None] * X[:, :, None, :], axis=1)


@triton.jit
def _mmt(X, Y):
    """Batched ``X @ Yᵀ``: ``[LP, K, W] × [LP, J, W] → [LP, K, J]``."""
    return tl.sum(X[:, :, None, :] * Y[:, None, :, :], axis=3)


@triton.jit
def _both(mask, cond):
    """``mask & cond`` for a scalar ``cond`` (a select: the interpreter mistypes ``&`` here)."""
    return tl.where(cond, mask, False)


@triton.jit
def _ld(ptr, offs, mask):
    return tl.load(ptr + offs, mask=mask, other=0.0).to(tl.float32)


@triton.jit
def _fold(m_ptr, c_ptr, X, qq, seg, nseg, live,
          K: tl.constexpr, W: tl.constexpr, C_STRIDE: tl.constexpr, C_COL: tl.constexpr,
          ADD_C: tl.constexpr, REVERSE: tl.constexpr):
    """The state ``X [LP, K, W]`` carried into segment ``seg``: fold the composites of the
    segments before it, ``X ← M_s X (+ C_s)`` for ``s = 0 … seg-1`` (or, ``REVERSE``, after
    it, ``s = nseg-1 … seg+1``). ``C_s`` is columns ``C_COL … C_COL+W`` of a ``K × C_STRIDE``
    block. This is the carry pass, done by each output program for its own segment."""
    m_off = qq * nseg * (K * K) + _grid(K, K, K)
    c_off = qq * nseg * (K * C_STRIDE) + C_COL + _grid(K, W, C_STRIDE)
    if REVERSE:
        count = nseg - 1 - seg
        s = nseg - 1
        ds = -1
    else:
        count = seg
        s = seg * 0
        ds = 1
    M = _ld(m_ptr, m_off + s * (K * K), _both(live, count > 0))
    if ADD_C:
        C = _ld(c_ptr, c_off + s * (K * C_STRIDE), _both(live, count > 0))
    else:
        C = X  # unused
    for i in range(count):
        more = _both(live, i + 1 < count)
        M_next = _ld(m_ptr, m_off + (s + ds) * (K * K), more)
        if ADD_C:
            C_next = _ld(c_ptr, c_off + (s + ds) * (K * C_STRIDE), more)
            X = _mm(M, X) + C
            C = C_next
        else:
            X = _mm(M, X)
        M = M_next
        s += ds
    return X


# ----------------------------------------------------------------------------- forward


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def matrix_affine_scan_fwd_kernel(
    a_ptr, b_ptr, p_ptr, z_ptr,  # inputs (B,T,n,k,k), (B,T,n,k,v); outputs alike
    m_ptr, c_ptr,  # fp32 segment composites (npair, nseg, k, k) and (npair, nseg, k, v)
    npair, n, T, seg_len, nseg,
    K: tl.constexpr, V: tl.constexpr, LP: tl.constexpr, COMPOSITE: tl.constexpr,
):
    """Walk one segment of ``LP`` pairs: ``P ← A_t P``, ``Z ← A_t Z + B_t``.

    ``COMPOSITE``: start from ``[I | 0]`` and write only the segment's composite. Otherwise
    start from the state carried in (the composites of segments ``0 … seg-1`` folded onto
    ``[I | 0]``) and write ``P_t, Z_t`` in the output dtype.
    """
    seg = tl.program_id(1)
    q = tl.program_id(0) * LP + tl.arange(0, LP)
    live = (q < npair)[:, None, None]
    qq = q.to(tl.int64)[:, None, None]
    t0 = seg * seg_len
    steps = tl.minimum(seg_len, T - t0)
    a_off = _pair_base(q, n, T, t0, K * K)[:, None, None] + _grid(K, K, K)
    b_off = _pair_base(q, n, T, t0, K * V)[:, None, None] + _grid(K, V, V)
    a_step = n * (K * K)
    b_step = n * (K * V)

    P = _eye(LP, K)
    Z = tl.zeros([LP, K, V], tl.float32)
    if not COMPOSITE:
        P = _fold(m_ptr, c_ptr, P, qq, seg, nseg, live, K, K, V, 0, False, False)
        Z = _fold(m_ptr, c_ptr, Z, qq, seg, nseg, live, K, V, V, 0, True, False)

    A = _ld(a_ptr, a_off, live)
    Bt = _ld(b_ptr, b_off, live)
    for i in range(steps):
        # prefetch step i+1 while step i computes
        more = _both(live, i + 1 < steps)
        A_next = _ld(a_ptr, a_off + a_step, more)
        B_next = _ld(b_ptr, b_off + b_step, more)
        P = _mm(A, P)
        Z = _mm(A, Z) + Bt
        if not COMPOSITE:
            tl.store(p_ptr + a_off, P.to(p_ptr.dtype.element_ty), mask=live)
            tl.store(z_ptr + b_off, Z.to(z_ptr.dtype.element_ty), mask=live)
        a_off += a_step
        b_off += b_step
        A = A_next
        Bt = B_next

    if COMPOSITE:
        s_idx = qq * nseg + seg
        tl.store(m_ptr + s_idx * (K * K) + _grid(K, K, K), P, mask=live)
        tl.store(c_ptr + s_idx * (K * V) + _grid(K, V, V), Z, mask=live)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _bwd_loads(a_ptr, p_ptr, z_ptr, dp_ptr, dz_ptr, a_off, b_off, a_step, b_step, live, t,
               LP: tl.constexpr, K: tl.constexpr, HAS_DP: tl.constexpr, NEED_PREV: tl.constexpr):
    """The tiles backward step ``t`` reads: ``A_t, dZ_t, dP_t, Z_{t-1}, P_{t-1}``."""
    A = _ld(a_ptr, a_off, live)
    dZ = _ld(dz_ptr, b_off, live)
    if HAS_DP:
        dP = _ld(dp_ptr, a_off, live)
    else:
        dP = tl.zeros_like(A)
    if NEED_PREV:
        Zp = _ld(z_ptr, b_off - b_step, _both(live, t > 0))
    else:
        Zp = tl.zeros_like(dZ)
    if NEED_PREV and HAS_DP:  # P_{t-1} only meets the adjoint of P
        Pp = _ld(p_ptr, a_off - a_step, _both(live, t > 0))
        Pp = tl.where(t == 0, _eye(LP, K), Pp)
    else:
        Pp = tl.zeros_like(A)
    return A, dZ, dP, Zp, Pp


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def matrix_affine_scan_bwd_kernel(
    a_ptr, p_ptr, z_ptr,  # saved forward inputs/outputs
    dp_ptr, dz_ptr,  # incoming gradients (dp_ptr unused unless HAS_DP)
    da_ptr, db_ptr,  # outputs, in the dtype of A / Bm
    m_ptr, c_ptr,  # fp32 segment composites (npair, nseg, k, k) and (npair, nseg, k, v+k)
    npair, n, T, seg_len, nseg,
    K: tl.constexpr, V: tl.constexpr, LP: tl.constexpr,
    HAS_DP: tl.constexpr, COMPOSITE: tl.constexpr,
):
    """Walk one segment right to left carrying ``U = [U^G (k×v) | U^P (k×k)]``.

    ``COMPOSITE``: start from zero, also carry ``Ψ`` (from ``I``), write ``(Ψ, U_loc)``.
    Otherwise start from the adjoint carried in (composites of segments ``nseg-1 … seg+1``
    folded onto zero) and write ``dA_t, dB_t``.
    """
    W: tl.constexpr = V + K
    seg = tl.program_id(1)
    q = tl.program_id(0) * LP + tl.arange(0, LP)
    live = (q < npair)[:, None, None]
    qq = q.to(tl.int64)[:, None, None]
    t0 = seg * seg_len
    steps = tl.minimum(seg_len, T - t0)
    t_last = t0 + steps - 1
    a_off = _pair_base(q, n, T, t_last, K * K)[:, None, None] + _grid(K, K, K)
    b_off = _pair_base(q, n, T, t_last, K * V)[:, None, None] + _grid(K, V, V)
    a_step = n * (K * K)
    b_step = n * (K * V)

    UG = tl.zeros([LP, K, V], tl.float32)
    UP = tl.zeros([LP, K, K], tl.float32)
    if COMPOSITE:
        Psi = _eye(LP, K)
    else:
        UG = _fold(m_ptr, c_ptr, UG, qq, seg, nseg, live, K, V, W, 0, True, True)
        if HAS_DP:
            UP = _fold(m_ptr, c_ptr, UP, qq, seg, nseg, live, K, K, W, V, True, True)
        Psi = UP  # unused

    NEED_PREV: tl.constexpr = not COMPOSITE
    A, dZ, dP, Zp, Pp = _bwd_loads(a_ptr, p_ptr, z_ptr, dp_ptr, dz_ptr, a_off, b_off,
                                   a_step, b_step, live, t_last, LP, K, HAS_DP, NEED_PREV)
    for i in range(steps):
        t = t_last - i
        more = _both(live, i + 1 < steps)
        A_n, dZ_n, dP_n, Zp_n, Pp_n = _bwd_loads(
            a_ptr, p_ptr, z_ptr, dp_ptr, dz_ptr, a_off - a_step, b_off - b_step,
            a_step, b_step, more, t - 1, LP, K, HAS_DP, NEED_PREV)
        G = dZ + UG
        if HAS_DP:
            GP = dP + UP
        if not COMPOSITE:
            dA = _mmt(G, Zp)
            if HAS_DP:
                dA += _mmt(GP, Pp)
            tl.store(da_ptr + a_off, dA.to(da_ptr.dtype.element_ty), mask=live)
            tl.store(db_ptr + b_off, G.to(db_ptr.dtype.element_ty), mask=live)
        UG = _mtm(A, G)
        if HAS_DP:
            UP = _mtm(A, GP)
        if COMPOSITE:
            Psi = _mtm(A, Psi)
        a_off -= a_step
        b_off -= b_step
        A = A_n
        dZ = dZ_n
        dP = dP_n
        Zp = Zp_n
        Pp = Pp_n

    if COMPOSITE:
        s_idx = qq * nseg + seg
        tl.store(m_ptr + s_idx * (K * K) + _grid(K, K, K), Psi, mask=live)
        c_off = s_idx * (K * W)
        tl.store(c_ptr + c_off + _grid(K, V, W), UG, mask=live)
        tl.store(c_ptr + c_off + V + _grid(K, K, W), UP, mask=live)
