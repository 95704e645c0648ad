"""What a step of the Givens / rotation walk reads and writes besides the state
(:mod:`mingru_kernels.givens_recurrence`): the transition's coefficients (angles, scale, decay)
and the input term, from contiguous tensors or from the columns of a mixer's one projection
(rows a runtime stride apart), with the gate ``σ(k_z) ⊙ k_h`` (``GATED``) and RotationMinGRU's
snapped angles and ``[1, tanh(k_u)]`` scale (``ROTATION``, ``SNAP``) formed on the way in, and
the matching gradient stores.

Framework-free: imports triton only.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels.matrix_affine_scan import _ld, _row_base
from mingru_kernels.mingru_cell import _tanh


@triton.jit
def _input_term(b_ptr, z_ptr, off, mask, GATED: tl.constexpr):
    """``b_t`` at ``off``: loaded, or (``GATED``) ``σ(z) ⊙ h̃`` from the pre-activations."""
    b = _ld(b_ptr, off, mask)
    if GATED:
        b = b * tl.sigmoid(_ld(z_ptr, off, mask))
    return b


@triton.jit
def _store_input_grad(db_ptr, dz_ptr, hh_ptr, z_ptr, off, g, mask, GATED: tl.constexpr):
    """``db = g`` at ``off``, or (``GATED``, ``b = σ(z) ⊙ h̃``) ``dh̃ = g σ(z)`` and
    ``dz = g h̃ σ(z)(1 − σ(z))``."""
    if GATED:
        sig = tl.sigmoid(_ld(z_ptr, off, mask))
        tl.store(db_ptr + off, (g * sig).to(db_ptr.dtype.element_ty), mask=mask)
        dz = g * _ld(hh_ptr, off, mask) * sig * (1.0 - sig)
        tl.store(dz_ptr + off, dz.to(dz_ptr.dtype.element_ty), mask=mask)
    else:
        tl.store(db_ptr + off, g.to(db_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _round_half_even(x):
    """``x`` rounded to the nearest integer, ties to even (``torch.round``'s rule). From the
    floor and the exact fraction ``x − ⌊x⌋``: ``⌊x + 0.5⌋`` would round ``0.5 − 2⁻²⁵`` up."""
    f = tl.floor(x)
    d = x - f
    odd = (f - 2.0 * tl.floor(0.5 * f)) != 0.0
    return tl.where((d > 0.5) | ((d == 0.5) & odd), f + 1.0, f)


@triton.jit
def _snap_unit(snap_ptr, q, n, live, SNAP: tl.constexpr):
    """RotationMinGRU's snapping step ``2π / K_j`` of each pair's block ``j = q % n``
    (``[LP, 1, 1]``; zeros without ``SNAP``)."""
    if SNAP:
        K = tl.load(snap_ptr + (q % n)[:, None, None], mask=live, other=1.0).to(tl.float32)
        unit = 6.283185307179586 / K
    else:
        unit = tl.zeros_like(live.to(tl.float32))
    return unit


@triton.jit
def _scale_offsets(q, n, T, t0, in_row, v_off, v_step, ROTATION: tl.constexpr):
    """Where a token's scale is read: ``scale (B, T, n, k)`` beside ``h`` (``v_off``), or
    (``ROTATION``) the one pre-activation ``u`` per block in the projection's rows."""
    if ROTATION:
        s_off = _row_base(q, n, T, t0, in_row, 1)[:, None, None]
        s_step = in_row
    else:
        s_off = v_off
        s_step = v_step
    return s_off, s_step


@triton.jit
def _coef_loads(th_ptr, s_ptr, g_ptr, th_off, s_off, g_off, live, thmask, unit,
                LP: tl.constexpr, K2: tl.constexpr,
                HAS_SCALE: tl.constexpr, HAS_GAMMA: tl.constexpr,
                ROTATION: tl.constexpr, SNAP: tl.constexpr):
    """A token's transition coefficients: angles ``[LP, RP, K2]``, scale halves, ``γ``.
    ``ROTATION`` (``k = 2``, one round): the scale is ``[1, tanh(u)]`` from the one
    pre-activation ``u`` at ``s_off``, and (``SNAP``) the angle is rounded to a multiple of
    ``unit`` (half to even)."""
    th = _ld(th_ptr, th_off, live & thmask)
    if SNAP:
        th = _round_half_even(th / unit) * unit
    if ROTATION:
        sx = tl.full([LP, 1, K2], 1.0, tl.float32)
        sy = _tanh(_ld(s_ptr, s_off, live))
    elif HAS_SCALE:
        sx = _ld(s_ptr, s_off, live)
        sy = _ld(s_ptr, s_off + 1, live)
    else:
        sx = tl.zeros([LP, 1, K2], tl.float32)
        sy = sx
    if HAS_GAMMA:
        gam = tl.exp(_ld(g_ptr, g_off, live))
    else:
        gam = tl.zeros([LP, 1, 1], tl.float32)
    return th, sx, sy, gam
