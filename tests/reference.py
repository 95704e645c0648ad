"""The float64 reference every test compares against: plain sequential loops written from the
SPEC math, one token (and one micro-step) at a time, sharing nothing with the library.

Two kinds:

* **op loops** (:func:`loop_linear`, :func:`loop_log`, :func:`loop_affine`,
  :func:`loop_givens`, :func:`loop_delta`) — array-generic: NumPy arrays (or anything
  ``np.asarray`` takes, e.g. jax arrays) in, NumPy float64 out; PyTorch tensors in, PyTorch
  float64 out on the same device, differentiable, so a test gets reference gradients from
  autograd through the loop;
* **mixer oracles** (:func:`mingru`, :func:`signed`, :func:`rotation`, :func:`givens`,
  :func:`delta`) — read only a PyTorch mixer's parameters (never its forward/step or any
  scan) and return NumPy float64. Each takes the module, ``x (B, T, in)``, an optional
  ``h0 (B, 1, state)`` and an optional ``delta_t (B, T)`` (or ``(B, T, 1)``).

This module never imports torch (it recognises a tensor by its type's module), so the JAX
tests run with NumPy alone.
"""

from __future__ import annotations

import math
import sys
from types import ModuleType
from typing import Any

import numpy as np

MAX_GAP = 1e10  # SPEC §5.1: gaps are capped here (+inf included)


# --------------------------------------------------------------------------- arrays


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _xp(x: Any) -> ModuleType:
    """The array namespace of ``x``: torch for a tensor (already imported), else NumPy."""
    return sys.modules["torch"] if _is_torch(x) else np


def _f64(x: Any) -> Any:
    """``x`` in float64: a tensor stays a tensor (autograd flows through), the rest NumPy."""
    if x is None:
        return None
    return x.double() if _is_torch(x) else np.asarray(x, dtype=np.float64)


def to_numpy(x: Any) -> np.ndarray | None:
    """``x`` as a NumPy float64 array (a tensor is detached and moved to the host first)."""
    if x is None:
        return None
    if _is_torch(x):
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def _eye_like(x: Any, k: int) -> Any:
    """``I_k`` broadcast to ``x``'s shape ``(..., k, k)``."""
    if _is_torch(x):
        return sys.modules["torch"].eye(k, dtype=x.dtype, device=x.device).expand_as(x)
    return np.broadcast_to(np.eye(k), x.shape)


def _zeros_like(x: Any, shape: tuple[int, ...]) -> Any:
    return x.new_zeros(shape) if _is_torch(x) else np.zeros(shape)


# --------------------------------------------------------------------------- op loops


def loop_linear(a, b):
    """``(P, Z)`` of ``h_t = a_t h_{t-1} + b_t``: the running product ``P_t = a_t P_{t-1}``
    from 1 and the zero-start state ``Z_t = a_t Z_{t-1} + b_t`` from 0."""
    a, b = _f64(a), _f64(b)
    xp = _xp(a)
    p, z = xp.ones_like(a[:, 0]), xp.zeros_like(b[:, 0])
    Ps, Zs = [], []
    for t in range(a.shape[1]):
        p = a[:, t] * p
        z = a[:, t] * z + b[:, t]
        Ps.append(p)
        Zs.append(z)
    return xp.stack(Ps, 1), xp.stack(Zs, 1)


def loop_recurrence(a, b, h0=None):
    """``(h, h_T)`` of ``h_t = a_t h_{t-1} + b_t`` from ``h0`` (zeros when ``None``): the
    states-only form with an initial and a final state."""
    a, b = _f64(a), _f64(b)
    xp = _xp(a)
    h = xp.zeros_like(b[:, 0]) if h0 is None else _f64(h0)
    out = []
    for t in range(a.shape[1]):
        h = a[:, t] * h + b[:, t]
        out.append(h)
    return xp.stack(out, 1), h


def loop_cell(k, h0=None, log_gamma=None, signed=False, coupled=False):
    """``(h, h_T)`` of the fused minGRU cells from their pre-activations, one step at a time:
    ``k = [k_z | k_h]`` (MinGRU: ``a = γ (1 − z)``, ``b = z g(k_h)``) or ``[k_z | k_s | k_h]``
    (signed: ``a = γ tanh(k_s)`` times ``1 − z`` if coupled, ``b = z k_h``); ``z = σ(k_z)``."""
    k = _f64(k)
    xp = _xp(k)
    D = k.shape[-1] // (3 if signed else 2)
    h = xp.zeros_like(k[:, 0, :D]) if h0 is None else _f64(h0)
    out = []
    for t in range(k.shape[1]):
        z = 1 / (1 + xp.exp(-k[:, t, :D]))
        if signed:
            a = xp.tanh(k[:, t, D:2 * D]) * ((1 - z) if coupled else 1)
            b = z * k[:, t, 2 * D:]
        else:
            kh = k[:, t, D:]
            a = 1 - z
            b = z * xp.where(kh >= 0, kh + 0.5, 1 / (1 + xp.exp(-kh)))
        if log_gamma is not None:
            a = a * xp.exp(_f64(log_gamma)[:, t])
        h = a * h + b
        out.append(h)
    return xp.stack(out, 1), h


