"""``mingru_jax.linear_recurrence`` against the float64 loop of tests/reference.py, on the
eager path (``jax.lax.associative_scan``) and through the jax-triton launcher (Triton's
interpreter on CPU): outputs and every gradient, both launch strategies, chaining through the
final state, ``jit`` / ``grad`` / ``vmap``, and bad input. Imports no torch.

The backend and the plan are read when a function is traced, and ``jax.jit`` reuses a trace
of the same Python function for the same input types even through a new ``jax.jit`` wrapper:
each (backend, plan) therefore gets its own jitted function (:func:`_jitted`), entering the
backend and the plan inside the trace. On a GPU the eager references are jitted too (op by
op, each of their many small operations is an XLA compilation there).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.reference import loop_recurrence

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PLANS = {"walk": {}, "lookback": dict(strategy="lookback", block_t=4, block_d=16)}
ON_GPU = jax.default_backend() == "gpu"


def _inputs(B, T, D, seed=0):
    rng = np.random.default_rng(seed)
    a = np.tanh(1.5 * rng.standard_normal((B, T, D)))
    b = rng.standard_normal((B, T, D))
    h0 = rng.standard_normal((B, D))
    w, w_T = rng.standard_normal((B, T, D)), rng.standard_normal((B, D))
    return a, b, h0, w, w_T


def _loss_and_grads(fn, a, b, h0, w, w_T):
    def loss(a, b, h0):
        h, h_T = fn(a, b, h0)
        return (h * w).sum() + (h_T * w_T).sum()

    value, grads = jax.value_and_grad(loss, argnums=(0, 1, 2))(a, b, h0)
    return value, grads


def _lib(a, b, h0):
    return mingru_jax.linear_recurrence(a, b, initial_state=h0, return_final_state=True)


_lib_loss_and_grads = functools.partial(_loss_and_grads, _lib)


@functools.cache
def _jitted(fn, backend, plan="walk"):
    """``jax.jit`` of ``fn`` traced under ``backend`` and ``plan`` (one per triple)."""

    def run(*args):
        with mingru_jax.use_backend(backend), switches.forced("linear_recurrence",
                                                              **PLANS[plan]):
            return fn(*args)

    return jax.jit(run)


def _oracle(a, b, h0, w, w_T):
    """Outputs, and gradients by central differences of the float64 loop's linear loss
    (exact for a loss linear in ``b`` and ``h0``; ``a`` by the adjoint recurrence)."""
    h, h_T = loop_recurrence(a, b, h0)
    T = a.shape[1]
    g = np.array(w, dtype=np.float64)
    g[:, -1] += w_T
    adj = np.zeros_like(g)
    nxt = np.zeros_like(g[:, 0])
    for t in range(T - 1, -1, -1):
        nxt = g[:, t] + (a[:, t + 1] * nxt if t + 1 < T else 0.0)
        adj[:, t] = nxt
    h_prev = np.concatenate([h0[:, None], h[:, :-1]], 1)
    return h, h_T, (adj * h_prev, adj, a[:, 0] * adj[:, 0])


@pytest.mark.parametrize("backend", ["eager", "triton"])
@pytest.mark.parametrize("plan", ["walk", "lookback"])
@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 37, 5), (2, 64, 16)])
def test_matches_the_float64_loop(backend, plan, shape):
    if backend == "eager" and plan != "walk":
        pytest.skip("the plan is a kernel choice")
    a, b, h0, w, w_T = _inputs(*shape)
    h_o, hT_o, grads_o = _oracle(a, b, h0, w, w_T)
    f32 = [jnp.asarray(x, jnp.float32) for x in (a, b, h0)]
    weights = (jnp.asarray(w, jnp.float32), jnp.asarray(w_T, jnp.float32))
    h, h_T = _jitted(_lib, backend, plan)(*f32)
    if ON_GPU and backend == "eager":
        _, grads = _jitted(_lib_loss_and_grads, backend)(*f32, *weights)
    else:
        with mingru_jax.use_backend(backend), switches.forced("linear_recurrence",
                                                              **PLANS[plan]):
            _, grads = _loss_and_grads(_lib, *f32, *weights)
    assert h.dtype == jnp.float32 and h.shape == shape and h_T.shape == (shape[0], shape[2])
    assert rel_err(np.asarray(h), h_o) < 2e-6 and rel_err(np.asarray(h_T), hT_o) < 2e-6
    for got, want in zip(grads, grads_o, strict=True):
        assert rel_err(np.asarray(got), want) < 2e-6


def test_chaining_and_vmap():
    a, b, h0, _, _ = _inputs(2, 23, 4, seed=1)
    a, b, h0 = (jnp.asarray(x, jnp.float32) for x in (a, b, h0))
    with mingru_jax.use_backend("triton"):
        whole, whole_T = _lib(a, b, h0)
        first, mid = _lib(a[:, :9], b[:, :9], h0)
        second, end = _lib(a[:, 9:], b[:, 9:], mid)
        batched = jax.vmap(lambda a, b: mingru_jax.linear_recurrence(a, b))(a[None], b[None])
    assert rel_err(np.asarray(jnp.concatenate([first, second], 1)), np.asarray(whole)) < 1e-6
    assert rel_err(np.asarray(end), np.asarray(whole_T)) < 1e-6
    plain = (_jitted(mingru_jax.linear_recurrence, "eager")(a, b) if ON_GPU
             else _eager_plain(a, b))
    assert rel_err(np.asarray(batched[0]), np.asarray(plain)) < 1e-6


def _eager_plain(a, b):
    with mingru_jax.use_backend("eager"):
        return mingru_jax.linear_recurrence(a, b)


def test_bad_input_names_the_argument():
    a = jnp.ones((2, 5, 3))
    with pytest.raises(ValueError, match="initial_state"):
        mingru_jax.linear_recurrence(a, a, initial_state=jnp.ones((2, 4)))
    with pytest.raises(ValueError, match="b must have shape"):
        mingru_jax.linear_recurrence(a, jnp.ones((2, 5, 4)))
    with pytest.raises(TypeError, match="initial_state"):
        mingru_jax.linear_recurrence(a, a, initial_state=jnp.ones((2, 3), jnp.float16))


def test_auto_keeps_xla_for_the_smallest_inputs():
    """On a GPU, ``auto`` runs XLA's scan up to ``EAGER_MAX_ELEMENTS`` (measured faster there,
    both dispatch-bound) and the kernel above it."""
    from mingru_jax._launch import linear_recurrence as launcher

    limit = launcher.EAGER_MAX_ELEMENTS
    small = jax.ShapeDtypeStruct((16, limit // (16 * 128), 128), jnp.float32)
    large = jax.ShapeDtypeStruct((16, 4 * limit // (16 * 128), 128), jnp.float32)
    assert small.size == limit and not launcher.prefer_over_eager(small, small)
    assert launcher.prefer_over_eager(large, large, None, True)


@pytest.mark.parametrize("op", ["linear_recurrence", "parallel_scan_log"])
def test_backward_plans_its_tile_by_element_size(op, monkeypatch):
    """The jax-triton launchers plan the backward's look-back tile from the inputs' element
    size, as the PyTorch ones do (``bwd_tiles``: one warp per 16 × 128 tile in 16 bits)."""
    import importlib

    from mingru_jax._launch import _elementwise

    meta = importlib.import_module(f"mingru_kernels.launch.{op}")
    asked = []
    plan = _elementwise.plan

    def spy(name, x, tiles=None, *args, **kwargs):
        asked.append((str(x.dtype), dict(tiles or {})))
        return plan(name, x, tiles, *args, **kwargs)

    monkeypatch.setattr(_elementwise, "plan", spy)
    key_a, key_b = jax.random.split(jax.random.PRNGKey(5))
    for dtype, itemsize in ((jnp.bfloat16, 2), (jnp.float32, 4)):
        asked.clear()
        a = jax.random.uniform(key_a, (1, 80, 8))
        b = jax.random.normal(key_b, (1, 81 if op == "parallel_scan_log" else 80, 8))
        a = (-a if op == "parallel_scan_log" else a).astype(dtype)
        fn = getattr(mingru_jax, op)

        def loss(a, b, fn=fn):
            return fn(a, b).astype(jnp.float32).sum()

        with mingru_jax.use_backend("triton"):
            jax.grad(loss, argnums=(0, 1))(a, b.astype(dtype))
        assert (jnp.dtype(dtype).name, meta.bwd_tiles(itemsize)) in asked, asked
