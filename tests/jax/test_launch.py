"""The jax-triton launchers (mingru_jax._launch) against the eager twins.

On CPU the launchers run their launch sequences on the shared Triton kernels through Triton's
interpreter on NumPy buffers (tests/conftest.py sets TRITON_INTERPRET=1), via a host
callback, with NaN-poisoned outputs; no PyTorch is involved. The GPU class runs the jax-triton
route.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_jax.dispatch import use_backend
from mingru_jax.scans import _delta_rule, _givens_recurrence

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _rand(key, shape, lo=-1.0, hi=1.0):
    return jax.random.uniform(key, shape, jnp.float32, lo, hi)


def _cases(seed, T, D):
    ks = jax.random.split(jax.random.key(seed), 12)
    B, n = 2, 3
    lin = (_rand(ks[0], (B, T, D)), _rand(ks[1], (B, T, D)))
    log = (-jnp.abs(_rand(ks[2], (B, T, D))) - 0.05, _rand(ks[3], (B, T + 1, D)))
    aff = (0.6 * _rand(ks[4], (B, T, n, 2, 2)), _rand(ks[5], (B, T, n, 2, 4)))
    giv = (_rand(ks[6], (B, T, n, 3, 2), -3, 3), _rand(ks[7], (B, T, n, 4)),
           _rand(ks[8], (B, n, 4)), _rand(ks[9], (B, T, n, 4), 0.2, 1.0),
           -jnp.abs(_rand(ks[10], (B, T, n))))
    return {
        "linear_scan": (mingru_jax.linear_scan, lin),
        "parallel_scan_log": (mingru_jax.parallel_scan_log, log),
        "matrix_affine_scan": (mingru_jax.matrix_affine_scan, aff),
        "givens_recurrence": (_givens_recurrence, giv),
    }


def _loss(fn):
    def f(*args):
        outs = jax.tree.leaves(fn(*args))
        # A fixed, non-uniform weighting so every output element's gradient matters.
        return sum(jnp.sum(o * jnp.cos(jnp.arange(o.size).reshape(o.shape))) for o in outs)

    return f


def _check(fn, args, jit=False):
    grad = jax.value_and_grad(_loss(fn), argnums=tuple(range(len(args))))
    if jit:
        grad = jax.jit(grad)
    with use_backend("triton"):
        out_k = fn(*args) if not jit else jax.jit(fn)(*args)
        val_k, g_k = grad(*args)
    with use_backend("eager"):
        out_e = fn(*args)
        val_e, g_e = jax.value_and_grad(_loss(fn), argnums=tuple(range(len(args))))(*args)
    for x, y in zip(jax.tree.leaves((out_k, val_k, g_k)), jax.tree.leaves((out_e, val_e, g_e)),
                    strict=True):
        assert np.all(np.isfinite(np.asarray(x)))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


OPS = ["linear_scan", "parallel_scan_log", "matrix_affine_scan", "givens_recurrence"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("T,D", [(1, 3), (7, 5)])
def test_forward_and_grad_match_eager(op, T, D):
    fn, args = _cases(T * 10 + D, T, D)[op]
    _check(fn, args)


@pytest.mark.parametrize("op", ["parallel_scan_log", "matrix_affine_scan"])
def test_under_jit(op):
    fn, args = _cases(3, 5, 3)[op]
    _check(fn, args, jit=True)


def test_givens_without_scale_or_decay():
    theta, b, h0, _, _ = _cases(4, 6, 3)["givens_recurrence"][1]
    _check(lambda t, b, h: _givens_recurrence(t, b, h), (theta, b, h0))


@pytest.mark.parametrize("op", ["linear_scan"])
def test_vmap(op):
    fn, args = _cases(5, 5, 3)[op]
    stacked = tuple(jnp.stack([x, 0.5 * x]) for x in args)  # a leading vmap axis of 2
    loss = _loss(fn)
    with use_backend("triton"):
        out_k = jax.vmap(fn)(*stacked)
        g_k = jax.vmap(jax.grad(loss, argnums=(0, 1)))(*stacked)
    with use_backend("eager"):
        out_e = jax.vmap(fn)(*stacked)
        g_e = jax.vmap(jax.grad(loss, argnums=(0, 1)))(*stacked)
    for x, y in zip(jax.tree.leaves((out_k, g_k)), jax.tree.leaves((out_e, g_e)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


def test_triton_mode_really_runs_the_launcher(monkeypatch):
    from mingru_jax._launch import linear_scan as launcher

    calls = []
    real = launcher.run
    monkeypatch.setattr(launcher, "run", lambda *a: calls.append(1) or real(*a))
    a, b = _cases(6, 4, 3)["linear_scan"][1]
    with use_backend("triton"):
        mingru_jax.linear_scan(a, b)
    assert calls == [1]


def _delta_args(seed, T, nh, decay, h0, B=2, H=2, dk=4, dv=3):
    ks = jax.random.split(jax.random.key(seed), 6)
    k = jax.random.normal(ks[1], (B, T, nh, H, dk))
    args = {
        "q": jax.random.normal(ks[0], (B, T, H, dk)) / dk**0.5,
        "k": k / jnp.linalg.norm(k, axis=-1, keepdims=True),
        "v": jax.random.normal(ks[2], (B, T, nh, H, dv)),
        "beta": 2 * jax.random.uniform(ks[3], (B, T, nh, H)),
    }
    if decay:
        args["log_gamma"] = -jax.random.uniform(ks[4], (B, T, H), minval=0.01, maxval=1.0)
    if h0:
        args["h0"] = jax.random.normal(ks[5], (B, H, dk, dv))
    return args


def _delta_fn(names):
    return lambda *xs: _delta_rule(**dict(zip(names, xs, strict=True)), chunk_size=4)


@pytest.mark.parametrize("T,nh,decay,h0", [(1, 2, True, True), (9, 1, False, False),
                                           (9, 2, True, True), (9, 2, True, False),
                                           (9, 1, False, True)])
def test_delta_rule_matches_eager(T, nh, decay, h0):
    """The delta-rule kernels (through the JAX launcher) against the JAX eager chunked form:
    outputs (o, h_T) and gradients w.r.t. every present input, ragged last chunk included."""
    args = _delta_args(T * 7 + nh, T, nh, decay, h0)
    _check(_delta_fn(list(args)), tuple(args.values()))


def _check_vmap(fn, args):
    """``jax.vmap`` over a leading axis of 2: kernels vs eager."""
    stacked = tuple(jnp.stack([x, 0.5 * x]) for x in args)
    with use_backend("triton"):
        out_k = jax.vmap(fn)(*stacked)
    with use_backend("eager"):
        out_e = jax.vmap(fn)(*stacked)
    for x, y in zip(jax.tree.leaves(out_k), jax.tree.leaves(out_e), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


def test_delta_rule_under_jit_and_vmap():
    args = _delta_args(11, 5, 2, True, True)
    fn = _delta_fn(list(args))
    _check(fn, tuple(args.values()), jit=True)
    _check_vmap(fn, tuple(args.values()))


def test_delta_rule_auto_keeps_eager_until_measured(monkeypatch):
    from mingru_jax._launch import delta_rule as launcher

    args = _delta_args(12, 3, 1, False, False)
    calls = []
    real = launcher.run
    monkeypatch.setattr(launcher, "run", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with use_backend("triton"):
        _delta_rule(**args)
    assert calls == [1]
    assert launcher.unsupported_reason(*args.values()) is None
    assert launcher.prefer_over_eager(*args.values()) is False
    bad = dict(args, q=args["q"][:, :2])
    with use_backend("triton"), pytest.raises(ValueError, match="q must have shape"):
        _delta_rule(**bad)  # the one validated entry checks the call before dispatch
    assert calls == [1]


@pytest.mark.parametrize("cls", ["GivensMinGRU", "RotationMinGRU", "DeltaMinGRU"])
def test_mixers_match_eager(cls):
    from flax import nnx

    kwargs = {"GivensMinGRU": dict(block_size=4, rounds=2),
              "DeltaMinGRU": dict(n_heads=2, nh=2)}.get(cls, {})
    model = getattr(mingru_jax, cls)(5, 8, rngs=nnx.Rngs(0), **kwargs)
    x = jax.random.normal(jax.random.key(1), (2, 7, 5))
    with use_backend("triton"):
        y_k = model(x)
    with use_backend("eager"):
        y_e = model(x)
    np.testing.assert_allclose(np.asarray(y_k), np.asarray(y_e), rtol=2e-4, atol=2e-4)


@pytest.mark.gpu
class TestGPU:
    """The jax-triton route on a GPU (needs jax[cuda] and jax-triton)."""

    @pytest.fixture(autouse=True)
    def _needs_jax_gpu(self):
        if mingru_jax.available() is not True or jax.default_backend() != "gpu":
            pytest.skip(f"jax-triton path unavailable: {mingru_jax.available()}")

    @pytest.mark.parametrize("T", [1, 63, 1000])
    def test_delta_rule(self, T):
        args = _delta_args(T, T, 2, True, True, dk=16, dv=16)
        _check(_delta_fn(list(args)), tuple(args.values()), jit=True)

    @pytest.mark.parametrize("op", OPS)
    @pytest.mark.parametrize("T,D", [(1, 3), (7, 5), (300, 33), (5000, 8)])
    def test_forward_and_grad(self, op, T, D):
        fn, args = _cases(T + D, T, D)[op]
        _check(fn, args)
        _check(fn, args, jit=True)

    def test_vmap(self):
        fn, args = _cases(5, 200, 3)["matrix_affine_scan"]
        _check_vmap(fn, args)
