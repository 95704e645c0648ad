"""mingru_jax mixers, block and stack: forward vs step (through the ``flax.nnx.RNN`` cells),
chaining state, jit + vmap + float64 gradient checks, decay conventions, and bad input.

Numbers against independent oracles are checked in tests/parity/test_convert.py (against the
PyTorch twins and the float64 oracles of tests/reference.py). Every model call here is jitted
once per shape: compile time, not run time, is the cost on CPU.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

import mingru_jax  # noqa: E402
from mingru_jax.block import DECAY_KWARGS  # noqa: E402
from mingru_jax.mixers._common import g, log_g  # noqa: E402

IN, HID, B, T = 3, 4, 2, 6

# name, constructor kwargs; all with decay so Δt handling is exercised everywhere.
MIXERS = {
    "log": ("MinGRU", dict(learnable_h0=True, decay="learnable", log1p_delta=True)),
    "signed": ("SignedMinGRU", dict(coupled=True, decay="fixed", decay_rate=0.5)),
    "rotation": ("RotationMinGRU", dict(snap=(2, 3), decay="learnable")),
    "givens": ("GivensMinGRU", dict(block_size=4, rounds=3, decay="learnable")),
    "delta": ("DeltaMinGRU", dict(n_heads=2, nh=2, chunk_size=4, decay="learnable")),
}


def make(name, seed=0, **extra):
    cls, kw = MIXERS[name]
    return getattr(mingru_jax, cls)(IN, HID, **{**kw, **extra}, rngs=nnx.Rngs(seed))


def inputs(seed, T=T, dtype=np.float32):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, T, IN)).astype(dtype)
    dt = rng.uniform(0.0, 2.0, (B, T)).astype(dtype)
    dt[0, 1] = np.nan  # sanitized to 0
    dt[1, 2] = np.inf  # sanitized to 1e10: a full reset of the transition
    return jnp.asarray(x), jnp.asarray(dt)


def pure(module, method="__call__", **kw):
    """``f(state, *args)`` running ``module.method`` on the given parameters, jitted."""
    graphdef, state = nnx.split(module)

    def f(state, *args):
        return getattr(nnx.merge(graphdef, state), method)(*args, **kw)

    return jax.jit(f), state


def _last_state(name, out):
    return out[1] if name == "delta" else out[:, -1:]


@pytest.mark.parametrize("name", list(MIXERS))
def test_forward_equals_rnn_cell_and_chaining(name):
    m = make(name)
    x, dt = inputs(1)
    rs = {"return_state": True} if name == "delta" else {}
    fwd, state = pure(m, **rs)
    full = fwd(state, x, None, dt)
    y_full = full[0] if name == "delta" else full
    assert y_full.shape == (B, T, HID)

    # Chaining: two halves with the returned state equal one call on the whole sequence.
    h = m.initial_state(B)[:, None]
    first = fwd(state, x[:, :3], h, dt[:, :3])
    second = fwd(state, x[:, 3:], _last_state(name, first), dt[:, 3:])
    y_first = first[0] if name == "delta" else first
    y_second = second[0] if name == "delta" else second
    np.testing.assert_allclose(jnp.concatenate([y_first, y_second], 1), y_full, atol=2e-5)
    if name == "delta":
        np.testing.assert_allclose(second[1], full[1], atol=2e-5)

    # The step form, run by flax.nnx.RNN through the cell (Δt as the last input feature).
    cell = getattr(mingru_jax, MIXERS[name][0] + "Cell")(mixer=m)
    rnn = nnx.RNN(cell, return_carry=True)
    carry, y_rnn = rnn(jnp.concatenate([x, dt[..., None]], -1))
    np.testing.assert_allclose(y_rnn, y_full, atol=2e-5)
    want_carry = full[1][:, 0] if name == "delta" else y_full[:, -1]
    np.testing.assert_allclose(carry, want_carry, atol=2e-5)

    # step() with its default start (None) equals the cell's start from initial_state().
    step, _ = pure(m, "step")
    out = step(state, x[:, 0], None, dt[:, :1])
    y0 = out[0] if name == "delta" else out
    np.testing.assert_allclose(y0, y_rnn[:, 0], atol=2e-5)


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("name", list(MIXERS))
def test_jit_vmap_grad_float64(name):
    extra = {"snap": None} if name == "rotation" else {}  # snapping is piecewise constant
    with jax.enable_x64(True):
        m = make(name, seed=3, param_dtype=jnp.float64, **extra)
        if name == "log":  # h0 starts at 0, the kink of g: move it off for finite differences
            m.h0[...] = jnp.linspace(-0.8, 0.9, HID)
        x, dt = inputs(4, T=3, dtype=np.float64)
        dt = jnp.nan_to_num(dt, posinf=0.7, nan=0.2)  # finite differences need a smooth point
        graphdef, params = nnx.split(m)

        def f(params, x, dt):
            out = nnx.merge(graphdef, params)(x, None, dt)
            return out

        vf = jax.jit(jax.vmap(f, in_axes=(None, 0, 0)))
        xs, dts = jnp.stack([x, 0.5 * x]), jnp.stack([dt, dt + 0.1])
        ys = vf(params, xs, dts)
        for i in range(2):
            np.testing.assert_allclose(ys[i], jax.jit(f)(params, xs[i], dts[i]), atol=1e-12)
        check_grads(vf, (params, xs, dts), order=1, modes=("rev",), atol=1e-6, rtol=1e-6, eps=1e-5)


@pytest.mark.parametrize("name", ["log", "givens", "delta"])
def test_zero_gap_decay_equals_no_decay_and_keeps_init(name):
    on = make(name, seed=5)
    off = make(name, seed=5, decay=None)
    for path, var in nnx.to_flat_state(nnx.state(off, nnx.Param)):
        node = on
        for p in path:
            node = node[p] if isinstance(p, int) else getattr(node, p)
        np.testing.assert_array_equal(node[...], var[...])  # decay never changes other inits
    x, _ = inputs(6, T=3)
    y_on = jax.jit(lambda x, dt: on(x, None, dt))(x, jnp.zeros((B, 3, 1)))
    np.testing.assert_array_equal(y_on, jax.jit(lambda x: off(x))(x))


def test_g_and_log_g_conventions():
    xs = jnp.array([-3.0, -1e-3, 0.0, 1e-3, 2.0])
    np.testing.assert_allclose(g(xs), [1 / (1 + math.exp(3)), 1 / (1 + math.exp(1e-3)), 0.5,
                                       0.501, 2.5], rtol=1e-6)
    np.testing.assert_allclose(jnp.exp(log_g(xs)), g(xs), rtol=1e-6)
    d = jax.grad(lambda v: log_g(v).sum())(jnp.array([0.0]))
    assert float(d[0]) == 2.0  # the x ≥ 0 branch at 0, as in PyTorch: 1 / 0.5


def test_rotation_snap_rounds_half_to_even_with_straight_through_gradient():
    m = mingru_jax.RotationMinGRU(IN, 8, snap=(2, 3, 4, 6), rngs=nnx.Rngs(0))
    K = np.array([2, 3, 4, 6], np.float32)
    unit = (2 * np.pi / K).astype(np.float32)
    theta = jnp.asarray(np.stack([1.5 * unit, 0.49 * unit, 2.5 * unit]))  # ties and a non-tie
    snapped = m.snap_angles(theta)
    np.testing.assert_allclose(snapped, np.stack([2 * unit, 0 * unit, 2 * unit]), atol=1e-6)
    grad = jax.grad(lambda t: (m.snap_angles(t) * jnp.arange(4.0)).sum())(theta)
    np.testing.assert_array_equal(grad, np.tile(np.arange(4.0), (3, 1)))


@pytest.mark.parametrize("mixer_expansion", [1, 3])
@pytest.mark.parametrize("name", [name for name in MIXERS if name != "delta"])
def test_block_state_is_mixer_expansion_wide(name, mixer_expansion):
    """The mixer gets ``hidden_size = m·d_model`` and ``out_proj`` takes its output back to
    ``d_model``: the block's output is ``x + out_proj(mixer(LN(x)))`` (no MLP here)."""
    kwargs = {k: v for k, v in MIXERS[name][1].items() if k not in DECAY_KWARGS}
    learnable_h0 = kwargs.pop("learnable_h0", False)  # the block's own argument
    block = mingru_jax.MinGRUBlock(HID, mlp_expansion=0, learnable_h0=learnable_h0, mixer=name,
                                   mixer_kwargs=kwargs, mixer_expansion=mixer_expansion,
                                   rngs=nnx.Rngs(0))
    x = jnp.asarray(np.random.default_rng(4).standard_normal((B, T, HID)), jnp.float32)
    out, state = block(x)
    width = mixer_expansion * HID
    assert block.mixer.hidden_size == width and state.shape == (B, 1, width)
    assert out.shape == (B, T, HID)
    y = block.mixer(block.norm1(x))
    if mixer_expansion == 1:
        assert block.out_proj is None
    else:
        assert block.out_proj.kernel.shape == (width, HID)
        y = block.out_proj(y)  # at the block's own matmul precision (TF32 or not on a GPU)
    np.testing.assert_allclose(out, x + y, atol=2e-5)
    np.testing.assert_allclose(state, block.mixer(block.norm1(x))[:, -1:], atol=2e-5)


