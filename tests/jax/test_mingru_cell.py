"""``mingru_jax.mingru_cell`` / ``signed_mingru_cell`` against the float64 loop of
tests/reference.py, on the eager path and through the jax-triton launcher (Triton's interpreter
on CPU): outputs and every gradient (``k``, ``h_0``, both decay shapes), both launch strategies,
``jit`` / ``grad`` / ``vmap``, and bad input. Imports no torch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.reference import loop_cell

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PLANS = {"walk": dict(strategy="walk", block_t=8, block_d=4),
         "lookback": dict(strategy="lookback", block_t=4, block_d=16)}
CELLS = {"log": (False, False), "signed": (True, False), "coupled": (True, True)}


def _inputs(cell, B, T, D, decay, seed=0):
    rng = np.random.default_rng(seed)
    signed, _ = CELLS[cell]
    k = 2 * rng.standard_normal((B, T, (3 if signed else 2) * D))
    h0 = rng.random((B, D)) + 0.1
    lg = None if decay is None else -rng.random((B, T, 1 if decay == "B,T,1" else D))
    w, w_T = rng.standard_normal((B, T, D)), rng.standard_normal((B, D))
    return k, h0, lg, w, w_T


def _cell(cell, k, h0, lg):
    signed, coupled = CELLS[cell]
    if signed:
        return mingru_jax.signed_mingru_cell(k, h0, lg, coupled=coupled, return_final_state=True)
    return mingru_jax.mingru_cell(k, h0, lg, return_final_state=True)


def _value_and_grads(fn, k, h0, lg, w, w_T):
    def loss(k, h0, lg):
        h, h_T = fn(k, h0, lg)
        return (h * w).sum() + (h_T * w_T).sum(), (h, h_T)

    argnums = (0, 1) if lg is None else (0, 1, 2)
    (_, outs), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(k, h0, lg)
    return outs, grads


@pytest.mark.interpreter
@pytest.mark.parametrize("decay", [None, "B,T,1", "B,T,D"], ids=["no-decay", "decay1", "decayD"])
@pytest.mark.parametrize("cell", list(CELLS))
def test_triton_and_eager_match_the_loop(cell, decay, shape=(2, 19, 5)):
    """The kernels on every plan (the walk, the look-back) and the eager cell against the
    float64 loop (one oracle and one eager compile for all the plans)."""
    B, T, D = shape
    k, h0, lg, w, w_T = _inputs(cell, B, T, D, decay)
    f32 = [None if x is None else jnp.asarray(x, jnp.float32) for x in (k, h0, lg, w, w_T)]
    oracle = _oracle_grads(cell, k, h0, lg, w, w_T)
    for mode, plan in [("eager", None)] + [("triton", plan) for plan in PLANS]:
        with mingru_jax.use_backend(mode), switches.forced("mingru_cell", **PLANS.get(plan, {})):
            outs, grads = jax.jit(lambda *x: _value_and_grads(
                lambda *y: _cell(cell, *y), *x))(*f32)
        assert outs[0].dtype == jnp.float32 and outs[0].shape == (B, T, D)
        for got, want in zip((*outs, *grads), oracle, strict=True):
            assert got.shape == want.shape and rel_err(np.asarray(got), want) < 5e-6, plan


@pytest.mark.interpreter
@pytest.mark.parametrize("cell", ["log", "coupled"])
def test_whole_tiles_match_the_loop(cell):
    """T and D multiples of every plan's tile (no padding row or column)."""
    test_triton_and_eager_match_the_loop(cell, "B,T,D", shape=(2, 16, 16))


def _oracle_grads(cell, k, h0, lg, w, w_T):
    """The float64 loop's outputs and gradients (the loop stepped by ``jax.lax.scan``, checked
    against tests/reference.py's loop below, and differentiated by jax in float64)."""
    signed, coupled = CELLS[cell]
    with jax.enable_x64(True):
        args = [None if x is None else jnp.asarray(x, jnp.float64) for x in (k, h0, lg)]
        ww = [jnp.asarray(x, jnp.float64) for x in (w, w_T)]

        def fn(k, h0, lg):
            return _loop_jax(k, h0, lg, signed, coupled)

        outs, grads = _value_and_grads(fn, *args, *ww)
        return [np.asarray(x) for x in (*outs, *grads)]


