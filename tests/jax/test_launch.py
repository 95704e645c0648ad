"""The jax-triton launchers (mingru_jax._launch) against the eager twins.

On CPU the launchers run their launch sequences on the shared Triton kernels through Triton's
interpreter on NumPy buffers (tests/conftest.py sets TRITON_INTERPRET=1), via a host
callback, with NaN-poisoned outputs; no PyTorch is involved. On a GPU every test here runs the
jax-triton route; the GPU class adds longer sequences.

Compile time is the cost (most of all on a GPU, where each XLA compilation runs ptxas): the
jitted checks share one ``jax.jit`` per (function, backend) at module scope (a computation
compiles once per shape, whichever test asks), outputs and gradients come from one jitted
function, and the eager reference is jitted too: run op by op, every primitive of the eager
twins compiles on its own (their ``associative_scan`` alone costs hundreds of compilations per
shape), which made this file twice as slow on CPU as well.
"""

from __future__ import annotations

import contextlib
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_jax.dispatch import use_backend
from mingru_jax.scans import _delta_rule, _givens_recurrence
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import switches

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ON_GPU = jax.default_backend() == "gpu"  # the jax-triton route (else Triton's interpreter)


FUNCTIONS = {
    "linear_scan": mingru_jax.linear_scan,
    "parallel_scan_log": mingru_jax.parallel_scan_log,
    "matrix_affine_scan": mingru_jax.matrix_affine_scan,
    "givens_recurrence": _givens_recurrence,
}


def _case(op, seed, T, D):
    """``(fn, args)`` of ``op`` at sequence length ``T`` (``D`` channels for the elementwise
    scans), float32, drawn on the host (no compilation per shape)."""
    rng = np.random.default_rng(seed)
    B, n = 2, 3

    def rand(*shape, lo=-1.0, hi=1.0):
        return jnp.asarray(rng.uniform(lo, hi, shape), jnp.float32)

    args = {
        "linear_scan": lambda: (rand(B, T, D), rand(B, T, D)),
        "parallel_scan_log": lambda: (-jnp.abs(rand(B, T, D)) - 0.05, rand(B, T + 1, D)),
        "matrix_affine_scan": lambda: (0.6 * rand(B, T, n, 2, 2), rand(B, T, n, 2, 4)),
        "givens_recurrence": lambda: (rand(B, T, n, 3, 2, lo=-3, hi=3), rand(B, T, n, 4),
                                      rand(B, n, 4), rand(B, T, n, 4, lo=0.2, hi=1.0),
                                      -jnp.abs(rand(B, T, n))),
    }[op]()
    return FUNCTIONS[op], args


def _loss(fn):
    def f(*args):
        outs = jax.tree.leaves(fn(*args))
        # A fixed, non-uniform weighting so every output element's gradient matters.
        return sum(jnp.sum(o * jnp.cos(jnp.arange(o.size).reshape(o.shape))) for o in outs)

    return f


def _outputs_and_grads(fn, args):
    """``fn``'s outputs, and the value and gradients of ``_loss(fn)`` w.r.t. every argument."""
    val, grads = jax.value_and_grad(_loss(fn), argnums=tuple(range(len(args))))(*args)
    return fn(*args), val, grads


@functools.cache
def _jitted(fn, backend):
    """One ``jax.jit`` of :func:`_outputs_and_grads` per (function, backend), shared by every
    test: the backend is fixed inside the trace (``use_backend`` is read at trace time), so a
    shape compiles once however many tests ask for it."""

    def run(*args):
        with use_backend(backend):
            return _outputs_and_grads(fn, args)

    return jax.jit(run)


def _run(fn, args, backend, jit):
    if jit:
        return _jitted(fn, backend)(*args)
    with use_backend(backend):
        return _outputs_and_grads(fn, args)


def _check(fn, args, jit=False):
    """Outputs and gradients of ``fn`` on the kernels (op by op, or jitted) against the eager
    twin (jitted, see the module docstring)."""
    got = _run(fn, args, "triton", jit)
    want = _run(fn, args, "eager", True)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert np.all(np.isfinite(np.asarray(x)))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


OPS = ["linear_scan", "parallel_scan_log", "matrix_affine_scan", "givens_recurrence"]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("T,D", [(1, 3), (7, 5)])
def test_forward_and_grad_match_eager(op, T, D):
    fn, args = _case(op, T * 10 + D, T, D)
    _check(fn, args)


def test_log_scan_on_its_narrow_walk_tile():
    """The log scan's narrow-walk tile (256 steps × 8 channels, pipelined), forced: two tiles,
    the second partial, a channel block cut by D, forward and backward."""
    from mingru_kernels.launch import parallel_scan_log

    bt, bd, nw, ls = parallel_scan_log.TILES["narrow_walk_tile"]
    fn, args = _case("parallel_scan_log", 11, 300, 11)
    with switches.forced("parallel_scan_log", strategy="walk", block_t=bt, block_d=bd,
                         num_warps=nw, loop_stages=ls):
        _check(fn, args)


