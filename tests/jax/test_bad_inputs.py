"""Bad inputs a new user tried, in the Flax frontend: a negative or NaN ``h_0`` for MinGRU is
a ``ValueError`` on concrete arrays and a ``checkify`` error under ``jit`` (the documented
mechanism: wrap the jitted function in ``checkify.checkify``), and an input of another dtype
than the module's parameters is a ``TypeError`` naming ``x`` unless ``dtype=`` sets the
compute dtype (the same rule as ``torch.autocast`` in the PyTorch frontend). Imports no torch."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from flax import nnx
from jax.experimental import checkify

import mingru_jax

MIXERS = ["MinGRU", "SignedMinGRU", "RotationMinGRU", "GivensMinGRU", "DeltaMinGRU"]


@pytest.mark.parametrize("bad", [float("nan"), -0.25])
def test_mingru_rejects_nan_and_negative_states_eagerly(bad):
    m = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
    h0 = jnp.full((2, 1, 6), 0.5).at[1, 0, 3].set(bad)
    with pytest.raises(ValueError, match="h_0 must be a non-negative MinGRU state"):
        m(jnp.ones((2, 3, 4)), h_0=h0)
    with pytest.raises(ValueError, match="h_prev must be a non-negative MinGRU state"):
        m.step(jnp.ones((2, 4)), h0[:, 0])


def test_under_jit_the_check_is_a_checkify_error():
    m = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(m)

    def run(state, x, h0):
        return nnx.merge(graphdef, state)(x, h_0=h0)

    checked = checkify.checkify(jax.jit(run), errors=checkify.user_checks)
    x = jnp.ones((2, 3, 4))
    err, _ = checked(state, x, -jnp.ones((2, 1, 6)))
    with pytest.raises(checkify.JaxRuntimeError, match="h_0 must be a non-negative"):
        err.throw()
    err, h = checked(state, x, jnp.full((2, 1, 6), 0.5))
    err.throw()  # a valid state passes
    assert h.shape == (2, 3, 6)
    # Without checkify the jitted call still runs (the check costs nothing there).
    assert nnx.jit(lambda m, x: m(x, h_0=jnp.full((2, 1, 6), 0.5)))(m, x).shape == (2, 3, 6)


@pytest.mark.parametrize("name", MIXERS)
def test_input_of_another_dtype_is_a_type_error_naming_x(name):
    m = getattr(mingru_jax, name)(4, 8, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="x has dtype bfloat16, but .* parameters are float32"):
        m(jnp.ones((2, 3, 4), jnp.bfloat16))
    with pytest.raises(TypeError, match="x_t has dtype bfloat16"):
        m.step(jnp.ones((2, 4), jnp.bfloat16))


def test_block_and_stack_apply_the_same_rule_and_dtype_sets_the_compute_dtype():
    with pytest.raises(TypeError, match="x has dtype float16"):
        mingru_jax.MinGRUBlock(8, rngs=nnx.Rngs(0))(jnp.ones((2, 3, 8), jnp.float16))
    with pytest.raises(TypeError, match="x has dtype float16"):
        mingru_jax.MinGRUStack(4, 8, n_layers=1, rngs=nnx.Rngs(0))(jnp.ones((2, 3, 4), jnp.float16))
    m = mingru_jax.MinGRU(4, 6, dtype=jnp.bfloat16, rngs=nnx.Rngs(0))
    assert m(jnp.ones((2, 3, 4))).dtype == jnp.bfloat16  # cast to the compute dtype, as Flax does
