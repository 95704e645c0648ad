"""MinGRU, SignedMinGRU, RotationMinGRU and GivensMinGRU against the independent float64
oracles of tests/reference.py, plus forward/step agreement, chunking, decay properties and
bad input."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from torch.func import functional_call

from mingru import GivensMinGRU, MinGRU, RotationMinGRU, SignedMinGRU
from mingru._eager.givens_recurrence import givens_transitions
from mingru.scans import _givens_recurrence
from tests import reference
from tests.helpers import close

F64 = torch.float64
B, IN = 2, 5

# name -> (class, kwargs); hidden sizes are deliberately not multiples of anything large.
CASES = {
    "log": (MinGRU, dict(hidden_size=6)),
    "log_h0": (MinGRU, dict(hidden_size=6, learnable_h0=True)),
    "signed": (SignedMinGRU, dict(hidden_size=6)),
    "signed_coupled_h0": (SignedMinGRU, dict(hidden_size=6, coupled=True, learnable_h0=True)),
    "rotation": (RotationMinGRU, dict(hidden_size=6)),
    "rotation_nosnap": (RotationMinGRU, dict(hidden_size=8, snap=None, bias=False)),
    "givens": (GivensMinGRU, dict(hidden_size=8, block_size=4, rounds=3)),
    "givens_k2": (GivensMinGRU, dict(hidden_size=6, block_size=2, rounds=2)),
    "givens_k8": (GivensMinGRU, dict(hidden_size=8, block_size=8, rounds=2)),
}
DECAYS = {
    "none": {},
    "fixed": dict(decay="fixed", decay_rate=0.7),
    "learnable_log1p": dict(decay="learnable", decay_rate=0.3, log1p_delta=True),
}


def make(case: str, seed: int = 1, **extra) -> torch.nn.Module:
    """A float64 mixer with non-default parameters (learned h0, spread angles, per-channel λ)."""
    cls, kw = CASES[case]
    torch.manual_seed(seed)
    m = cls(IN, **kw, **extra).double()
    with torch.no_grad():
        if getattr(m, "h0", None) is not None:
            m.h0.normal_()
        if hasattr(m, "linear_theta"):
            m.linear_theta.weight.mul_(4.0)  # several snap steps per angle
        if m.decay.rho is not None:
            m.decay.rho.add_(0.3 * torch.randn_like(m.decay.rho))
    return m


def inputs(m, T: int, seed: int = 2):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, IN, generator=g, dtype=F64)
    if isinstance(m, MinGRU):
        h0 = torch.rand(B, 1, m.hidden_size, generator=g, dtype=F64) + 0.1
    else:
        h0 = torch.randn(B, 1, m.hidden_size, generator=g, dtype=F64)
    dt = 2.0 * torch.rand(B, T, generator=g, dtype=F64)
    dt[0, 0] = 0.0
    return x, h0, dt


# ---------------------------------------------------------------- oracle agreement


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("decay", DECAYS)
@pytest.mark.parametrize("T", [1, 7])
@pytest.mark.parametrize("given_h0", [False, True])
def test_matches_oracle(case, decay, T, given_h0):
    m = make(case, **DECAYS[decay])
    x, h0, dt = inputs(m, T)
    h0 = h0 if given_h0 else None
    dt = dt if decay != "none" else None
    got = m(x, h0, dt)
    assert got.dtype == F64 and got.shape == (B, T, m.hidden_size)
    close(got, reference.oracle_for(m)(m, x, h0, dt))


def test_mingru_zero_and_default_h0():
    m = make("log")
    x, _, _ = inputs(m, 5)
    zero = torch.zeros(B, 1, 6, dtype=F64)
    close(m(x, zero), reference.mingru(m, x, zero))
    assert (m(x, zero) > 0).all()
    # The default start is g(0) = 0.5.
    half = torch.full((B, 1, 6), 0.5, dtype=F64)
    torch.testing.assert_close(m(x), m(x, half), rtol=0, atol=1e-14)


# ---------------------------------------------------------------- step / chunking


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("decay", ["none", "learnable_log1p"])
@pytest.mark.parametrize("given_h0", [False, True])
def test_step_matches_forward(case, decay, given_h0):
    m = make(case, **DECAYS[decay])
    x, h0, dt = inputs(m, 6)
    dt = dt if decay != "none" else None
    full = m(x, h0 if given_h0 else None, dt)
    h = h0[:, 0] if given_h0 else None
    outs = []
    with torch.inference_mode():  # step needs no autograd
        for t in range(x.shape[1]):
            h = m.step(x[:, t], h, None if dt is None else dt[:, t])
            assert h.shape == (B, m.hidden_size)
            outs.append(h)
    close(torch.stack(outs, 1), full.detach())


def test_step_accepts_column_delta_t():
    m = make("givens", decay="fixed")
    x, h0, dt = inputs(m, 1)
    torch.testing.assert_close(
        m.step(x[:, 0], h0[:, 0], dt[:, 0]), m.step(x[:, 0], h0[:, 0], dt[:, :1]), rtol=0, atol=0
    )


@pytest.mark.parametrize("case", CASES)
def test_chained_calls_equal_one_call(case):
    m = make(case, **DECAYS["learnable_log1p"])
    x, h0, dt = inputs(m, 7)
    w = torch.randn(B, 7, m.hidden_size, dtype=F64)

    def run(split: bool):
        m.zero_grad()
        xx, hh = x.clone().requires_grad_(), h0.clone().requires_grad_()
        if split:
            y1 = m(xx[:, :3], hh, dt[:, :3])
            y2 = m(xx[:, 3:], y1[:, -1:], dt[:, 3:])
            y = torch.cat([y1, y2], 1)
        else:
            y = m(xx, hh, dt)
        (y * w).sum().backward()
        grads = {n: p.grad for n, p in m.named_parameters() if p.grad is not None}
        return y.detach(), xx.grad, hh.grad, grads

    y_a, gx_a, gh_a, gp_a = run(False)
    y_b, gx_b, gh_b, gp_b = run(True)
    close(y_b, y_a)
    close(gx_b, gx_a)
    close(gh_b, gh_a)
    assert gp_a.keys() == gp_b.keys() and "linear_h.weight" in gp_a
    for name in gp_a:
        close(gp_b[name], gp_a[name])


# ---------------------------------------------------------------- Givens / Rotation structure


@pytest.mark.parametrize("k,R", [(2, 1), (2, 3), (4, 1), (4, 2), (8, 3), (6, 2)])
def test_givens_transitions_special_orthogonal(k, R):
    theta = 3.0 * torch.randn(2, 3, 2, R, k // 2, dtype=F64)
    M = givens_transitions(theta)
    eye = torch.eye(k, dtype=F64).expand_as(M)
    close(M @ M.transpose(-1, -2), eye, 1e-12)
    close(torch.linalg.det(M), torch.ones(2, 3, 2, dtype=F64), 1e-12)
    # The eager builder equals the explicit product of full plane-rotation matrices.
    close(M[1, 2, 0], reference.givens_matrix(theta[1, 2, 0], k), 1e-12)


def test_givens_module_transitions_orthogonal():
    m = make("givens")
    x, _, _ = inputs(m, 4)
    theta, scale = m.transition(x)
    assert scale is None and theta.shape == (B, 4, 2, 3, 2)
    M = givens_transitions(theta)
    close(M @ M.transpose(-1, -2), torch.eye(4, dtype=F64).expand_as(M), 1e-12)
    close(torch.linalg.det(M), torch.ones(B, 4, 2, dtype=F64), 1e-12)


def test_rotation_snap_exact_multiples_and_straight_through():
    m = RotationMinGRU(3, 16).double()  # 8 blocks: K cycles 2, 3, 4, 6, 2, 3, 4, 6
    theta = (5.0 * torch.randn(4, 8, dtype=F64)).requires_grad_()
    snapped = m.snap_angles(theta)
    K = torch.tensor([2, 3, 4, 6, 2, 3, 4, 6], dtype=F64)
    unit = 2 * math.pi / K
    q = snapped.detach() / unit
    assert (q - q.round()).abs().max() < 1e-12
    th = theta.detach()
    expected = [[round(float(th[i, j]) / float(unit[j])) for j in range(8)] for i in range(4)]
    assert torch.equal(q.round(), torch.tensor(expected, dtype=F64))
    assert torch.equal(snapped.detach(), torch.round(theta.detach() / unit) * unit)
    w = torch.randn(4, 8, dtype=F64)
    (snapped * w).sum().backward()
    assert torch.equal(theta.grad, w)  # straight-through: identity gradient
    nosnap = RotationMinGRU(3, 16, snap=None)
    t = torch.randn(2, 8)
    assert torch.equal(nosnap.snap_angles(t), t)


def test_rotation_snapped_model_has_angle_gradient():
    m = make("rotation")
    x, _, _ = inputs(m, 5)
    m(x).square().sum().backward()
    assert m.linear_theta.weight.grad.abs().sum() > 0


def test_rotation_blocks_scale_second_channel():
    """With θ = 0 the block is diag(1, tanh u): channel 0 keeps h0, channel 1 is scaled."""
    m = RotationMinGRU(2, 2, snap=None).double()
    with torch.no_grad():
        m.linear_theta.weight.zero_()
        m.linear_theta.bias.zero_()
        m.linear_z.bias.fill_(-60.0)  # b ≈ 0
        m.linear_z.weight.zero_()
    x = torch.randn(1, 1, 2, dtype=F64)
    h0 = torch.tensor([[[0.8, -0.6]]], dtype=F64)
    u = torch.tanh(x[0, 0] @ m.linear_u.weight.T + m.linear_u.bias)
    close(m(x, h0)[0, 0], torch.stack([h0[0, 0, 0], h0[0, 0, 1] * u[0]]).detach(), 1e-12)


# ---------------------------------------------------------------- decay


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("decay", ["fixed", "learnable_log1p"])
@pytest.mark.parametrize("column", [False, True])
def test_zero_gap_is_bit_identical_to_no_decay(case, decay, column):
    m = make(case, **DECAYS[decay])
    plain = make(case)
    missing, unexpected = plain.load_state_dict(m.state_dict(), strict=False)
    assert not missing and all(k.startswith("decay.") for k in unexpected)
    x, h0, _ = inputs(m, 7)
    zeros = torch.zeros(B, 7, 1) if column else torch.zeros(B, 7)
    assert torch.equal(m(x, h0, zeros.double()), plain(x, h0))
    assert torch.equal(m(x, None, zeros.double()), plain(x))
    z1 = torch.zeros(B, dtype=F64)
    assert torch.equal(m.step(x[:, 0], h0[:, 0], z1), plain.step(x[:, 0], h0[:, 0]))


@pytest.mark.parametrize("case", ["log", "signed", "rotation", "givens"])
def test_delta_t_pairing_errors(case):
    plain, decayed = make(case), make(case, decay="fixed")
    x, _, dt = inputs(plain, 4)
    with pytest.raises(ValueError, match="delta_t"):
        plain(x, delta_t=dt)
    with pytest.raises(ValueError, match="delta_t"):
        plain.step(x[:, 0], delta_t=dt[:, 0])
    with pytest.raises(ValueError, match="delta_t"):
        decayed(x)
    with pytest.raises(ValueError, match="delta_t"):
        decayed.step(x[:, 0])
    with pytest.raises(ValueError, match="delta_t"):
        decayed(x, delta_t=dt[:, :3])
    with pytest.raises(ValueError, match="delta_t"):
        decayed.step(x[:, 0], delta_t=dt)


@pytest.mark.parametrize("case", ["log", "signed_coupled_h0", "rotation", "givens"])
def test_bad_gaps_are_sanitized(case):
    m = make(case, **DECAYS["learnable_log1p"])
    x, h0, dt = inputs(m, 6)
    bad = dt.clone()
    bad[0, 1], bad[1, 3], bad[1, 0] = float("nan"), -2.0, float("-inf")
    fixed = dt.clone()
    fixed[0, 1] = fixed[1, 3] = fixed[1, 0] = 0.0
    assert torch.equal(m(x, h0, bad), m(x, h0, fixed))
    huge, capped = dt.clone(), dt.clone()
    huge[0, 2], capped[0, 2] = float("inf"), 1e10
    out = m(x, h0, huge)
    assert torch.isfinite(out).all()
    assert torch.equal(out, m(x, h0, capped))
    assert torch.equal(
        m.step(x[:, 0], h0[:, 0], huge[:, 2]), m.step(x[:, 0], h0[:, 0], capped[:, 2])
    )


def test_infinite_gap_forgets_the_past():
    m = make("signed", decay="fixed")
    x, h0, dt = inputs(m, 5)
    dt[:, 2] = float("inf")
    a = m(x, h0, dt)
    b = m(x, -5 * h0, dt)
    close(a[:, 2:], b[:, 2:], 1e-12)  # the transition at t=2 is 0: h_0 no longer matters


@pytest.mark.parametrize("case", CASES)
def test_learnable_decay_does_not_change_other_inits(case):
    cls, kw = CASES[case]
    torch.manual_seed(5)
    plain = cls(IN, **kw)
    torch.manual_seed(5)
    dec = cls(IN, **kw, decay="learnable", decay_rate=0.4)
    p_dec = dict(dec.named_parameters())
    assert set(p_dec) - set(dict(plain.named_parameters())) == {"decay.rho"}
    for name, p in plain.named_parameters():
        assert torch.equal(p, p_dec[name]), name
    n_chan = kw["hidden_size"] // getattr(dec, "block_size", 1)
    assert p_dec["decay.rho"].shape == (n_chan,)
    torch.testing.assert_close(
        torch.nn.functional.softplus(p_dec["decay.rho"]), torch.full((n_chan,), 0.4)
    )


# ---------------------------------------------------------------- bad input


def test_constructor_errors():
    with pytest.raises(ValueError, match="even"):
        RotationMinGRU(4, 7)
    with pytest.raises(ValueError, match="snap"):
        RotationMinGRU(4, 8, snap=(2, 0))
    with pytest.raises(ValueError, match="snap"):
        RotationMinGRU(4, 8, snap=())
    with pytest.raises(ValueError, match="block_size"):
        GivensMinGRU(4, 12, block_size=8)
    with pytest.raises(ValueError, match="block_size"):
        GivensMinGRU(4, 9, block_size=3)
    with pytest.raises(ValueError, match="rounds"):
        GivensMinGRU(4, 8, block_size=4, rounds=0)
    with pytest.raises(ValueError, match="hidden_size"):
        MinGRU(4, 0)
    with pytest.raises(ValueError, match="input_size"):
        SignedMinGRU(2.5, 4)
    with pytest.raises(ValueError, match="decay"):
        MinGRU(4, 4, decay="exp")
    with pytest.raises(ValueError, match="decay_rate"):
        GivensMinGRU(4, 8, block_size=4, decay="fixed", decay_rate=0.0)


@pytest.mark.parametrize("case", ["log", "signed", "rotation", "givens"])
def test_call_errors(case):
    m = make(case)
    H = m.hidden_size
    x, h0, _ = inputs(m, 4)
    with pytest.raises(TypeError, match="x"):
        m(torch.ones(B, 4, IN, dtype=torch.long))
    with pytest.raises(TypeError, match="x_t"):
        m.step(torch.ones(B, IN, dtype=torch.int32))
    with pytest.raises(ValueError, match="x"):
        m(x[..., :-1])
    with pytest.raises(ValueError, match="x"):
        m(x[0])
    with pytest.raises(ValueError, match="x"):
        m(x[:, :0])
    with pytest.raises(ValueError, match="h_0"):
        m(x, h0[:, 0])
    with pytest.raises(ValueError, match="h_0"):
        m(x, torch.zeros(B, 1, H + 1, dtype=F64))
    with pytest.raises(ValueError, match="h_prev"):
        m.step(x[:, 0], h0)
    with pytest.raises(TypeError, match="h_0"):
        m(x, [[0.0] * H] * B)


def test_mingru_rejects_negative_state():
    m = make("log")
    x, h0, _ = inputs(m, 3)
    with pytest.raises(ValueError, match="non-negative"):
        m(x, h0 - 1.0)
    m.step(x[:, 0], h0[:, 0] - 1.0)  # step checks shapes, never values (no host sync)


def test_givens_recurrence_validates():
    theta, b, h0 = torch.randn(2, 3, 2, 1, 2), torch.randn(2, 3, 2, 4), torch.randn(2, 2, 4)
    assert _givens_recurrence(theta, b, h0).shape == (2, 3, 2, 4)
    with pytest.raises(ValueError, match="b"):
        _givens_recurrence(theta, b[..., :2], h0)
    with pytest.raises(ValueError, match="h0"):
        _givens_recurrence(theta, b, h0[:1])
    with pytest.raises(ValueError, match="scale"):
        _givens_recurrence(theta, b, h0, scale=torch.randn(2, 3, 2, 2))
    with pytest.raises(ValueError, match="log_gamma"):
        _givens_recurrence(theta, b, h0, log_gamma=torch.randn(2, 3, 1))
    with pytest.raises(TypeError, match="b"):
        _givens_recurrence(theta, b.double(), h0)


# ---------------------------------------------------------------- dtypes and gradients


@pytest.mark.parametrize("case", CASES)
def test_float32_close_to_float64(case):
    m64 = make(case, **DECAYS["fixed"])
    m32 = copy.deepcopy(m64).float()
    x, h0, dt = inputs(m64, 7)
    y64 = m64(x, h0, dt)
    y32 = m32(x.float(), h0.float(), dt.float())
    assert y32.dtype == torch.float32
    err = (y32.double() - y64).abs().max() / y64.abs().max()
    assert err <= 1e-4, err.item()


@pytest.mark.parametrize(
    "case,extra",
    [
        ("log_h0", DECAYS["learnable_log1p"]),
        ("signed_coupled_h0", DECAYS["fixed"]),
        ("rotation_nosnap", DECAYS["learnable_log1p"]),
        ("givens", DECAYS["learnable_log1p"]),
    ],
)
def test_gradcheck(case, extra):
    m = make(case, **extra)
    x, h0, dt = inputs(m, 3)
    x, h0 = x[:, :3].clone().requires_grad_(), h0.clone().requires_grad_()
    names = ["linear_z.weight"] + (["decay.rho"] if m.decay.rho is not None else [])
    params = tuple(dict(m.named_parameters())[n].detach().clone().requires_grad_() for n in names)

    def f(x, h0, *ps):
        return functional_call(m, dict(zip(names, ps, strict=True)), (x, h0, dt))

    assert torch.autograd.gradcheck(f, (x, h0, *params), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("case", ["log", "signed_coupled_h0", "rotation", "givens"])
def test_cpu_autocast_bfloat16(case):
    """Under autocast the projections are bfloat16 while x and h0 are float32: states,
    decay and scan inputs must follow the projections' dtype."""
    m = make(case, **DECAYS["fixed"]).float()
    x, h0, dt = (t.float() for t in inputs(m, 5))
    ref = m(x, h0, dt)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = m(x, h0, dt)
        y_t = m.step(x[:, 0], h0[:, 0], dt[:, 0])
    assert y.dtype == y_t.dtype == torch.bfloat16
    assert ((y.float() - ref).abs().max() / ref.abs().max()) < 0.1