@pytest.mark.parametrize("op", ["parallel_scan_log", "matrix_affine_scan"])
def test_under_jit(op):
    fn, args = _case(op, 3, 5, 3)
    _check(fn, args, jit=True)


def _givens_plain(theta, b, h0):
    return _givens_recurrence(theta, b, h0)


def test_givens_without_scale_or_decay():
    theta, b, h0, _, _ = _case("givens_recurrence", 4, 6, 3)[1]
    _check(_givens_plain, (theta, b, h0))


@pytest.mark.parametrize("op", ["linear_scan"])
def test_vmap(op):
    fn, args = _case(op, 5, 5, 3)
    stacked = tuple(jnp.stack([x, 0.5 * x]) for x in args)  # a leading vmap axis of 2
    loss = _loss(fn)

    def outputs_and_grads(*xs):
        return jax.vmap(fn)(*xs), jax.vmap(jax.grad(loss, argnums=(0, 1)))(*xs)

    with use_backend("triton"):
        out_k, g_k = outputs_and_grads(*stacked)
    with use_backend("eager"):
        out_e, g_e = jax.jit(outputs_and_grads)(*stacked)
    for x, y in zip(jax.tree.leaves((out_k, g_k)), jax.tree.leaves((out_e, g_e)), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


def test_triton_mode_really_runs_the_launcher(monkeypatch):
    from mingru_jax._launch import linear_scan as launcher

    calls = []
    real = launcher.run
    monkeypatch.setattr(launcher, "run", lambda *a: calls.append(1) or real(*a))
    a, b = _case("linear_scan", 6, 4, 3)[1]
    with use_backend("triton"):
        mingru_jax.linear_scan(a, b)
    assert calls == [1]


def _delta_args(seed, T, nh, decay, h0, B=2, H=2, dk=4, dv=3):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, nh, H, dk))
    args = {
        "q": rng.standard_normal((B, T, H, dk)) / dk**0.5,
        "k": k / np.linalg.norm(k, axis=-1, keepdims=True),
        "v": rng.standard_normal((B, T, nh, H, dv)),
        "beta": 2 * rng.uniform(0.0, 1.0, (B, T, nh, H)),
    }
    if decay:
        args["log_gamma"] = -rng.uniform(0.01, 1.0, (B, T, H))
    if h0:
        args["h0"] = rng.standard_normal((B, H, dk, dv))
    return {name: jnp.asarray(x, jnp.float32) for name, x in args.items()}


@functools.cache
def _delta_fn(names):
    """The delta rule on positional ``names`` (one function per set of names, so its jitted
    checks are shared across tests)."""
    names = tuple(names)
    return lambda *xs: _delta_rule(**dict(zip(names, xs, strict=True)), chunk_size=4)


def _host():
    """XLA's CPU device as the default one, on a GPU machine too (as the ``on_host`` fixture of
    tests/conftest.py, for part of a test)."""
    try:
        return jax.default_device(jax.devices("cpu")[0])
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU out: stay on the default device
        return contextlib.nullcontext()


def _check_delta(fn, args, jit=False):
    """:func:`_check` with the eager twin on XLA's CPU device, for short sequences (its XLA
    compile grows with ``T``): its float32 chunked form depends on no device, and on a GPU
    XLA compiles its many small fusions each through ptxas."""
    got = _run(fn, args, "triton", jit)
    with _host():
        want = _run(fn, args, "eager", True)
    for x, y in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert np.all(np.isfinite(np.asarray(x)))
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("T,nh,decay,h0", [(1, 2, True, True), (9, 1, False, False),
                                           (9, 2, True, True), (9, 2, True, False),
                                           (9, 1, False, True)])
def test_delta_rule_matches_eager(T, nh, decay, h0):
    """The delta-rule kernels (through the JAX launcher) against the JAX eager chunked form:
    outputs (o, h_T) and gradients w.r.t. every present input, ragged last chunk included.
    Op by op in the interpreter; jitted on a GPU, where op by op every primitive compiles on
    its own (the other delta tests here run the launcher op by op there)."""
    args = _delta_args(T * 7 + nh, T, nh, decay, h0)
    _check_delta(_delta_fn(tuple(args)), tuple(args.values()), jit=ON_GPU)


def _check_vmap(fn, args):
    """``jax.vmap`` over a leading axis of 2: kernels vs eager."""
    stacked = tuple(jnp.stack([x, 0.5 * x]) for x in args)
    with use_backend("triton"):
        out_k = jax.vmap(fn)(*stacked)
    with use_backend("eager"):
        out_e = jax.jit(jax.vmap(fn))(*stacked)
    for x, y in zip(jax.tree.leaves(out_k), jax.tree.leaves(out_e), strict=True):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=2e-4, atol=2e-4)