@pytest.mark.parametrize("mixer_expansion", [1, 3])
def test_stack_chaining_and_step_match_forward(mixer_expansion):
    model = mingru_jax.MinGRUStack(
        IN, HID, 2, mlp_expansion=2, mixer=["signed", "givens"],
        mixer_kwargs={"givens": {"block_size": 2, "rounds": 2}},
        mixer_expansion=mixer_expansion, rngs=nnx.Rngs(0),
    )
    x, _ = inputs(7, T=4)
    fwd, params = pure(model)
    out, state = fwd(params, x, None)
    assert [s.shape for s in state] == [(B, 1, mixer_expansion * HID)] * 2
    out_a, st = fwd(params, x[:, :2], [m.mixer.initial_state(B)[:, None] for m in model.blocks])
    out_b, st = fwd(params, x[:, 2:], st)
    np.testing.assert_allclose(jnp.concatenate([out_a, out_b], 1), out, atol=2e-5)
    for a, b in zip(st, state, strict=True):
        np.testing.assert_allclose(a, b, atol=2e-5)
    step, _ = pure(model, "step")
    s = [m.mixer.initial_state(B) for m in model.blocks]
    for t in range(4):
        o, s = step(params, x[:, t], s)
        np.testing.assert_allclose(o, out[:, t], atol=2e-5)
    assert model.init_state() == [None, None]


