"""Fused rotation/Givens recurrence: Triton forward and backward kernels.

Per pair (``batch, block``) and token ``t``::

    M_t = γ_t · G_{R-1} ⋯ G_0 · diag(scale_t),        h_t = M_t h_{t-1} + b_t

Round ``r`` rotates planes ``i = (r % 2 + 2m) % k``, ``j = (i + 1) % k`` by
``θ = theta[..., r, m]``: ``(v_i, v_j) ← (c v_i − s v_j, s v_i + c v_j)``. Shapes (contiguous):
``theta (B, T, n, R, k/2)``, ``b, scale (B, T, n, k)``, ``log_gamma (B, T, n)``,
``h0 (B, n, k)``, ``h (B, T, n, k)``.

The rotations act on the state vector directly; cos/sin are computed in-kernel and no per-token
``k×k`` matrix ever exists. A state is held as its even rows ``x[m] = v[2m]`` and odd rows
``y[m] = v[2m+1]`` (``[LP, W, k/2]`` tiles, ``W`` columns): even rounds rotate ``(x_m, y_m)``,
odd rounds ``(y_m, x_{m+1})`` (a cyclic roll of ``x``, done as a tiny select-sum).

Parallel in T exactly like :mod:`mingru_kernels.matrix_affine_scan` (segments; each output program
folds the composites of the segments before its own): the composite pass applies each token's
transition to the ``k`` identity columns, so a segment's product is composed once per segment,
in registers, and written as one ``k×k`` matrix per segment.

Backward. With ``g_t = dh_t + M_{t+1}ᵀ g_{t+1}`` and ``U_t = M_tᵀ g_t``:
``db_t = g_t``; ``ā = γ_t g_t`` then, for ``r = R-1 … 0``, the pre-rotation values ``u^r`` are
recomputed FORWARD from ``u^0 = scale_t ⊙ h_{t-1}`` (``h_{t-1}`` read from the saved output,
never reconstructed by inverting anything), ``dθ = ā_j (c u_i − s u_j) − ā_i (s u_i + c u_j)`` and
``ā ← G_rᵀ ā``; with ``ā`` now the adjoint of ``u^0``: ``dscale_t = ā ⊙ h_{t-1}``,
``dlog γ_t = ⟨ā, u^0⟩`` (equal to ``γ_t⟨g_t, G_{R-1}⋯G_0 u^0⟩``: rotations preserve inner
products) and ``U_t = scale_t ⊙ ā``; ``dh0 = U_0``.

Strided inputs and the gated cell (``GATED``). ``theta`` and ``b`` (and, gated, ``z``) are read
``th_row`` / ``in_row`` elements apart per token (``(B, T, ·)`` rows: the columns of one
projection ``k``, never copied out), while ``h`` and ``scale`` are contiguous
``(B, T, n, k)``; ``dh`` is read through its ``(B, T, n·k)`` strides (the gradient of a sum
arrives expanded, stride 0, and is not copied). ``GATED`` forms the input term in the kernel,
``b_t = σ(z_t) ⊙ h̃_t`` from the pre-activations ``z`` (``z_ptr``) and ``h̃`` (``b_ptr``); its
backward writes ``dh̃ = g σ(z)`` (``db_ptr``) and ``dz = g h̃ σ(z)(1 − σ(z))`` (``dz_ptr``),
and ``dθ`` with ``theta``'s strides, so the whole gradient of ``k`` is written in place by one
kernel.

Framework-free: imports triton only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels._givens_inputs import (
    _coef_loads,
    _input_term,
    _scale_offsets,
    _snap_unit,
    _store_input_grad,
)
from mingru_kernels.matrix_affine_scan import _both, _fold, _grid, _ld, _pair_base, _row_base

__all__ = ["givens_recurrence_bwd_kernel", "givens_recurrence_fwd_kernel"]

# ----------------------------------------------------------------------------- helpers


@triton.jit
def _roll(x, SHIFT: tl.constexpr, K2: tl.constexpr):
    """``out[..., m] = x[..., (m + SHIFT) % K2]`` along the last axis of a 3-D tile."""
    if K2 == 1:
        out = x
    else:
        m = tl.arange(0, K2)
        sel = m[None, :] == (m[:, None] + SHIFT) % K2
        out = tl.sum(tl.where(sel[None, None, :, :], x[:, :, None, :], 0.0), axis=3)
    return out


@triton.jit
def _rotate(x, y, c, s, ODD: tl.constexpr, K2: tl.constexpr):
    """One brick-wall round on the (even rows, odd rows) halves of the state."""
    if ODD:
        xs = _roll(x, 1, K2)  # xs[m] = x[m+1]: the j-partner of y[m]
        y_new = c * y - s * xs
        x_new = _roll(s * y + c * xs, K2 - 1, K2)
    else:
        x_new = c * x - s * y
        y_new = s * x + c * y
    return x_new, y_new


@triton.jit
def _dtheta(ux, uy, ax, ay, c, s, ODD: tl.constexpr, K2: tl.constexpr):
    """``∂L/∂θ`` of one round from the pre-rotation state ``u`` and the adjoint ``a`` after it."""
    if ODD:
        ui = uy
        uj = _roll(ux, 1, K2)
        ai = ay
        aj = _roll(ax, 1, K2)
    else:
        ui = ux
        uj = uy
        ai = ax
        aj = ay
    return aj * (c * ui - s * uj) - ai * (s * ui + c * uj)


@triton.jit
def _pick(tile, r: tl.constexpr, RP: tl.constexpr):
    """Round ``r`` of a ``[LP, RP, K2]`` tile, as ``[LP, 1, K2]``."""
    ridx = tl.arange(0, RP)[None, :, None]
    return tl.sum(tl.where(ridx == r, tile, 0.0), axis=1)[:, None, :]


@triton.jit
def _transition(x, y, cs, sn, sx, sy, gam, R: tl.constexpr, RP: tl.constexpr,
                K2: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr):
    """``(x, y) ← M_t (x, y)`` for every column: scale, rounds 0…R-1, then γ."""
    if HAS_SCALE:
        x = x * sx
        y = y * sy
    for r in tl.static_range(R):
        x, y = _rotate(x, y, _pick(cs, r, RP), _pick(sn, r, RP), r % 2 == 1, K2)
    if HAS_GAMMA:
        x = x * gam
        y = y * gam
    return x, y


@triton.jit
def _transition_t(x, y, cs, sn, sx, sy, gam, R: tl.constexpr, RP: tl.constexpr,
                  K2: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr):
    """``(x, y) ← M_tᵀ (x, y)``: γ, rounds R-1…0 by ``−θ``, then scale."""
    if HAS_GAMMA:
        x = x * gam
        y = y * gam
    for r in tl.static_range(R - 1, -1, -1):
        x, y = _rotate(x, y, _pick(cs, r, RP), -_pick(sn, r, RP), r % 2 == 1, K2)
    if HAS_SCALE:
        x = x * sx
        y = y * sy
    return x, y


@triton.jit
def _identity_halves(LP: tl.constexpr, K2: tl.constexpr):
    """The ``k`` identity columns in (even rows, odd rows) form: ``[LP, k, K2]`` each."""
    col = tl.arange(0, 2 * K2)[None, :, None]
    m2 = 2 * tl.arange(0, K2)[None, None, :]
    zero = tl.zeros([LP, 2 * K2, K2], tl.float32)
    return zero + (col == m2).to(tl.float32), zero + (col == m2 + 1).to(tl.float32)


@triton.jit
def _halves(X, K2: tl.constexpr):
    """A standard ``[LP, k, 1]`` column as its (even rows, odd rows) halves ``[LP, 1, K2]``."""
    rows = tl.arange(0, 2 * K2)[None, :, None]
    m2 = 2 * tl.arange(0, K2)[None, None, :]
    x = tl.sum(tl.where(rows == m2, X, 0.0), axis=1)[:, None, :]
    y = tl.sum(tl.where(rows == m2 + 1, X, 0.0), axis=1)[:, None, :]
    return x, y


@triton.jit
def _store_composite(m_ptr, c_ptr, s_idx, Mx, My, vx, vy, live, K2: tl.constexpr):
    """Write a segment composite: ``M (k×k)`` row-major from column halves, ``C (k×1)``."""
    K: tl.constexpr = 2 * K2
    m2 = 2 * tl.arange(0, K2)[None, None, :]
    col = tl.arange(0, K)[None, :, None]
    tl.store(m_ptr + s_idx * (K * K) + m2 * K + col, Mx, mask=live)
    tl.store(m_ptr + s_idx * (K * K) + (m2 + 1) * K + col, My, mask=live)
    tl.store(c_ptr + s_idx * K + m2, vx, mask=live)
    tl.store(c_ptr + s_idx * K + m2 + 1, vy, mask=live)


# ----------------------------------------------------------------------------- forward


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def givens_recurrence_fwd_kernel(
    th_ptr, b_ptr, z_ptr, s_ptr, g_ptr,  # theta, b (gated: h̃), z (gated), scale, log_gamma
    snap_ptr,  # ROTATION with SNAP: K_j per block (else a dummy)
    h0_ptr, h_ptr,  # initial state (B, n, k); output (B, T, n, k)
    m_ptr, c_ptr,  # fp32 segment composites (npair, nseg, k, k) and (npair, nseg, k)
    npair, n, T, seg_len, nseg, th_row, in_row,
    K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr,
    GATED: tl.constexpr = False, ROTATION: tl.constexpr = False, SNAP: tl.constexpr = False,
):
    """Walk one segment of ``LP`` pairs. ``COMPOSITE``: from ``h = 0`` and ``M = I``, write the
    segment's ``(M_seg, h_seg)``. Otherwise from the state carried in (``h0`` with the
    composites of segments ``0 … seg-1`` folded on), write ``h_t``. ``theta`` and ``b`` /
    ``z`` rows are ``th_row`` / ``in_row`` elements apart (see the module docstring)."""
    K: tl.constexpr = 2 * K2
    seg = tl.program_id(1)
    q = tl.program_id(0) * LP + tl.arange(0, LP)
    live = (q < npair)[:, None, None]
    qq = q.to(tl.int64)[:, None, None]
    t0 = seg * seg_len
    steps = tl.minimum(seg_len, T - t0)
    m2 = 2 * tl.arange(0, K2)[None, None, :]
    ridx = tl.arange(0, RP)[None, :, None]
    thmask = ridx < R
    th_off = _row_base(q, n, T, t0, th_row, R * K2)[:, None, None] + ridx * K2 + m2 // 2
    in_off = _row_base(q, n, T, t0, in_row, K)[:, None, None] + m2
    v_off = _pair_base(q, n, T, t0, K)[:, None, None] + m2
    g_off = _pair_base(q, n, T, t0, 1)[:, None, None]
    th_step = th_row
    in_step = in_row
    v_step = n * K
    s_off, s_step = _scale_offsets(q, n, T, t0, in_row, v_off, v_step, ROTATION)
    unit = _snap_unit(snap_ptr, q, n, live, SNAP)

    if COMPOSITE:
        hx = tl.zeros([LP, 1, K2], tl.float32)
        hy = hx
        Mx, My = _identity_halves(LP, K2)
    else:
        h_in = _ld(h0_ptr, qq * K + _grid(K, 1, 1), live)
        h_in = _fold(m_ptr, c_ptr, h_in, qq, seg, nseg, live, K, 1, 1, 0, True, False)
        hx, hy = _halves(h_in, K2)

    th, sx, sy, gam = _coef_loads(th_ptr, s_ptr, g_ptr, th_off, s_off, g_off, live, thmask,
                                  unit, LP, K2, HAS_SCALE, HAS_GAMMA, ROTATION, SNAP)
    bx = _input_term(b_ptr, z_ptr, in_off, live, GATED)
    by = _input_term(b_ptr, z_ptr, in_off + 1, live, GATED)
    for i in range(steps):
        more = _both(live, i + 1 < steps)
        th_n, sx_n, sy_n, gam_n = _coef_loads(
            th_ptr, s_ptr, g_ptr, th_off + th_step, s_off + s_step, g_off + n, more, thmask,
            unit, LP, K2, HAS_SCALE, HAS_GAMMA, ROTATION, SNAP)
        bx_n = _input_term(b_ptr, z_ptr, in_off + in_step, more, GATED)
        by_n = _input_term(b_ptr, z_ptr, in_off + in_step + 1, more, GATED)
        cs = tl.cos(th)
        sn = tl.sin(th)
        hx, hy = _transition(hx, hy, cs, sn, sx, sy, gam, R, RP, K2, HAS_SCALE, HAS_GAMMA)
        hx += bx
        hy += by
        if COMPOSITE:
            Mx, My = _transition(Mx, My, cs, sn, sx, sy, gam, R, RP, K2, HAS_SCALE, HAS_GAMMA)
        else:
            tl.store(h_ptr + v_off, hx.to(h_ptr.dtype.element_ty), mask=live)
            tl.store(h_ptr + v_off + 1, hy.to(h_ptr.dtype.element_ty), mask=live)
        th_off += th_step
        in_off += in_step
        v_off += v_step
        s_off += s_step
        g_off += n
        th = th_n
        sx = sx_n
        sy = sy_n
        gam = gam_n
        bx = bx_n
        by = by_n

    if COMPOSITE:
        _store_composite(m_ptr, c_ptr, qq * nseg + seg, Mx, My, hx, hy, live, K2)


# ----------------------------------------------------------------------------- backward


@triton.jit
def _grad_loads(th_ptr, s_ptr, g_ptr, h_ptr, h0_ptr, dh_ptr, th_off, v_off, s_off, g_off,
                h0_off, dh_off, dh_sd, v_step, t, live, thmask, unit, LP: tl.constexpr,
                K2: tl.constexpr, HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr,
                NEED_PREV: tl.constexpr, ROTATION: tl.constexpr, SNAP: tl.constexpr):
    """What backward step ``t`` reads: coefficients, ``dh_t`` (through its strides: the
    ``x`` halves at ``dh_off``, the ``y`` halves one channel, ``dh_sd``, on) and
    (``NEED_PREV``) ``h_{t-1}``."""
    th, sx, sy, gam = _coef_loads(th_ptr, s_ptr, g_ptr, th_off, s_off, g_off, live, thmask,
                                  unit, LP, K2, HAS_SCALE, HAS_GAMMA, ROTATION, SNAP)
    dx = _ld(dh_ptr, dh_off, live)
    dy = _ld(dh_ptr, dh_off + dh_sd, live)
    if NEED_PREV:
        in_seq = _both(live, t > 0)
        at_start = _both(live, t == 0)
        px = _ld(h_ptr, v_off - v_step, in_seq) + _ld(h0_ptr, h0_off, at_start)
        py = _ld(h_ptr, v_off - v_step + 1, in_seq) + _ld(h0_ptr, h0_off + 1, at_start)
    else:
        px = dx
        py = dy
    return th, sx, sy, gam, dx, dy, px, py


@triton.jit(do_not_specialize=["T", "seg_len", "nseg"])
def givens_recurrence_bwd_kernel(
    th_ptr, s_ptr, g_ptr, h_ptr, h0_ptr,  # saved inputs (scale, log_gamma may be dummies) and h
    hh_ptr, z_ptr,  # gated: the saved pre-activations h̃ and z (else dummies)
    snap_ptr,  # ROTATION with SNAP: K_j per block (else a dummy)
    dh_ptr,  # incoming gradient (B, T, n·k), any strides (dh_sb, dh_st, dh_sd): a sum's arrives
    # expanded (stride 0) and is read as it is
    dth_ptr, db_ptr, dz_ptr, ds_ptr, dg_ptr, dh0_ptr,  # outputs (dz, ds, dg dummies when absent)
    m_ptr, c_ptr,  # fp32 segment composites (npair, nseg, k, k) and (npair, nseg, k)
    npair, n, T, seg_len, nseg, th_row, in_row, dh_sb, dh_st, dh_sd,
    K2: tl.constexpr, R: tl.constexpr, RP: tl.constexpr, LP: tl.constexpr,
    HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr, COMPOSITE: tl.constexpr,
    GATED: tl.constexpr = False, ROTATION: tl.constexpr = False, SNAP: tl.constexpr = False,
):
    """Walk one segment right to left carrying ``U = M_{t+1}ᵀ g_{t+1}``.

    ``COMPOSITE``: from ``U = 0`` and ``Ψ = I``, write ``(Ψ = M_sᵀ ⋯ M_eᵀ, U_loc)``. Otherwise
    from the adjoint carried in (composites of segments ``nseg-1 … seg+1`` folded onto zero),
    write every gradient; segment 0 also writes ``dh0``.

    ``theta`` and ``dθ`` rows are ``th_row`` elements apart, ``db`` (gated: ``h̃``, ``z``,
    ``dh̃``, ``dz``) rows ``in_row``. ``GATED``: ``b = σ(z) ⊙ h̃``, and ``db`` becomes ``dh̃``
    and ``dz`` (module docstring).
    """
    K: tl.constexpr = 2 * K2
    seg = tl.program_id(1)
    q = tl.program_id(0) * LP + tl.arange(0, LP)
    live = (q < npair)[:, None, None]
    qq = q.to(tl.int64)[:, None, None]
    t0 = seg * seg_len
    steps = tl.minimum(seg_len, T - t0)
    t_last = t0 + steps - 1
    m2 = 2 * tl.arange(0, K2)[None, None, :]
    ridx = tl.arange(0, RP)[None, :, None]
    thmask = ridx < R
    th_off = _row_base(q, n, T, t_last, th_row, R * K2)[:, None, None] + ridx * K2 + m2 // 2
    in_off = _row_base(q, n, T, t_last, in_row, K)[:, None, None] + m2
    v_off = _pair_base(q, n, T, t_last, K)[:, None, None] + m2
    g_off = _pair_base(q, n, T, t_last, 1)[:, None, None]
    h0_off = qq * K + m2
    # dh through its strides: pair q = b·n + block, channel block·K + m.
    b_idx = qq // n
    dh_off = (b_idx * dh_sb + t_last.to(tl.int64) * dh_st
              + ((qq - b_idx * n) * K + m2) * dh_sd)
    th_step = th_row
    in_step = in_row
    v_step = n * K
    s_off, s_step = _scale_offsets(q, n, T, t_last, in_row, v_off, v_step, ROTATION)
    unit = _snap_unit(snap_ptr, q, n, live, SNAP)
    NEED_PREV: tl.constexpr = not COMPOSITE

    if COMPOSITE:
        Ux = tl.zeros([LP, 1, K2], tl.float32)
        Uy = Ux
        Px, Py = _identity_halves(LP, K2)
    else:
        u_in = _fold(m_ptr, c_ptr, tl.zeros([LP, K, 1], tl.float32), qq, seg, nseg, live,
                     K, 1, 1, 0, True, True)
        Ux, Uy = _halves(u_in, K2)

    th, sx, sy, gam, dx, dy, px, py = _grad_loads(
        th_ptr, s_ptr, g_ptr, h_ptr, h0_ptr, dh_ptr, th_off, v_off, s_off, g_off, h0_off,
        dh_off, dh_sd, v_step, t_last, live, thmask, unit, LP, K2, HAS_SCALE, HAS_GAMMA,
        NEED_PREV, ROTATION, SNAP)
    for i in range(steps):
        t = t_last - i
        more = _both(live, i + 1 < steps)
        th_n, sx_n, sy_n, gam_n, dx_n, dy_n, px_n, py_n = _grad_loads(
            th_ptr, s_ptr, g_ptr, h_ptr, h0_ptr, dh_ptr, th_off - th_step, v_off - v_step,
            s_off - s_step, g_off - n, h0_off, dh_off - dh_st, dh_sd, v_step, t - 1, more,
            thmask, unit, LP, K2, HAS_SCALE, HAS_GAMMA, NEED_PREV, ROTATION, SNAP)
        cs = tl.cos(th)
        sn = tl.sin(th)
        gx = dx + Ux
        gy = dy + Uy
        if COMPOSITE:
            Ux, Uy = _transition_t(gx, gy, cs, sn, sx, sy, gam, R, RP, K2, HAS_SCALE, HAS_GAMMA)
            Px, Py = _transition_t(Px, Py, cs, sn, sx, sy, gam, R, RP, K2, HAS_SCALE, HAS_GAMMA)
        else:
            _store_input_grad(db_ptr, dz_ptr, hh_ptr, z_ptr, in_off, gx, live, GATED)
            _store_input_grad(db_ptr, dz_ptr, hh_ptr, z_ptr, in_off + 1, gy, live, GATED)
            if HAS_SCALE:
                u0x = px * sx
                u0y = py * sy
            else:
                u0x = px
                u0y = py
            if HAS_GAMMA:
                ax = gx * gam
                ay = gy * gam
            else:
                ax = gx
                ay = gy
            dth = tl.zeros([LP, RP, K2], tl.float32)
            for r in tl.static_range(R - 1, -1, -1):
                # pre-rotation state of round r, recomputed forward from h_{t-1}
                ux = u0x
                uy = u0y
                for p in tl.static_range(r):
                    ux, uy = _rotate(ux, uy, _pick(cs, p, RP), _pick(sn, p, RP), p % 2 == 1, K2)
                c = _pick(cs, r, RP)
                s = _pick(sn, r, RP)
                dth += tl.where(ridx == r, _dtheta(ux, uy, ax, ay, c, s, r % 2 == 1, K2), 0.0)
                ax, ay = _rotate(ax, ay, c, -s, r % 2 == 1, K2)
            tl.store(dth_ptr + th_off, dth.to(dth_ptr.dtype.element_ty), mask=live & thmask)
            if ROTATION:  # scale [1, tanh(u)]: du = ∂L/∂scale_1 · (1 − tanh²u)
                du = ay * py * (1.0 - sy * sy)
                tl.store(ds_ptr + s_off, du.to(ds_ptr.dtype.element_ty), mask=live)
                Ux = ax * sx
                Uy = ay * sy
            elif HAS_SCALE:
                tl.store(ds_ptr + v_off, (ax * px).to(ds_ptr.dtype.element_ty), mask=live)
                tl.store(ds_ptr + v_off + 1, (ay * py).to(ds_ptr.dtype.element_ty), mask=live)
                Ux = ax * sx
                Uy = ay * sy
            else:
                Ux = ax
                Uy = ay
            if HAS_GAMMA:
                dlg = tl.sum(ax * u0x + ay * u0y, axis=2)[:, :, None]
                tl.store(dg_ptr + g_off, dlg.to(dg_ptr.dtype.element_ty), mask=live)
        th_off -= th_step
        in_off -= in_step
        v_off -= v_step
        dh_off -= dh_st
        s_off -= s_step
        g_off -= n
        th = th_n
        sx = sx_n
        sy = sy_n
        gam = gam_n
        dx = dx_n
        dy = dy_n
        px = px_n
        py = py_n

    if COMPOSITE:
        _store_composite(m_ptr, c_ptr, qq * nseg + seg, Px, Py, Ux, Uy, live, K2)
    else:
        first = _both(live, seg == 0)
        tl.store(dh0_ptr + h0_off, Ux.to(dh0_ptr.dtype.element_ty), mask=first)
        tl.store(dh0_ptr + h0_off + 1, Uy.to(dh0_ptr.dtype.element_ty), mask=first)
