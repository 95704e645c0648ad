"""DeltaMinGRU and the eager delta rule against the float64 loops of tests/reference.py (the
mixer oracle ``reference.delta`` and the op loop ``reference.loop_delta``)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from mingru._eager.delta_rule import delta_rule_eager
from mingru.mixers.delta import DeltaMinGRU
from tests import reference
from tests.helpers import close

F64 = torch.float64
TOL = 1e-11  # float64 against the oracles: max error relative to max(1, largest reference)


# --- helpers ------------------------------------------------------------------------------


def make(dtype=F64, seed=0, **kw):
    torch.manual_seed(seed)
    kw.setdefault("n_heads", 2)
    return DeltaMinGRU(kw.pop("input_size", 5), kw.pop("hidden_size", 6), **kw).to(dtype)


def gaps(B, T, dtype=F64):
    return torch.rand(B, T, dtype=dtype) * 2


def op_inputs(B, T, nh, H, dk, dv, dtype=F64):
    q = torch.randn(B, T, H, dk, dtype=dtype)
    k = torch.nn.functional.normalize(torch.randn(B, T, nh, H, dk, dtype=dtype), dim=-1)
    v = torch.randn(B, T, nh, H, dv, dtype=dtype)
    beta = 2 * torch.sigmoid(torch.randn(B, T, nh, H, dtype=dtype))
    log_gamma = -torch.rand(B, T, H, dtype=dtype)
    h0 = torch.randn(B, H, dk, dv, dtype=dtype)
    return q, k, v, beta, log_gamma, h0


# --- forward vs oracle ----------------------------------------------------------------------


@pytest.mark.parametrize("nh", [1, 2])
@pytest.mark.parametrize("decay", [None, "fixed", "learnable"])
@pytest.mark.parametrize("T", [1, 7])
def test_forward_matches_oracle(nh, decay, T):
    m = make(nh=nh, decay=decay, decay_rate=0.7, chunk_size=3, log1p_delta=decay == "fixed")
    if decay == "learnable":
        with torch.no_grad():
            m.decay.rho.copy_(torch.randn(2, dtype=F64))
    B = 3
    x = torch.randn(B, T, 5, dtype=F64)
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    dt = gaps(B, T) if decay else None
    for given in (None, h0):
        y, state = m(x, h_0=given, delta_t=dt, return_state=True)
        y_ref, S_ref = reference.delta(m, x, given, dt)
        assert y.shape == (B, T, 6) and state.shape == (B, 1, m.state_size)
        close(y, y_ref, TOL)
        close(state, S_ref.reshape(B, 1, -1), TOL)  # row-major from (H, d_k, d_v)


def test_explicit_head_sizes_and_no_bias():
    m = make(input_size=4, hidden_size=7, n_heads=3, d_k=2, d_v=3, nh=3, bias=False, chunk_size=2)
    assert m.out_proj.bias is None and m.state_size == 3 * 2 * 3
    x = torch.randn(2, 5, 4, dtype=F64)
    y, state = m(x, return_state=True)
    y_ref, S_ref = reference.delta(m, x)
    close(y, y_ref, TOL)
    close(state, S_ref.reshape(2, 1, -1), TOL)


def test_parameter_names_and_order():
    m = make(nh=2, decay="learnable")
    names = [n for n, _ in m.named_parameters()]
    expected = ["linear_q.weight", "linear_q.bias"]
    for group in ("linear_k", "linear_v", "linear_beta"):
        for j in range(2):
            expected += [f"{group}.{j}.weight", f"{group}.{j}.bias"]
    expected += ["out_proj.weight", "out_proj.bias", "decay.rho"]
    assert names == expected
    assert m.linear_q.out_features == 2 * 3 and m.linear_beta[1].out_features == 2


def test_op_matches_oracle_and_nonunit_keys():
    args = op_inputs(2, 9, 2, 3, 4, 3)
    q, k, v, beta, log_gamma, h0 = args
    k = k * 1.3  # the op itself must not assume unit keys
    o, S = delta_rule_eager(q, k, v, beta, log_gamma, h0, chunk_size=4)
    o_ref, S_ref = reference.loop_delta(q, k, v, beta, log_gamma, h0)
    close(o, o_ref, TOL)
    close(S, S_ref, TOL)
    o0, S0 = delta_rule_eager(q, k, v, beta, chunk_size=4)
    o0_ref, S0_ref = reference.loop_delta(q, k, v, beta, torch.zeros_like(log_gamma), torch.zeros_like(h0))
    close(o0, o0_ref, TOL)
    close(S0, S0_ref, TOL)


# --- forward vs step ----------------------------------------------------------------------


@pytest.mark.parametrize("nh,decay", [(1, None), (2, "learnable")])
def test_forward_matches_step(nh, decay):
    m = make(nh=nh, decay=decay, chunk_size=4)
    B, T = 2, 9
    x = torch.randn(B, T, 5, dtype=F64)
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    dt = gaps(B, T) if decay else None
    y, state = m(x, h_0=h0, delta_t=dt, return_state=True)
    h = h0[:, 0]
    for t in range(T):
        y_t, h = m.step(x[:, t], h, None if dt is None else dt[:, t])
        assert (y_t - y[:, t]).abs().max().item() <= 1e-10
    assert (h - state[:, 0]).abs().max().item() <= 1e-10
    y0, _ = m.step(x[:, 0], None, None if dt is None else dt[:, :1])  # (B, 1) gaps
    assert (y0 - m(x[:, :1], delta_t=None if dt is None else dt[:, :1])[:, 0]).abs().max() <= 1e-10


# --- chunking ---------------------------------------------------------------------------


@pytest.mark.parametrize("nh", [1, 3])
def test_chunk_size_never_changes_result(nh):
    m = make(nh=nh, decay="fixed")
    B, T = 2, 7
    x = torch.randn(B, T, 5, dtype=F64)
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    dt = gaps(B, T)
    y_ref, S_ref = reference.delta(m, x, h0, dt)
    for cs in (1, 2, 3, T, T + 5, 64):  # 2 and 3 leave a ragged last chunk
        m.chunk_size = cs
        y, state = m(x, h_0=h0, delta_t=dt, return_state=True)
        close(y, y_ref, TOL)
        close(state, S_ref.reshape(B, 1, -1), TOL)


def test_chaining_states_matches_one_call():
    m = make(nh=2, decay="learnable", chunk_size=3)
    B, T, cut = 2, 8, 5
    x = torch.randn(B, T, 5, dtype=F64, requires_grad=True)
    dt = gaps(B, T)
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    w_y = torch.randn(B, T, 6, dtype=F64)
    w_s = torch.randn(B, 1, m.state_size, dtype=F64)

    def grads(loss):
        params = [x, *m.parameters()]
        return torch.autograd.grad(loss, params)

    y, s = m(x, h_0=h0, delta_t=dt, return_state=True)
    g_full = grads((y * w_y).sum() + (s * w_s).sum())
    y1, s1 = m(x[:, :cut], h_0=h0, delta_t=dt[:, :cut], return_state=True)
    y2, s2 = m(x[:, cut:], h_0=s1, delta_t=dt[:, cut:], return_state=True)
    y12 = torch.cat([y1, y2], dim=1)
    close(y12, y, TOL)
    close(s2, s, TOL)
    g_split = grads((y12 * w_y).sum() + (s2 * w_s).sum())
    for a, b in zip(g_split, g_full, strict=True):
        close(a, b, TOL)


# --- decay ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, F64])
@pytest.mark.parametrize("mode", ["fixed", "learnable"])
def test_zero_gap_is_bit_identical_to_no_decay(dtype, mode):
    plain = make(dtype, seed=3, nh=2, chunk_size=3)
    decayed = make(dtype, seed=3, nh=2, chunk_size=3, decay=mode, decay_rate=0.3, log1p_delta=True)
    for (n, p), (n2, p2) in zip(plain.named_parameters(), decayed.named_parameters(), strict=False):
        assert n == n2 and torch.equal(p, p2)  # enabling decay leaves the other inits alone
    B, T = 2, 7
    x = torch.randn(B, T, 5, dtype=dtype)
    h0 = torch.randn(B, 1, plain.state_size, dtype=dtype)
    zero = torch.zeros(B, T, 1, dtype=dtype)
    y0, s0 = plain(x, h_0=h0, return_state=True)
    y1, s1 = decayed(x, h_0=h0, delta_t=zero, return_state=True)
    assert torch.equal(y0, y1) and torch.equal(s0, s1)
    a0, b0 = plain.step(x[:, 0], h0[:, 0])
    a1, b1 = decayed.step(x[:, 0], h0[:, 0], torch.zeros(B, dtype=dtype))
    assert torch.equal(a0, a1) and torch.equal(b0, b1)


def test_bad_gaps_are_sanitized_and_finite():
    m = make(nh=2, decay="learnable", chunk_size=3)
    B, T = 2, 8
    x = torch.randn(B, T, 5, dtype=F64)
    dt = torch.tensor(
        [[0.5, 1e10, math.inf, 0.2, math.nan, -3.0, 1e30, 0.1],
         [-math.inf, 0.3, 1e10, 1e10, 0.0, math.inf, 2.0, math.nan]],
        dtype=F64,
    )
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    y, s = m(x, h_0=h0, delta_t=dt, return_state=True)
    y_ref, S_ref = reference.delta(m, x, h0, dt)
    close(y, y_ref, TOL)
    close(s, S_ref.reshape(B, 1, -1), TOL)
    # A gap of 1e10 wipes the state: the rest equals a fresh start at that token.
    y_tail = m(x[:1, 1:], delta_t=dt[:1, 1:])
    close(y[:1, 1:], y_tail, TOL)
    # Finite forward and gradients in float32 too (the 1e10 cap must not overflow anything).
    m32 = copy.deepcopy(m).float()
    x32 = x.float().requires_grad_(True)
    y32, s32 = m32(x32, h_0=h0.float(), delta_t=dt.float(), return_state=True)
    assert torch.isfinite(y32).all() and torch.isfinite(s32).all()
    (y32.square().sum() + s32.sum()).backward()
    assert torch.isfinite(x32.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in m32.parameters())


def test_huge_log_gamma_in_the_op():
    q, k, v, beta, log_gamma, h0 = op_inputs(1, 6, 2, 2, 3, 2)
    log_gamma[:, 2] = -1e10
    log_gamma[:, 4, 0] = -math.inf
    for cs in (1, 4, 6):
        o, S = delta_rule_eager(q, k, v, beta, log_gamma, h0, chunk_size=cs)
        o_ref, S_ref = reference.loop_delta(q, k, v, beta, log_gamma, h0)
        assert torch.isfinite(o).all() and torch.isfinite(S).all()
        close(o, o_ref, TOL)
        close(S, S_ref, TOL)


# --- errors -----------------------------------------------------------------------------


def test_decay_pairing_errors():
    plain, decayed = make(), make(decay="fixed")
    x = torch.randn(2, 3, 5, dtype=F64)
    with pytest.raises(ValueError, match="delta_t"):
        plain(x, delta_t=torch.zeros(2, 3, dtype=F64))
    with pytest.raises(ValueError, match="delta_t"):
        decayed(x)
    with pytest.raises(ValueError, match="delta_t"):
        plain.step(x[:, 0], delta_t=torch.zeros(2, dtype=F64))
    with pytest.raises(ValueError, match="delta_t"):
        decayed.step(x[:, 0])
    with pytest.raises(ValueError, match="delta_t"):
        decayed(x, delta_t=torch.zeros(2, 4, dtype=F64))


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (dict(hidden_size=7, n_heads=2), "n_heads"),
        (dict(nh=0), "nh"),
        (dict(chunk_size=0), "chunk_size"),
        (dict(n_heads=0), "n_heads"),
        (dict(d_k=0), "d_k"),
        (dict(d_v=-1), "d_v"),
        (dict(decay="sometimes"), "decay"),
        (dict(decay="fixed", decay_rate=0.0), "decay_rate"),
    ],
)
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        make(**kwargs)


def test_indivisible_hidden_is_fine_with_explicit_d_k():
    m = make(hidden_size=7, n_heads=2, d_k=3)
    assert m.d_v == 3 and m(torch.randn(1, 2, 5, dtype=F64)).shape == (1, 2, 7)


def test_bad_inputs():
    m = make()
    Z = m.state_size
    x = torch.randn(2, 3, 5, dtype=F64)
    with pytest.raises(ValueError, match="x"):
        m(x[0])
    with pytest.raises(ValueError, match="x"):
        m(torch.randn(2, 3, 4, dtype=F64))
    with pytest.raises(ValueError, match="x"):
        m(torch.randn(2, 0, 5, dtype=F64))
    with pytest.raises(TypeError, match="x"):
        m(torch.ones(2, 3, 5, dtype=torch.int64))
    with pytest.raises(ValueError, match="h_0"):
        m(x, h_0=torch.zeros(2, Z, dtype=F64))
    with pytest.raises(ValueError, match="h_0"):
        m(x, h_0=torch.zeros(2, 1, Z + 1, dtype=F64))
    with pytest.raises(ValueError, match="h_0"):
        m(x, h_0=torch.zeros(1, 1, Z, dtype=F64))
    with pytest.raises(ValueError, match="x_t"):
        m.step(x)
    with pytest.raises(ValueError, match="h_prev"):
        m.step(x[:, 0], torch.zeros(2, 1, Z, dtype=F64))
    with pytest.raises(ValueError, match="h_prev"):
        m.step(x[:, 0], torch.zeros(2, Z - 1, dtype=F64))
    with pytest.raises(ValueError, match="chunk_size"):
        delta_rule_eager(*op_inputs(1, 2, 1, 1, 2, 2), chunk_size=0)


# --- gradients and precision ------------------------------------------------------------------


def test_gradcheck_op():
    args = [a.requires_grad_(True) for a in op_inputs(1, 3, 2, 1, 2, 2)]
    assert torch.autograd.gradcheck(lambda *a: delta_rule_eager(*a, chunk_size=2), args)
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: delta_rule_eager(q, k, v, b, chunk_size=1), args[:4]
    )


def test_float32_close_to_float64():
    m = make(nh=2, decay="learnable", chunk_size=8, input_size=6, hidden_size=8)
    B, T = 2, 37
    x = torch.randn(B, T, 6, dtype=F64)
    dt = gaps(B, T) * 0.2
    h0 = torch.randn(B, 1, m.state_size, dtype=F64)
    y64, s64 = m(x, h_0=h0, delta_t=dt, return_state=True)
    m32 = copy.deepcopy(m).float()
    y32, s32 = m32(x.float(), h_0=h0.float(), delta_t=dt.float(), return_state=True)
    assert y32.dtype == torch.float32 and s32.dtype == torch.float32
    for a, b in ((y32, y64), (s32, s64)):
        rel = ((a.double() - b).abs().max() / b.abs().max()).item()
        assert rel <= 1e-4, rel


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_keep_their_dtype(dtype):
    args = op_inputs(1, 5, 2, 2, 4, 4)
    o, S = delta_rule_eager(*(a.to(dtype) for a in args), chunk_size=2)
    o_ref, S_ref = reference.loop_delta(*args)
    assert o.dtype == dtype and S.dtype == dtype
    rel = ((o.double() - o_ref).abs().max() / o_ref.abs().max()).item()
    assert rel <= 5e-2, rel