def test_delta_rule_under_jit_and_vmap():
    args = _delta_args(11, 5, 2, True, True)
    fn = _delta_fn(tuple(args))
    _check_delta(fn, tuple(args.values()), jit=True)
    _check_vmap(fn, tuple(args.values()))


def test_delta_rule_allow_tf32_reaches_the_kernels(monkeypatch):
    """``allow_tf32`` picks the kernels' TF32 precision for float32 inputs in the forward and
    the backward (exact float32 by default); the interpreter multiplies exactly either way, so
    there the result is unchanged, and on a GPU it moves by TF32 rounding only (10-bit
    mantissas); a non-bool is refused."""
    from mingru_jax._launch import delta_rule as launcher

    seen = []
    real = launcher._config
    monkeypatch.setattr(launcher, "_config",
                        lambda *a, **kw: seen.append(real(*a, **kw)["PREC"]) or real(*a, **kw))
    args = _delta_args(13, 3, 1, False, False)

    def loss(q, allow_tf32):
        o, h_T = _delta_rule(**dict(args, q=q), allow_tf32=allow_tf32)
        return o.sum() + h_T.sum(), o

    with use_backend("triton"):
        (_, o_tf32), dq = jax.value_and_grad(loss, has_aux=True)(args["q"], True)
        assert seen and set(seen) == {"tf32"}
        seen.clear()
        _, o_exact = loss(args["q"], False)
    assert set(seen) == {"ieee"}
    tol = 1e-6 if interpreter_mode() else 1e-2
    np.testing.assert_allclose(np.asarray(o_tf32), np.asarray(o_exact), rtol=tol, atol=tol)
    assert np.all(np.isfinite(np.asarray(dq)))
    with pytest.raises(TypeError, match="allow_tf32 must be a bool"):
        _delta_rule(**args, allow_tf32=1)


@pytest.mark.parametrize("dk", [4, 24], ids=["registers", "reloaded"])
def test_delta_rule_plans_agree(dk):
    """Every plan (forced: the chunk lengths, the half inputs' plan on float32 inputs, and
    theirs at few rows, with the backward in one launch) equals the float32 inputs' own,
    forward and gradient, through the JAX adapters; at ``d_k = 24`` the own plan reloads the
    state in slices, the half one keeps it in registers. The half plans multiply in TF32:
    exactly in the interpreter, on a GPU to TF32's rounding (10-bit mantissas); few rows are
    forced either way (a GPU reads them from the device)."""
    args = _delta_args(14, 5, 2, True, True, dk=dk, dv=dk)

    def loss(q):
        o, h_T = _delta_rule(**dict(args, q=q))
        return (o * o).sum() + h_T.sum()

    tol = 1e-6 if dk == 4 else 2e-5  # other summation orders over a wider head
    with use_backend("triton"):
        want = jax.value_and_grad(loss)(args["q"])
        for forced in (dict(micro_chunk=16), dict(micro_chunk=64),
                       dict(half=True, few_rows=False), dict(half=True, few_rows=True),
                       dict(micro_chunk=16, half=True, few_rows=True)):
            with switches.forced("delta_rule", **forced):
                got = jax.value_and_grad(loss)(args["q"])
            close = 1e-2 if forced.get("half") and not interpreter_mode() else tol
            for x, y in zip(got, want, strict=True):
                np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=close, atol=close)