def loop_log(log_a, log_values):
    """``h`` of ``h_t = e^{log a_t} h_{t-1} + e^{log_values[:, t+1]}`` from
    ``h_0 = e^{log_values[:, 0]}`` (``-inf`` is a zero)."""
    log_a, log_values = _f64(log_a), _f64(log_values)
    xp = _xp(log_a)
    h = xp.exp(log_values[:, 0])
    out = []
    for t in range(log_a.shape[1]):
        h = xp.exp(log_a[:, t]) * h + xp.exp(log_values[:, t + 1])
        out.append(h)
    return xp.stack(out, 1)


def loop_affine(A, Bm):
    """``(P, Z)`` of the block recurrence: ``P_t = A_t P_{t-1}`` from ``I`` and
    ``Z_t = A_t Z_{t-1} + B_t`` from 0, for ``A (B, T, n, k, k)``, ``Bm (B, T, n, k, v)``."""
    A, Bm = _f64(A), _f64(Bm)
    xp = _xp(A)
    P = _eye_like(A[:, 0], A.shape[-1])
    Z = xp.zeros_like(Bm[:, 0])
    Ps, Zs = [], []
    for t in range(A.shape[1]):
        P = A[:, t] @ P
        Z = A[:, t] @ Z + Bm[:, t]
        Ps.append(P)
        Zs.append(Z)
    return xp.stack(Ps, 1), xp.stack(Zs, 1)


def loop_givens(theta, b, h0, scale=None, log_gamma=None):
    """``h (B, T, n, k)`` of the fused rotation/Givens recurrence. Per token: multiply by
    ``scale``, then rotate each round's planes ``i = (r % 2 + 2m) % k``, ``j = (i + 1) % k`` by
    ``theta[..., r, m]`` one at a time, then multiply by ``γ = e^{log_gamma}``, then add ``b``."""
    theta, b, h0, scale, log_gamma = map(_f64, (theta, b, h0, scale, log_gamma))
    xp = _xp(theta)
    _, T, _, R, half = theta.shape
    k = 2 * half
    h, out = h0, []
    for t in range(T):
        v = h if scale is None else h * scale[:, t]
        rows = [v[..., i] for i in range(k)]
        for r in range(R):
            for m in range(half):
                i = (r % 2 + 2 * m) % k
                j = (i + 1) % k
                c, s = xp.cos(theta[:, t, :, r, m]), xp.sin(theta[:, t, :, r, m])
                rows[i], rows[j] = c * rows[i] - s * rows[j], s * rows[i] + c * rows[j]
        v = xp.stack(rows, -1)
        if log_gamma is not None:
            v = v * xp.exp(log_gamma[:, t])[..., None]
        h = v + b[:, t]
        out.append(h)
    return xp.stack(out, 1)


def loop_delta(q, k, v, beta, log_gamma=None, h0=None):
    """``(o (B, T, H, d_v), S_T (B, H, d_k, d_v))`` of the delta rule: per token
    ``S ← γ_t S``, then per micro-step ``j`` ``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``
    (keys need not be unit), then ``o_t = Sᵀ q_t``; ``S_0 = h0`` (zeros if ``None``)."""
    q, k, v, beta, log_gamma, h0 = map(_f64, (q, k, v, beta, log_gamma, h0))
    xp = _xp(k)
    B, T, nh, H, dk = k.shape
    S = _zeros_like(k, (B, H, dk, v.shape[-1])) if h0 is None else h0
    outs = []
    for t in range(T):
        if log_gamma is not None:
            S = xp.exp(log_gamma[:, t])[..., None, None] * S
        for j in range(nh):
            kj = k[:, t, j]
            err = v[:, t, j] - xp.einsum("bhk,bhkv->bhv", kj, S)  # v_j − Sᵀ k_j
            S = S + (beta[:, t, j][..., None] * kj)[..., :, None] * err[..., None, :]
        outs.append(xp.einsum("bhk,bhkv->bhv", q[:, t], S))
    return xp.stack(outs, 1), S