def test_bad_inputs_raise_clear_errors():
    m = make("log")
    x, dt = inputs(8, T=3)
    with pytest.raises(ValueError, match=r"x must have shape \(B, T, 3\)"):
        m(jnp.ones((2, 2, 5)), None, dt)
    with pytest.raises(TypeError, match="x must be a jax.Array"):
        m([[1.0]], None, dt)
    with pytest.raises(ValueError, match="needs delta_t"):
        m(x)
    with pytest.raises(ValueError, match=r"delta_t must have shape \(B, T\)"):
        m(x, None, dt[:, :1])
    with pytest.raises(ValueError, match="non-negative MinGRU state"):
        m(x, -jnp.ones((B, 1, HID)), dt)
    with pytest.raises(ValueError, match="non-negative MinGRU state"):
        m.step(x[:, 0], -jnp.ones((B, HID)), dt[:, 0])
    with pytest.raises(ValueError, match=r"h_0 must have shape \(B, 1, 4\)"):
        m(x, jnp.ones((B, HID)), dt)
    with pytest.raises(ValueError, match="decay=None"):
        make("signed", decay=None)(x, None, dt)
    with pytest.raises(ValueError, match="decay must be"):
        make("signed", decay="exp")
    with pytest.raises(ValueError, match="decay_rate"):
        make("signed", decay_rate=0.0)
    with pytest.raises(ValueError, match="even"):
        mingru_jax.RotationMinGRU(IN, 5, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="snap"):
        mingru_jax.RotationMinGRU(IN, 4, snap=(0,), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="block_size"):
        mingru_jax.GivensMinGRU(IN, 6, block_size=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="rounds"):
        mingru_jax.GivensMinGRU(IN, 8, block_size=4, rounds=0, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="n_heads"):
        mingru_jax.DeltaMinGRU(IN, 6, n_heads=4, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="mixer_kwargs must not contain"):
        mingru_jax.MinGRUBlock(4, mixer_kwargs={"hidden_size": 3}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="mixer must be one of"):
        mingru_jax.MinGRUBlock(4, mixer="lstm", rngs=nnx.Rngs(0))
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match="mixer_expansion must be an int ≥ 1"):
            mingru_jax.MinGRUBlock(4, mixer_expansion=bad, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="mixer_expansion=2 does not apply to the 'delta'"):
        mingru_jax.MinGRUStack(3, 4, 2, mixer=["log", "delta"], mixer_expansion=2,
                               mixer_kwargs={"delta": {"n_heads": 2}}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="keyed by mixer name"):
        mingru_jax.MinGRUStack(3, 4, 2, mixer=["log", "signed"], mixer_kwargs={"decay": "fixed"},
                               rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="cell inputs must have 4 features"):
        cell = mingru_jax.MinGRUCell(mixer=m)
        cell(m.initial_state(B), x[:, 0])
    with pytest.raises(TypeError, match="mixer must be a MinGRU"):
        mingru_jax.MinGRUCell(mixer=make("signed"))
