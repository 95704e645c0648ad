"""mingru_jax scans (and the internal Givens recurrence and delta rule) against the float64
NumPy loops of tests/reference.py, independent of the module code; plus jit, vmap and float64
gradient checks, long-T stability and bad-input errors.

JAX compile time dominates on CPU: every check runs through ``jax.jit`` (one compile per
shape) with tiny shapes, and XLA's backend optimisation is turned down for the test process
(tests/conftest.py).
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
pytest.importorskip("flax")
import jax.numpy as jnp  # noqa: E402
from jax.test_util import check_grads  # noqa: E402

from mingru_jax import linear_scan, matrix_affine_scan, matrix_scan, parallel_scan_log  # noqa: E402
from mingru_jax.scans import _delta_rule, _givens_recurrence  # noqa: E402
from tests.helpers import close  # noqa: E402
from tests.reference import (  # noqa: E402
    loop_affine,
    loop_delta,
    loop_givens,
    loop_linear,
    loop_log,
)

# ---------------------------------------------------------------- helpers


def rand(rng, *shape, lo=None, hi=None):
    if lo is not None:
        return rng.uniform(lo, hi, shape)
    return rng.standard_normal(shape)


def delta_inputs(rng, B=2, T=5, nh=2, H=2, dk=3, dv=2):
    k = rand(rng, B, T, nh, H, dk)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return dict(
        q=rand(rng, B, T, H, dk),
        k=k,
        v=rand(rng, B, T, nh, H, dv),
        beta=rand(rng, B, T, nh, H, lo=0.1, hi=1.9),
        log_gamma=-rand(rng, B, T, H, lo=0.0, hi=1.0),
        h0=rand(rng, B, H, dk, dv),
    )




# ---------------------------------------------------------------- oracles (float64)


@pytest.mark.parametrize("T", [1, 7])
def test_parallel_scan_log_matches_loop(T):
    rng = np.random.default_rng(T)
    log_a = -rand(rng, 2, T, 3, lo=0.05, hi=2.0)
    log_v = rand(rng, 2, T + 1, 3)
    log_v[1, 0] = -np.inf  # h_0 = 0 for the second sequence
    with jax.enable_x64(True):
        h = jax.jit(parallel_scan_log)(jnp.asarray(log_a), jnp.asarray(log_v))
        close(h, loop_log(log_a, log_v), 1e-12, elementwise=True)


def test_parallel_scan_log_long_float32_accurate():
    T = 20000
    rng = np.random.default_rng(1)
    # Mean log a ≈ −0.05: the running product reaches e^{−1000}, far below fp32's range, and
    # Heinsen's whole-sequence closed form loses ~1.6e-4 to cancellation here.
    log_a = -rand(rng, 1, T, 2, lo=0.0, hi=0.1)
    log_v = rand(rng, 1, T + 1, 2) - 3.0
    h = jax.jit(parallel_scan_log)(
        jnp.asarray(log_a, jnp.float32), jnp.asarray(log_v, jnp.float32)
    )
    assert h.dtype == jnp.float32
    h = np.asarray(h)
    assert np.isfinite(h).all() and (h > 0).all()
    ref = loop_log(np.float32(log_a).astype(np.float64), np.float32(log_v).astype(np.float64))
    np.testing.assert_allclose(h, ref, rtol=1e-5)


def test_linear_scan_matches_loop():
    rng = np.random.default_rng(2)
    a = rand(rng, 2, 9, 3, lo=-1.2, hi=1.2)  # signed, some |a| > 1
    b = rand(rng, 2, 9, 3)
    with jax.enable_x64(True):
        P, Z = jax.jit(linear_scan)(jnp.asarray(a), jnp.asarray(b))
        Pr, Zr = loop_linear(a, b)
        close(P, Pr, 1e-12, elementwise=True)
        close(Z, Zr, 1e-12, elementwise=True)


@pytest.mark.parametrize("k,v", [(3, 2), (2, 1)])
def test_matrix_affine_scan_matches_loop(k, v):
    rng = np.random.default_rng(3)
    A = 0.6 * rand(rng, 2, 5, 3, k, k)
    Bm = rand(rng, 2, 5, 3, k, v)
    with jax.enable_x64(True):
        P, Z = jax.jit(matrix_affine_scan)(jnp.asarray(A), jnp.asarray(Bm))
        Pr, Zr = loop_affine(A, Bm)
        close(P, Pr, 1e-12, elementwise=True)
        close(Z, Zr, 1e-12, elementwise=True)
        if k == 2 and v == 1:  # matrix_scan is the k = 2, v = 1 case
            P2, Z2 = jax.jit(matrix_scan)(jnp.asarray(A), jnp.asarray(Bm[..., 0]))
            close(P2, Pr, 1e-12, elementwise=True)
            close(Z2, Zr[..., 0], 1e-12, elementwise=True)


@pytest.mark.parametrize("with_extras", [False, True])
def test_givens_recurrence_matches_loop(with_extras):
    rng = np.random.default_rng(4)
    B, T, n, R, k = 2, 5, 2, 3, 4
    theta = rand(rng, B, T, n, R, k // 2, lo=-3.0, hi=3.0)
    b = rand(rng, B, T, n, k)
    h0 = rand(rng, B, n, k)
    scale = rand(rng, B, T, n, k, lo=-1.0, hi=1.0) if with_extras else None
    lg = -rand(rng, B, T, n, lo=0.0, hi=1.0) if with_extras else None
    with jax.enable_x64(True):
        args = [jnp.asarray(x) if x is not None else None for x in (theta, b, h0, scale, lg)]
        h = jax.jit(_givens_recurrence)(*args)
        close(h, loop_givens(theta, b, h0, scale, lg), 1e-12, elementwise=True)


@pytest.mark.usefixtures("on_host")
def test_delta_rule_matches_loop_for_every_chunk_size():
    rng = np.random.default_rng(5)
    inp = delta_inputs(rng)
    o_ref, S_ref = loop_delta(**inp)
    with jax.enable_x64(True):
        args = {key: jnp.asarray(val) for key, val in inp.items()}
        for chunk in (1, 2, 64):  # T = 5: partial last chunk, and one chunk longer than T
            o, S = jax.jit(_delta_rule, static_argnames="chunk_size")(**args, chunk_size=chunk)
            close(o, o_ref, 1e-11, elementwise=True)
            close(S, S_ref, 1e-11, elementwise=True)


def test_delta_rule_huge_gap_resets_cleanly():
    """A gap of 1e10 (log γ = −1e10) wipes the state without NaN or cancellation."""
    rng = np.random.default_rng(6)
    inp = delta_inputs(rng, B=1, T=4)
    inp["log_gamma"][0, 2] = -1e10
    o_ref, S_ref = loop_delta(**inp)
    o, S = jax.jit(_delta_rule)(**{key: jnp.asarray(val, jnp.float32) for key, val in inp.items()})
    assert np.isfinite(np.asarray(o)).all()
    close(o, o_ref, 1e-5, elementwise=True)
    close(S, S_ref, 1e-5, elementwise=True)


# ---------------------------------------------------------------- jit + vmap + grad


def test_log_scan_grad_finite_at_zero_state():
    """log h_0 = −inf and log b = −inf (zeros) are legal and must not give NaN gradients."""
    log_a = -jnp.ones((1, 3, 2))
    log_v = jnp.array([[[-jnp.inf, 0.0], [-jnp.inf, 0.5], [0.1, -jnp.inf], [0.2, 0.3]]])
    grads = jax.jit(jax.grad(lambda a, v: parallel_scan_log(a, v).sum(), argnums=(0, 1)))(
        log_a, log_v
    )
    for gr in grads:
        assert np.isfinite(np.asarray(gr)).all()
    # b = 0 contributes nothing: its gradient is exactly zero.
    assert float(grads[1][0, 1, 0]) == 0.0


def _vmapped_grad_check(fn, args, oracle, tol=1e-11):
    """``jit(vmap(fn))`` over a leading axis equals the per-example oracle, and its gradient
    passes a float64 numerical check."""
    f = jax.jit(jax.vmap(fn))
    out = f(*args)
    outs = out if isinstance(out, tuple) else (out,)
    for i in range(args[0].shape[0]):
        ref = oracle(*[np.asarray(a[i]) for a in args])
        ref = ref if isinstance(ref, tuple) else (ref,)
        for got, want in zip(outs, ref, strict=True):
            close(got[i], want, tol, elementwise=True)
    check_grads(f, args, order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


# op -> (inputs (two examples on a leading axis) from a generator, the float64 oracle)
VMAPPED = {
    "linear_scan": (
        linear_scan,
        lambda rng: (rand(rng, 2, 1, 4, 3, lo=-1.0, hi=1.0), rand(rng, 2, 1, 4, 3)),
        loop_linear,
    ),
    "parallel_scan_log": (
        parallel_scan_log,
        lambda rng: (-rand(rng, 2, 1, 4, 3, lo=0.1, hi=1.0), rand(rng, 2, 1, 5, 3)),
        loop_log,
    ),
    "matrix_scan": (
        matrix_scan,
        lambda rng: (0.7 * rand(rng, 2, 1, 3, 2, 2, 2), rand(rng, 2, 1, 3, 2, 2)),
        lambda M, v: (lambda P, Z: (P, Z[..., 0]))(*loop_affine(M, v[..., None])),
    ),
}


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("seed, name", enumerate(VMAPPED, start=7))
def test_scans_jit_vmap_grad(seed, name):
    fn, inputs, oracle = VMAPPED[name]
    with jax.enable_x64(True):
        args = tuple(jnp.asarray(x) for x in inputs(np.random.default_rng(seed)))
        _vmapped_grad_check(fn, args, oracle)


@pytest.mark.usefixtures("on_host")
def test_givens_recurrence_jit_vmap_grad():
    rng = np.random.default_rng(10)
    with jax.enable_x64(True):
        args = (
            jnp.asarray(rand(rng, 2, 1, 3, 1, 2, 2)),  # theta (V, B, T, n, R, k/2)
            jnp.asarray(rand(rng, 2, 1, 3, 1, 4)),  # b
            jnp.asarray(rand(rng, 2, 1, 1, 4)),  # h0
            jnp.asarray(rand(rng, 2, 1, 3, 1, 4, lo=-1.0, hi=1.0)),  # scale
            jnp.asarray(-rand(rng, 2, 1, 3, 1, lo=0.0, hi=1.0)),  # log_gamma
        )
        _vmapped_grad_check(_givens_recurrence, args, loop_givens)


@pytest.mark.usefixtures("on_host")
def test_delta_rule_jit_vmap_grad():
    rng = np.random.default_rng(11)
    inp = delta_inputs(rng, B=1, T=3, nh=2, H=1, dk=2, dv=2)
    with jax.enable_x64(True):
        args = tuple(jnp.asarray(np.stack([val, val * 0.9])) for val in inp.values())
        fn = lambda q, k, v, beta, lg, h0: _delta_rule(q, k, v, beta, lg, h0, chunk_size=2)
        oracle = lambda q, k, v, beta, lg, h0: loop_delta(q, k, v, beta, lg, h0)
        _vmapped_grad_check(fn, args, oracle)


# ---------------------------------------------------------------- bad input


def test_bad_inputs_raise_clear_errors():
    x = jnp.ones((2, 4, 3))
    with pytest.raises(TypeError, match="log_coeffs must be a jax.Array"):
        parallel_scan_log([[1.0]], x)
    with pytest.raises(TypeError, match="floating"):
        linear_scan(jnp.ones((2, 4, 3), jnp.int32), x)
    with pytest.raises(ValueError, match=r"log_values must have shape \(B, T\+1, D\)"):
        parallel_scan_log(x, x)
    with pytest.raises(ValueError, match="a must have shape"):
        linear_scan(jnp.ones((4, 3)), jnp.ones((4, 3)))
    with pytest.raises(ValueError, match="b must have shape"):
        linear_scan(x, jnp.ones((2, 4, 2)))
    with pytest.raises(TypeError, match="dtype of a"):
        linear_scan(x, x.astype(jnp.float16))
    with pytest.raises(ValueError, match="at least one time step"):
        linear_scan(jnp.ones((2, 0, 3)), jnp.ones((2, 0, 3)))
    with pytest.raises(ValueError, match="square blocks"):
        matrix_affine_scan(jnp.ones((1, 2, 1, 3, 2)), jnp.ones((1, 2, 1, 3, 1)))
    with pytest.raises(ValueError, match="Bm must have shape"):
        matrix_affine_scan(jnp.ones((1, 2, 1, 3, 3)), jnp.ones((1, 2, 1, 2, 1)))
    with pytest.raises(ValueError, match=r"M must have shape \(B, T, n, 2, 2\)"):
        matrix_scan(jnp.ones((1, 2, 1, 3, 3)), jnp.ones((1, 2, 1, 3)))
    with pytest.raises(ValueError, match=r"h0 must have shape \(B, n, k\)"):
        _givens_recurrence(jnp.ones((1, 2, 3, 1, 2)), jnp.ones((1, 2, 3, 4)), jnp.ones((1, 3, 2)))
    with pytest.raises(TypeError, match="log_gamma must have the dtype of theta"):
        _givens_recurrence(jnp.ones((1, 2, 3, 1, 2)), jnp.ones((1, 2, 3, 4)), jnp.ones((1, 3, 4)),
                          None, jnp.ones((1, 2, 3), jnp.float16))
    with pytest.raises(ValueError, match="chunk_size"):
        _delta_rule(*[jnp.ones(s) for s in [(1, 2, 1, 2), (1, 2, 1, 1, 2), (1, 2, 1, 1, 2),
                                            (1, 2, 1, 1)]], chunk_size=0)