def givens_matrix(angles, k: int) -> np.ndarray:
    """``G_{R-1} ⋯ G_0`` for one block's ``angles (R, k/2)``, each plane rotation built as a
    full ``k × k`` matrix."""
    angles = to_numpy(angles)
    G = np.eye(k)
    for r in range(angles.shape[0]):
        for m in range(k // 2):
            i = (r % 2 + 2 * m) % k
            j = (i + 1) % k
            c, s = math.cos(angles[r, m]), math.sin(angles[r, m])
            rot = np.eye(k)
            rot[i, i], rot[i, j], rot[j, i], rot[j, j] = c, -s, s, c
            G = rot @ G
    return G


# --------------------------------------------------------------------------- mixer oracles


def lin(layer, v: np.ndarray) -> np.ndarray:
    """A ``torch.nn.Linear`` applied in float64."""
    out = v @ to_numpy(layer.weight).T
    return out if layer.bias is None else out + to_numpy(layer.bias)


def sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def g(v: np.ndarray) -> np.ndarray:
    """minGRU's ``g``: ``x + 0.5`` for ``x ≥ 0``, else ``sigmoid(x)``."""
    return np.where(v >= 0, v + 0.5, sigmoid(v))


def gap(delta_t, log1p: bool) -> np.ndarray:
    """Sanitized gaps ``(B, T)``, written element by element: NaN and negative → 0, anything
    above 1e10 (``+inf`` too) → 1e10, then ``log1p`` if asked."""
    d = to_numpy(delta_t)
    out = []
    for x in d.reshape(-1).tolist():
        if math.isnan(x) or x < 0:
            x = 0.0
        elif x > MAX_GAP:
            x = MAX_GAP
        out.append(math.log1p(x) if log1p else x)
    return np.array(out).reshape(d.shape[:2])


def gammas(module, delta_t, channels: int, B: int, T: int) -> np.ndarray:
    """``γ (B, T, channels)`` of ``module.decay`` for the raw gaps; ones when decay is off."""
    dec = module.decay
    if dec.mode is None:
        return np.ones((B, T, channels))
    if dec.rho is not None:
        lam = np.log1p(np.exp(to_numpy(dec.rho)))  # softplus, per channel
    else:
        lam = np.full((channels,), dec.decay_rate)
    return np.exp(-gap(delta_t, dec.log1p_delta)[..., None] * lam)


def _start(m, h0, B: int, *, learned=lambda h: h, default: float = 0.0) -> np.ndarray:
    """A loop's first state ``(B, hidden_size)``: the call's ``h0 (B, 1, hidden_size)``, else
    ``learned`` of the mixer's learned ``m.h0``, else ``default`` everywhere."""
    if h0 is not None:
        return to_numpy(h0)[:, 0].copy()
    if m.h0 is not None:
        return np.broadcast_to(learned(to_numpy(m.h0)), (B, m.hidden_size)).copy()
    return np.full((B, m.hidden_size), default)


def mingru(m, x, h0=None, delta_t=None) -> np.ndarray:
    """MinGRU states: ``h_t = γ_t (1 − z_t) h_{t-1} + z_t g(h̃_t)``."""
    x = to_numpy(x)
    B, T, _ = x.shape
    gam = gammas(m, delta_t, m.hidden_size, B, T)
    h = _start(m, h0, B, learned=g, default=0.5)  # the default h_0 is 0.5 = g(0)
    out = []
    for t in range(T):
        z = sigmoid(lin(m.linear_z, x[:, t]))
        h = gam[:, t] * (1 - z) * h + z * g(lin(m.linear_h, x[:, t]))
        out.append(h)
    return np.stack(out, 1)


def signed(m, x, h0=None, delta_t=None) -> np.ndarray:
    """SignedMinGRU states: ``h_t = γ_t a_t h_{t-1} + z_t h̃_t`` with ``a = tanh(s)``
    (``(1 − z) tanh(s)`` when coupled)."""
    x = to_numpy(x)
    B, T, _ = x.shape
    gam = gammas(m, delta_t, m.hidden_size, B, T)
    h = _start(m, h0, B)
    out = []
    for t in range(T):
        z = sigmoid(lin(m.linear_z, x[:, t]))
        a = np.tanh(lin(m.linear_s, x[:, t]))
        if m.coupled:
            a = (1 - z) * a
        h = gam[:, t] * a * h + z * lin(m.linear_h, x[:, t])
        out.append(h)
    return np.stack(out, 1)


def rotation(m, x, h0=None, delta_t=None) -> np.ndarray:
    """Per block j: ``h ← γ R(θ) diag(1, tanh u) h + b`` with θ snapped by Python's round()."""
    x = to_numpy(x)
    B, T, _ = x.shape
    n = m.hidden_size // 2
    gam = gammas(m, delta_t, n, B, T)
    h = _start(m, h0, B)
    out = np.zeros((B, T, m.hidden_size))
    for t in range(T):
        theta = lin(m.linear_theta, x[:, t])
        u = np.tanh(lin(m.linear_u, x[:, t]))
        b = sigmoid(lin(m.linear_z, x[:, t])) * lin(m.linear_h, x[:, t])
        new = np.zeros_like(h)
        for bi in range(B):
            for j in range(n):
                th = float(theta[bi, j])
                if m.snap is not None:
                    unit = 2 * math.pi / m.snap[j % len(m.snap)]
                    th = round(th / unit) * unit  # Python's round: half to even
                c, s = math.cos(th), math.sin(th)
                v0 = float(h[bi, 2 * j])
                v1 = float(h[bi, 2 * j + 1]) * float(u[bi, j])
                gm = float(gam[bi, t, j])
                new[bi, 2 * j] = gm * (c * v0 - s * v1) + b[bi, 2 * j]
                new[bi, 2 * j + 1] = gm * (s * v0 + c * v1) + b[bi, 2 * j + 1]
        h = new
        out[:, t] = h
    return out


def givens(m, x, h0=None, delta_t=None) -> np.ndarray:
    """Per block: ``h ← γ G_{R-1} ⋯ G_0 h + b`` with the full matrices of
    :func:`givens_matrix`."""
    x = to_numpy(x)
    B, T, _ = x.shape
    k, R = m.block_size, m.rounds
    n = m.hidden_size // k
    gam = gammas(m, delta_t, n, B, T)
    h = _start(m, h0, B).reshape(B, n, k)
    out = []
    for t in range(T):
        angles = lin(m.linear_theta, x[:, t]).reshape(B, n, R, k // 2)
        b = (sigmoid(lin(m.linear_z, x[:, t])) * lin(m.linear_h, x[:, t])).reshape(B, n, k)
        new = np.empty_like(h)
        for bi in range(B):
            for blk in range(n):
                M = gam[bi, t, blk] * givens_matrix(angles[bi, blk], k)
                new[bi, blk] = M @ h[bi, blk] + b[bi, blk]
        h = new
        out.append(h.reshape(B, -1))
    return np.stack(out, 1)


def delta(m, x, h0=None, delta_t=None) -> tuple[np.ndarray, np.ndarray]:
    """DeltaMinGRU: ``(y (B, T, hidden), S_T (B, H, d_k, d_v))`` with explicit Householder
    matrices: per token ``S ← γ S``, per micro-step ``S ← (I − β k kᵀ) S + β k vᵀ`` (``k``
    L2-normalized, ``β = 2 sigmoid(·)``), ``y_t = out_proj(Sᵀ q_t)``."""
    x = to_numpy(x)
    B, T, _ = x.shape
    H, dk, dv, nh = m.n_heads, m.d_k, m.d_v, m.nh
    gam = gammas(m, delta_t, H, B, T)
    S = np.zeros((B, H, dk, dv)) if h0 is None else to_numpy(h0).reshape(B, H, dk, dv).copy()
    eye = np.eye(dk)
    outs = []
    for t in range(T):
        xt = x[:, t]
        S = gam[:, t, :, None, None] * S
        for j in range(nh):
            kj = lin(m.linear_k[j], xt).reshape(B, H, dk)
            kj = kj / np.maximum(np.sqrt((kj * kj).sum(-1, keepdims=True)), 1e-6)
            vj = lin(m.linear_v[j], xt).reshape(B, H, dv)
            beta = (2.0 / (1.0 + np.exp(-lin(m.linear_beta[j], xt))))[..., None, None]
            householder = eye - beta * (kj[..., :, None] * kj[..., None, :])
            S = householder @ S + beta * (kj[..., :, None] * vj[..., None, :])
        q = lin(m.linear_q, xt).reshape(B, H, dk, 1)
        o = (S.transpose(0, 1, 3, 2) @ q)[..., 0]  # Sᵀ q
        outs.append(lin(m.out_proj, o.reshape(B, H * dv)))
    return np.stack(outs, 1), S


# The state-output mixers (their output is the state sequence), by class name.
ORACLES = {"MinGRU": mingru, "SignedMinGRU": signed, "RotationMinGRU": rotation,
           "GivensMinGRU": givens}


def oracle_for(module):
    """The oracle of a state-output mixer (a key of :data:`ORACLES`)."""
    return ORACLES[type(module).__name__]
