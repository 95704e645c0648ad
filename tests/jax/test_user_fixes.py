"""What a new user hit (issue #47), Flax frontend: a NaN initial state is a ``ValueError``
naming the argument at the entry of every public call that takes one, when the state is
concrete (never under ``jax.jit``, never in ``step``), checked once per call however deep the
call goes; a 64-bit ``param_dtype``/``dtype`` without ``jax_enable_x64`` is an error at
construction; and ``check_cu_seqlens``, the opt-in check of packed offsets under ``jax.jit``
through ``checkify``. Imports no torch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from jax.experimental import checkify

import mingru_jax
from mingru_jax import _validate
from tests import user_fix_cases as cases
from tests.user_fix_cases import BAD_OFFSETS, IN, MIXERS


def _mixer(name: str, seed: int = 0, **extra):
    cls, kwargs = MIXERS[name]
    return getattr(mingru_jax, cls)(IN, **kwargs, **extra, rngs=nnx.Rngs(seed))


def _with_nan(shape: tuple[int, ...], rng: np.random.Generator,
              positive: bool = False) -> jax.Array:
    h = rng.random(shape) + 0.1 if positive else rng.standard_normal(shape)
    h.reshape(-1)[rng.integers(h.size)] = np.nan
    return jnp.asarray(h, jnp.float32)


def _normal(rng: np.random.Generator, *shape: int) -> jax.Array:
    return jnp.asarray(rng.standard_normal(shape), jnp.float32)


@pytest.fixture
def count_checks(monkeypatch):
    """The states every ``no_nan`` call was given, in order."""
    return cases.count_no_nan(monkeypatch, _validate)


@pytest.mark.parametrize("name", MIXERS)
def test_a_nan_h_0_is_a_value_error_naming_it(name):
    rng = np.random.default_rng(201)
    m = _mixer(name)
    B, T = 3, 5
    h0 = _with_nan((B, 1, m.state_size), rng, positive=name == "log")
    x = _normal(rng, B, T, IN)
    match = "h_0 must be a non-negative" if name == "log" else "h_0 holds NaN"
    with pytest.raises(ValueError, match=match):
        m(x, h_0=h0)


@pytest.mark.parametrize("name", MIXERS)
def test_a_nan_h_0_of_a_packed_call_is_a_value_error(name):
    rng = np.random.default_rng(202)
    m = _mixer(name)
    cu = jnp.array([0, 4, 4, 9])
    h0 = _with_nan((3, 1, m.state_size), rng, positive=name == "log")
    with pytest.raises(ValueError, match="h_0"):
        m(_normal(rng, 1, 9, IN), h_0=h0, cu_seqlens=cu)


@pytest.mark.parametrize("name", ["signed", "rotation", "givens", "delta"])
def test_under_jit_the_state_is_not_read(name):
    rng = np.random.default_rng(203)
    m = _mixer(name)
    h0 = jnp.full((2, 1, m.state_size), jnp.nan)
    y = nnx.jit(lambda m, x, h: m(x, h_0=h))(m, _normal(rng, 2, 3, IN), h0)
    assert y.shape[:2] == (2, 3)


@pytest.mark.parametrize("name", ["signed", "rotation", "givens", "delta"])
def test_block_names_h_0_and_checks_it_once(name, count_checks):
    rng = np.random.default_rng(204)
    block = mingru_jax.MinGRUBlock(6, mlp_expansion=1, mixer=name,
                                   mixer_kwargs=cases.block_kwargs(name), rngs=nnx.Rngs(1))
    cases.assert_block_checks_h_0_once(block, _normal(rng, 3, 5, 6),
                                       with_nan=lambda shape: _with_nan(shape, rng),
                                       calls=count_checks)


def test_stack_names_the_layer_and_checks_every_layer_once(count_checks):
    rng = np.random.default_rng(205)
    stack = mingru_jax.MinGRUStack(
        5, 6, n_layers=3, mlp_expansion=0, mixer=["signed", "givens", "log"],
        mixer_kwargs={"givens": {"block_size": 2, "rounds": 1}}, rngs=nnx.Rngs(2))
    x = _normal(rng, 2, 7, 5)
    _, state = stack(x)
    count_checks.clear()
    stack(x, state)
    assert count_checks == [["state[0]", "state[1]", "state[2]"]]
    layer = int(rng.integers(3))
    bad = list(state)
    bad[layer] = _with_nan(tuple(state[layer].shape), rng)
    with pytest.raises(ValueError, match=rf"state\[{layer}\] holds NaN"):
        stack(x, bad)


def test_linear_recurrence_names_initial_state(count_checks):
    rng = np.random.default_rng(206)
    a, b = jnp.tanh(_normal(rng, 3, 5, 7)), _normal(rng, 3, 5, 7)
    with pytest.raises(ValueError, match="initial_state holds NaN"):
        mingru_jax.linear_recurrence(a, b, _with_nan((3, 7), rng))
    with pytest.raises(ValueError, match="initial_state holds NaN"):
        mingru_jax.linear_recurrence(a[:1], b[:1], _with_nan((2, 7), rng),
                                     cu_seqlens=jnp.array([0, 2, 5]))
    count_checks.clear()
    mingru_jax.linear_scan(a[:1], b[:1], cu_seqlens=jnp.array([0, 2, 5]))
    assert count_checks == []  # its internal recurrence starts from a constant


def test_step_does_not_check(count_checks):
    rng = np.random.default_rng(207)
    m = _mixer("signed")
    h = m.step(_normal(rng, 2, IN), _with_nan((2, 5), rng))
    assert count_checks == []
    assert bool(jnp.isnan(h).any())


# --------------------------------------------------------------------------- 64-bit dtypes

BUILDERS = {
    **{name: (lambda name=name, **kw: _mixer(name, **kw)) for name in MIXERS},
    "block": lambda **kw: mingru_jax.MinGRUBlock(6, mixer="givens",
                                                 mixer_kwargs={"block_size": 2}, **kw,
                                                 rngs=nnx.Rngs(0)),
    "stack": lambda **kw: mingru_jax.MinGRUStack(3, 6, 2, mixer=["signed", "givens"],
                                                 mixer_kwargs={"givens": {"block_size": 2}},
                                                 **kw, rngs=nnx.Rngs(0)),
}


@pytest.mark.parametrize("which", BUILDERS)
@pytest.mark.parametrize("arg", ["param_dtype", "dtype"])
def test_64_bit_dtypes_without_x64_fail_at_construction(which, arg):
    with jax.enable_x64(False), pytest.raises(
            ValueError, match=rf"{arg}=float64 needs 64-bit JAX, but jax_enable_x64 is off"):
        BUILDERS[which](**{arg: jnp.float64})


def test_64_bit_dtypes_with_x64_build_and_run():
    rng = np.random.default_rng(208)
    with jax.enable_x64(True):
        m = BUILDERS["signed"](param_dtype=jnp.float64)
        assert m(jnp.asarray(rng.standard_normal((1, 4, IN)))).dtype == jnp.float64


# --------------------------------------------------------------------------- check_cu_seqlens

def test_check_cu_seqlens_on_concrete_offsets_is_the_host_check():
    cases.assert_host_check_of_offsets(mingru_jax.check_cu_seqlens, jnp.array)


def test_check_cu_seqlens_under_jit_is_a_checkify_error():
    rng = np.random.default_rng(209)
    m = _mixer("signed")

    def run(m, x, cu):
        return m(x, cu_seqlens=mingru_jax.check_cu_seqlens(cu, x.shape[1]))

    checked = nnx.jit(checkify.checkify(run, errors=checkify.user_checks))
    x = _normal(rng, 1, 9, IN)
    good = jnp.array([0, 4, 4, 9])
    err, y = checked(m, x, good)
    assert err.get() is None
    np.testing.assert_allclose(y, m(x, cu_seqlens=good), rtol=1e-6, atol=1e-6)
    for offsets, message in BAD_OFFSETS:
        err, _ = checked(m, x, jnp.array(offsets))
        with pytest.raises(checkify.JaxRuntimeError, match=f"cu_seqlens {message}"):
            err.throw()
    with pytest.raises(ValueError, match="checkify"):  # traced without checkify: refused
        nnx.jit(run)(m, x, good)