def _loop_jax(k, h0, lg, signed, coupled):
    # The float64 loop of tests/reference.py, stepped with jax.lax.scan so jax can
    # differentiate it (the loop itself runs on NumPy or torch).
    D = h0.shape[1]

    def step(h, t):
        kt = k[:, t]
        z = jax.nn.sigmoid(kt[:, :D])
        if signed:
            a = jnp.tanh(kt[:, D:2 * D]) * ((1 - z) if coupled else 1)
            b = z * kt[:, 2 * D:]
        else:
            kh = kt[:, D:]
            a, b = 1 - z, z * jnp.where(kh >= 0, kh + 0.5, jax.nn.sigmoid(kh))
        if lg is not None:
            a = a * jnp.exp(lg[:, t])
        h = a * h + b
        return h, h

    h_T, hs = jax.lax.scan(step, h0, jnp.arange(k.shape[1]))
    return jnp.moveaxis(hs, 0, 1), h_T


@pytest.mark.interpreter
def test_the_jax_loop_is_the_reference_loop():
    k, h0, lg, *_ = _inputs("coupled", 2, 9, 3, "B,T,D")
    with jax.enable_x64(True):
        h, h_T = _loop_jax(jnp.asarray(k), jnp.asarray(h0), jnp.asarray(lg), True, True)
        want, want_T = loop_cell(k, h0, lg, True, True)
        assert rel_err(np.asarray(h), want) < 1e-12 and rel_err(np.asarray(h_T), want_T) < 1e-12


@pytest.mark.interpreter
def test_vmap_of_the_triton_cell():
    k, h0, lg, *_ = _inputs("signed", 3, 11, 4, "B,T,1")
    k, h0, lg = (jnp.asarray(x, jnp.float32) for x in (k, h0, lg))
    with mingru_jax.use_backend("triton"):
        got = jax.vmap(lambda k, h0, lg: _cell("signed", k[None], h0[None], lg[None])[0][0])(
            k, h0, lg)
    want, _ = loop_cell(np.asarray(k), np.asarray(h0), np.asarray(lg), True, False)
    assert rel_err(np.asarray(got), want) < 5e-6


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(k=jnp.ones((2, 5, 7))), r"multiple of 2"),
    (dict(k=jnp.ones((2, 5))), r"k must have shape \(B, T, 2·D\)"),
    (dict(k=jnp.ones((2, 5, 6)), initial_state=jnp.ones((2, 4))), r"initial_state must have"),
    (dict(k=jnp.ones((2, 5, 6)), log_gamma=jnp.ones((2, 5, 2))), r"log_gamma must have shape"),
    (dict(k=jnp.ones((2, 5, 6)), initial_state=jnp.ones((2, 3), jnp.bfloat16)), r"dtype"),
    (dict(k=jnp.ones((2, 5, 6), jnp.int32)), r"floating"),
])
def test_bad_inputs_name_the_argument(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        mingru_jax.mingru_cell(**kwargs)


@pytest.mark.parametrize("signed", [False, True])
def test_backward_plans_its_tile_by_element_size(signed):
    """The jax-triton cell plans its backward's look-back tile from the pre-activations'
    element size, as the PyTorch launcher does (``bwd_tiles``): one warp for 16-bit inputs."""
    from mingru_jax._launch import mingru_cell as launcher
    from mingru_kernels.launch import mingru_cell as meta

    gates = 3 if signed else 2
    for dtype, itemsize in ((jnp.bfloat16, 2), (jnp.float16, 2), (jnp.float32, 4)):
        k = jnp.zeros((16, 4096, gates * 256), dtype)
        cfg, *_ = launcher._plan(k, jnp.zeros((16, 256), dtype), signed, False)
        want = meta.bwd_tiles(signed, itemsize)["lookback_tile"]
        assert cfg["strategy"] == "lookback"
        assert (cfg["block_t"], cfg["block_d"], cfg["num_warps"]) == want
