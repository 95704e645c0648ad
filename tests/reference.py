"""Independent float64 oracles for the state-output mixers: plain per-token loops written from
the SPEC math, reading only the module's parameters (never its forward/step or any scan).

Each oracle takes the module, ``x (B, T, in)``, an optional ``h0 (B, 1, hidden)`` and an
optional ``delta_t (B, T)`` and returns the states ``(B, T, hidden)`` in float64.
"""

from __future__ import annotations

import math

import torch


def _p(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().to(torch.float64)


def lin(layer: torch.nn.Linear, v: torch.Tensor) -> torch.Tensor:
    out = v @ _p(layer.weight).T
    return out if layer.bias is None else out + _p(layer.bias)


def sigmoid(v: torch.Tensor) -> torch.Tensor:
    return 1.0 / (1.0 + torch.exp(-v))


def g(v: torch.Tensor) -> torch.Tensor:
    pos = v + 0.5
    neg = sigmoid(v)
    return torch.where(v >= 0, pos, neg)


def gap(delta_t: torch.Tensor, log1p: bool) -> torch.Tensor:
    """Sanitized gaps, written element by element."""
    flat = delta_t.detach().to(torch.float64).reshape(-1).tolist()
    out = []
    for d in flat:
        if math.isnan(d) or d < 0:
            d = 0.0
        elif math.isinf(d):
            d = 1e10
        out.append(math.log1p(d) if log1p else d)
    return torch.tensor(out, dtype=torch.float64).reshape(delta_t.shape[:2])


def gammas(module, delta_t: torch.Tensor | None, channels: int, B: int, T: int) -> torch.Tensor:
    """``γ (B, T, channels)``; ones when decay is off."""
    dec = module.decay
    if dec.mode is None:
        return torch.ones(B, T, channels, dtype=torch.float64)
    if dec.rho is not None:
        lam = torch.log1p(torch.exp(_p(dec.rho)))  # softplus, per channel
    else:
        lam = torch.full((channels,), dec.decay_rate, dtype=torch.float64)
    d = gap(delta_t, dec.log1p_delta)
    return torch.exp(-d[..., None] * lam)


def mingru(m, x, h0=None, delta_t=None):
    B, T, _ = x.shape
    x = x.detach().double()
    gam = gammas(m, delta_t, m.hidden_size, B, T)
    if h0 is not None:
        h = h0.detach().double()[:, 0]
    elif m.h0 is not None:
        h = g(_p(m.h0)).expand(B, -1)
    else:
        h = torch.full((B, m.hidden_size), 0.5, dtype=torch.float64)
    out = []
    for t in range(T):
        z = sigmoid(lin(m.linear_z, x[:, t]))
        h = gam[:, t] * (1 - z) * h + z * g(lin(m.linear_h, x[:, t]))
        out.append(h)
    return torch.stack(out, 1)


def signed(m, x, h0=None, delta_t=None):
    B, T, _ = x.shape
    x = x.detach().double()
    gam = gammas(m, delta_t, m.hidden_size, B, T)
    if h0 is not None:
        h = h0.detach().double()[:, 0]
    elif m.h0 is not None:
        h = _p(m.h0).expand(B, -1)
    else:
        h = torch.zeros(B, m.hidden_size, dtype=torch.float64)
    out = []
    for t in range(T):
        z = sigmoid(lin(m.linear_z, x[:, t]))
        a = torch.tanh(lin(m.linear_s, x[:, t]))
        if m.coupled:
            a = (1 - z) * a
        h = gam[:, t] * a * h + z * lin(m.linear_h, x[:, t])
        out.append(h)
    return torch.stack(out, 1)


def _start(m, h0, B):
    if h0 is not None:
        return h0.detach().double()[:, 0].clone()
    return _p(m.h0).expand(B, -1).clone()


def rotation(m, x, h0=None, delta_t=None):
    """Per block j: ``h ← γ R(θ) diag(1, tanh u) h + b`` with θ snapped by Python's round()."""
    B, T, _ = x.shape
    n = m.hidden_size // 2
    x = x.detach().double()
    gam = gammas(m, delta_t, n, B, T)
    h = _start(m, h0, B)
    out = torch.zeros(B, T, m.hidden_size, dtype=torch.float64)
    for t in range(T):
        theta = lin(m.linear_theta, x[:, t])
        u = torch.tanh(lin(m.linear_u, x[:, t]))
        b = sigmoid(lin(m.linear_z, x[:, t])) * lin(m.linear_h, x[:, t])
        new = torch.zeros_like(h)
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


def givens_matrix(angles: torch.Tensor, k: int) -> torch.Tensor:
    """``G_{R-1} ⋯ G_0`` for ``angles (R, k/2)``, each plane rotation built as a full matrix."""
    G = torch.eye(k, dtype=torch.float64)
    for r in range(angles.shape[0]):
        for mm in range(k // 2):
            i = (r % 2 + 2 * mm) % k
            j = (i + 1) % k
            c, s = math.cos(float(angles[r, mm])), math.sin(float(angles[r, mm]))
            Rm = torch.eye(k, dtype=torch.float64)
            Rm[i, i], Rm[i, j], Rm[j, i], Rm[j, j] = c, -s, s, c
            G = Rm @ G
    return G


def givens(m, x, h0=None, delta_t=None):
    B, T, _ = x.shape
    k, R = m.block_size, m.rounds
    n = m.hidden_size // k
    x = x.detach().double()
    gam = gammas(m, delta_t, n, B, T)
    h = _start(m, h0, B).reshape(B, n, k)
    out = []
    for t in range(T):
        angles = lin(m.linear_theta, x[:, t]).reshape(B, n, R, k // 2)
        b = (sigmoid(lin(m.linear_z, x[:, t])) * lin(m.linear_h, x[:, t])).reshape(B, n, k)
        new = torch.empty_like(h)
        for bi in range(B):
            for blk in range(n):
                M = gam[bi, t, blk] * givens_matrix(angles[bi, blk], k)
                new[bi, blk] = M @ h[bi, blk] + b[bi, blk]
        h = new
        out.append(h.reshape(B, -1))
    return torch.stack(out, 1)


ORACLES = {"MinGRU": mingru, "SignedMinGRU": signed, "RotationMinGRU": rotation,
           "GivensMinGRU": givens}


def oracle_for(module):
    return ORACLES[type(module).__name__]