def test_delta_rule_launcher_is_preferred_and_validated_once(monkeypatch):
    from mingru_jax._launch import delta_rule as launcher

    args = _delta_args(12, 3, 1, False, False)
    calls = []
    real = launcher.run
    monkeypatch.setattr(launcher, "run", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    with use_backend("triton"):
        _delta_rule(**args)
    assert calls == [1]
    assert launcher.unsupported_reason(*args.values()) is None
    assert launcher.prefer_over_eager(*args.values()) is True  # measured faster than XLA
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
        if ON_GPU:
            graphdef, state = nnx.split(model)
            y_e = jax.jit(lambda s, x: nnx.merge(graphdef, s)(x))(state, x)
        else:
            y_e = model(x)
    np.testing.assert_allclose(np.asarray(y_k), np.asarray(y_e), rtol=2e-4, atol=2e-4)


def test_delta_rule_adapters_take_every_launch_constexpr():
    """jax-triton compiles each adapter with exactly the constexprs the launch metadata gives
    it (an unknown one fails on the GPU only, the interpreter drops it): every kernel's
    constexprs, its flags and the per-kernel overrides are parameters of its adapter."""
    from mingru_jax._launch import delta_rule as launcher
    from mingru_kernels.launch import delta_rule as meta

    flags = {"fwd_prep": ("HAS_DECAY",), "fwd_out": ("HAS_DECAY",),
             "fwd_state": ("HAS_DECAY", "HAS_H0", "PACKED"),
             "bwd_state": ("HAS_DECAY", "HAS_DHT", "HAS_H0", "PACKED"),
             "bwd_grads": ("HAS_DECAY",),
             "bwd": ("HAS_DECAY", "HAS_DHT", "HAS_H0", "PACKED")}
    configs = [meta.launch_config(2, 64, 64, half=True), meta.launch_config(2, 64, 64),
               meta.launch_config(2, 64, 64, half=True, few_rows=True),
               meta.launch_config(2, 64, 64, few_rows=True),
               meta.launch_config(2, 32, 32), meta.launch_config(2, 64, 64, tf32=True)]
    assert set(flags) == set(meta.KERNEL_CONSTEXPRS)
    for kernel, adapter in (("fwd_prep", launcher._fwd_prep), ("fwd_state", launcher._fwd_state),
                            ("fwd_out", launcher._fwd_out), ("bwd_state", launcher._bwd_state),
                            ("bwd_grads", launcher._bwd_grads), ("bwd", launcher._bwd)):
        for cfg in configs:
            kwargs = meta.launch_kwargs(cfg, kernel, **{f: False for f in flags[kernel]})
            names = set(kwargs) - {"num_warps", "num_stages"}
            assert names <= set(adapter.arg_names), (kernel, names - set(adapter.arg_names))


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
        _check(_delta_fn(tuple(args)), tuple(args.values()), jit=True)

    @pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
    def test_delta_rule_half_at_head64(self, dtype):
        """Half inputs at nh = 2, d = 64 with decay and ``h_0`` on few (b, h) rows (the plan
        whose output pass forms W from the stored 16-bit Wk, U): outputs and every gradient
        against the eager twin in float32 on the same rounded inputs."""
        args = _delta_args(11, 700, 2, True, True, dk=64, dv=64)
        half = tuple(x.astype(dtype) for x in args.values())
        wide = tuple(x.astype(jnp.float32) for x in half)
        fn = _delta_fn(tuple(args))

        def loss(*xs):
            o, h = fn(*xs)
            return (jnp.sum(o.astype(jnp.float32) * jnp.cos(jnp.arange(o.size).reshape(o.shape)))
                    + jnp.sum(h.astype(jnp.float32)))

        def run(backend, xs):
            def outs(*xs):
                with use_backend(backend):
                    return fn(*xs), jax.grad(loss, argnums=tuple(range(len(xs))))(*xs)
            return jax.jit(outs)(*xs)

        for got, want in zip(jax.tree.leaves(run("triton", half)),
                             jax.tree.leaves(run("eager", wide)), strict=True):
            got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
            assert np.all(np.isfinite(got))
            assert np.abs(got - want).max() <= 3e-2 * np.abs(want).max()

    @pytest.mark.parametrize("op", OPS)
    @pytest.mark.parametrize("T,D", [(300, 33), (5000, 8)])
    def test_forward_and_grad(self, op, T, D):
        # Jitted only, at longer T. The short shapes (T = 1 and 7) run op by op in
        # test_forward_and_grad_match_eager, on the GPU too: outside jit each primitive is
        # still lowered and compiled by XLA, with the same jax-triton custom call, so jitting
        # them again would only compile the same kernels into a larger XLA program.
        fn, args = _case(op, T + D, T, D)
        _check(fn, args, jit=True)

    def test_vmap(self):
        fn, args = _case("matrix_affine_scan", 5, 200, 3)
        _check_vmap(fn, args)

    @pytest.mark.slow
    @pytest.mark.parametrize("op", ["linear_recurrence", "mingru_cell", "parallel_scan_log"])
    def test_lookback_at_long_t(self, op):
        """The default plan at B2 T20000 (the single-pass look-back: thousands of chunks
        waiting on each other through jax-triton) against the eager twin, outputs and every
        gradient."""
        rng = np.random.default_rng(3)
        T, D = 20000, 65

        def rand(*shape, lo=-1.0, hi=1.0):
            return jnp.asarray(rng.uniform(lo, hi, shape), jnp.float32)

        if op == "linear_recurrence":
            fn = functools.partial(mingru_jax.linear_recurrence, return_final_state=True)
            args = (rand(2, T, D, lo=0.5), rand(2, T, D), rand(2, D))
        elif op == "mingru_cell":
            fn = functools.partial(mingru_jax.mingru_cell, return_final_state=True)
            args = (rand(2, T, 2 * D, lo=-3, hi=3), rand(2, D, lo=0.1))
        else:
            fn, args = _case(op, 11, T, D)
        _check(fn, args, jit=True)
