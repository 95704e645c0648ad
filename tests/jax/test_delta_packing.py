"""Packed sequences (``cu_seqlens=``) for the delta rule and DeltaMinGRU in mingru_jax: one call
on sequences laid end to end in one row equals running each sequence alone — outputs,
per-sequence final states and the gradients of q, k, v, β, log γ, h0 (the op) or of the
input, states and parameters (the mixer) — with an empty and a length-1 sequence among them,
nh ∈ {1, 2}, decay on and off, h0 given and not. The reference runs each sequence alone token
by token (a float64 ``jax.lax.scan`` loop; the mixer's ``step``). The eager path runs in
float64 with ``chunk_size = 4`` (sequences straddle chunks) and a traced ``cu_seqlens`` under
``jax.jit``; the kernel path (Triton's interpreter on CPU, float32) with a 16-micro-step chunk
and a sequence longer than two chunks; both in one test per case, sharing the reference. Bad
offsets, a batch of two rows and a wrongly shaped state are errors naming the argument. Tiny
shapes, each function jitted once: compilation is the cost here. The float64 parts run on XLA's
CPU device on a GPU machine too (:func:`_host`), the kernels on the default device.
"""

from __future__ import annotations

import contextlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mingru_jax import DeltaMinGRU
from mingru_jax.dispatch import use_backend
from mingru_jax.scans import _delta_rule
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import switches
from tests.helpers import rel_err

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

H, DK, DV = 2, 3, 4
# An empty and a length-1 sequence. Eager (chunk_size 4): sequences 0 and 3 straddle chunks;
# kernels (16 micro-steps per chunk: C = 16 tokens for nh = 1, 8 for nh = 2): the last
# sequence spans two or three chunks.
CU = (0, 5, 5, 6, 24)
CASES = [(1, False, False), (1, True, True), (2, True, False), (2, False, True)]
CASE_IDS = [f"nh{nh}-{'decay' if d else 'nodecay'}-{'h0' if h else 'noh0'}" for nh, d, h in CASES]
# The half inputs' plans forced on float32 inputs multiply in TF32: exactly in the interpreter,
# on a GPU to TF32's accuracy, this relative error (by decay). The tensor cores truncate the
# operands to 10-bit mantissas (up to 2^-10 relative, always towards zero), and the error
# compounds along a sequence's chain of micro-steps: undamped, over the longest sequence here
# (18 tokens, 36 micro-steps at nh = 2), outputs and gradients drift by up to 4e-2 (Triton's
# interpreter with its TF32 products truncated so), damped by a decay by 4e-3.
TF32_TOL = {True: 1e-2, False: 6e-2}


def _host():
    """XLA's CPU device as the default one, on a GPU machine too (as the ``on_host`` fixture of
    tests/conftest.py, for part of a test): the float64 checks depend on no device, and XLA's
    GPU compiles, which they consist of, cost several times its CPU ones."""
    try:
        return jax.default_device(jax.devices("cpu")[0])
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU out: stay on the default device
        return contextlib.nullcontext()


def _inputs(cu, nh, decay, has_h0, seed=0):
    """Float64 NumPy op inputs for the packed row ``cu`` (``B = 1``); the absent ones ``None``."""
    rng = np.random.default_rng(seed)
    T, N = cu[-1], len(cu) - 1
    k = rng.standard_normal((1, T, nh, H, DK))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    return [rng.standard_normal((1, T, H, DK)), k, rng.standard_normal((1, T, nh, H, DV)),
            2 / (1 + np.exp(-rng.standard_normal((1, T, nh, H)))),
            -rng.uniform(size=(1, T, H)) if decay else None,
            rng.standard_normal((N, H, DK, DV)) if has_h0 else None]


def _loop(q, k, v, beta, lg, S):
    """One sequence ``(L, …)`` by the per-token recurrence (``jax.lax.scan``; cheap to compile):
    ``S ← γ S``, then per micro-step ``S ← (I − β k kᵀ) S + β k vᵀ``, then ``o = Sᵀ q``."""
    nh = k.shape[1]

    def step(S, xs):
        qt, kt, vt, bt, gt = xs
        S = jnp.exp(gt)[:, None, None] * S
        for j in range(nh):
            err = vt[j] - jnp.einsum("hk,hkv->hv", kt[j], S)  # v − Sᵀ k
            S = S + bt[j][:, None, None] * kt[j][:, :, None] * err[:, None, :]
        return S, jnp.einsum("hk,hkv->hv", qt, S)

    S, o = jax.lax.scan(step, S, (q, k, v, beta, lg))
    return o, S


def _alone(cu, q, k, v, beta, lg, h0):
    """Each sequence on its own by the per-token loop: concatenated ``o``, stacked ``h_T``
    (an empty sequence's is its h0, zeros without)."""
    if lg is None:
        lg = jnp.zeros(q.shape[:3], q.dtype)
    outs, finals = [], []
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        S = h0[n] if h0 is not None else jnp.zeros((H, DK, DV), q.dtype)
        if s == e:
            finals.append(S)
            continue
        o, S = _loop(q[0, s:e], k[0, s:e], v[0, s:e], beta[0, s:e], lg[0, s:e], S)
        outs.append(o)
        finals.append(S)
    return jnp.concatenate(outs, 0)[None], jnp.stack(finals)


def _value_and_grads(fn):
    """``jit((xs, wo, wh, *extra) -> ((o, h), grads of Σ o·wo + Σ h·wh w.r.t. xs))``."""

    def loss(xs, wo, wh, *extra):
        o, h = fn(*xs, *extra)
        return jnp.sum(o * wo) + jnp.sum(h * wh), (o, h)

    def value_and_grads(xs, wo, wh, *extra):
        (_, out), grads = jax.value_and_grad(loss, has_aux=True)(xs, wo, wh, *extra)
        return out, grads

    return jax.jit(value_and_grads)


# Each sequence alone by the loop, with every input present (log γ = 0 and h0 = 0 stand for
# absent ones): one compilation per nh, shared by all cases.
_REFERENCE = _value_and_grads(lambda *a: _alone(CU, *a))


@pytest.mark.interpreter
@pytest.mark.parametrize("nh,decay,has_h0", CASES, ids=CASE_IDS)
def test_op_equals_each_sequence_alone(nh, decay, has_h0):
    """Packed — eager in float64 with ``cu_seqlens`` traced under jit, and the kernels in
    float32 — against each sequence alone (the float64 loop): outputs, final states, the
    gradients of every given input."""
    T, N = CU[-1], len(CU) - 1
    args = _inputs(CU, nh, decay, has_h0)
    present = [i for i, a in enumerate(args) if a is not None]
    rng = np.random.default_rng(99)
    w = (rng.standard_normal((1, T, H, DV)), rng.standard_normal((N, H, DK, DV)))
    full = list(args)
    full[4] = np.zeros((1, T, H)) if args[4] is None else args[4]
    full[5] = np.zeros((N, H, DK, DV)) if args[5] is None else args[5]
    with _host(), jax.enable_x64(True):
        (o_ref, h_ref), g_ref = _REFERENCE([jnp.asarray(a) for a in full], *map(jnp.asarray, w))
        g_ref = [g_ref[i] for i in present]
        with use_backend("eager"):
            fn = _value_and_grads(lambda *a: _delta_rule(*_spread(a[:-1], present), 4,
                                                         cu_seqlens=a[-1]))
            eager = fn([jnp.asarray(args[i]) for i in present], *map(jnp.asarray, w),
                       jnp.asarray(CU, jnp.int32))  # offsets traced
    cu32 = jnp.asarray(CU, jnp.int32)
    # nh = 2: the half inputs' plans (forced, on float32 inputs); with h0 the few-rows one,
    # whose backward runs in one launch, waiting on the cut adjoint (few rows forced either
    # way: a GPU reads them from the device).
    plan = {}
    if nh == 2:
        plan = dict(half=True, few_rows=has_h0)
    kernel_tols = (1e-5, 1e-4) if interpreter_mode() or not plan else (TF32_TOL[decay],) * 2
    with use_backend("triton"), switches.forced("delta_rule", micro_chunk=16, **plan):
        fn = _value_and_grads(lambda *a: _delta_rule(*_spread(a, present), 4, cu_seqlens=cu32))
        kernel = fn([jnp.asarray(args[i], jnp.float32) for i in present],
                    *(jnp.asarray(x, jnp.float32) for x in w))
    for path, ((o, h), g), tol_o, tol_g in (("eager", eager, 1e-12, 1e-10),
                                           ("triton", kernel, *kernel_tols)):
        assert o.shape == (1, T, H, DV) and h.shape == (N, H, DK, DV), path
        assert rel_err(o, o_ref) <= tol_o, f"{path}: o"
        assert rel_err(h, h_ref) <= tol_o, f"{path}: h_T"
        for i, x, r in zip(present, g, g_ref, strict=True):
            assert rel_err(x, r) <= tol_g, f"{path}: gradient of argument {i}"
        # The empty sequence (index 1) keeps its initial state, exactly.
        want = np.zeros((H, DK, DV)) if args[5] is None else np.asarray(args[5][1], h.dtype)
        np.testing.assert_array_equal(np.asarray(h[1]), want)


def _spread(xs, present):
    """The six op arguments from the present ones (``None`` elsewhere)."""
    full = [None] * 6
    for i, x in zip(present, xs, strict=True):
        full[i] = x
    return full


# ----------------------------------------------------------------------------- DeltaMinGRU


@pytest.mark.interpreter
def test_mixer_equals_each_sequence_alone():
    """Packed DeltaMinGRU (nh = 2, learnable decay, per-sequence h_0) — eager in float64 and on
    the kernels in float32 — against each sequence alone token by token (``step``): outputs,
    states, the gradients of x, h_0 and every parameter."""
    T, N = CU[-1], len(CU) - 1
    rng = np.random.default_rng(5)

    def build(dtype):
        return DeltaMinGRU(5, 8, n_heads=2, nh=2, chunk_size=4, decay="learnable",
                           param_dtype=dtype, rngs=nnx.Rngs(0))

    def losses(graphdef, rest, call):
        def f(params, x, h0, dt, wy, ws):
            y, st = call(nnx.merge(graphdef, params, rest), x, h0, dt)
            return jnp.sum(y * wy) + jnp.sum(st * ws), (y, st)

        return jax.jit(lambda *a: jax.value_and_grad(f, (0, 1, 2), has_aux=True)(*a))

    def alone(model, x, h0, dt):
        """Each sequence on its own, token by token (``step`` in a ``jax.lax.scan``)."""
        ys, states = [], []
        for n in range(N):
            s, e = CU[n], CU[n + 1]
            h = h0[n]
            if e > s:
                h, y = jax.lax.scan(lambda h, xs: model.step(xs[0], h, xs[1])[::-1], h,
                                    (x[0, s:e, None], dt[0, s:e, None]))
                ys.append(y[:, 0])
            states.append(h)
        return jnp.concatenate(ys, 0)[None], jnp.stack(states)

    def packed(model, x, h0, dt):
        return model(x, h0, dt, return_state=True, cu_seqlens=jnp.asarray(CU, jnp.int32))

    x, dt = rng.standard_normal((1, T, 5)), rng.uniform(0, 2, (1, T))
    with _host(), jax.enable_x64(True):
        m = build(jnp.float64)
        graphdef, params, rest = nnx.split(m, nnx.Param, ...)
        Z = m.state_size
        h0 = 0.3 * rng.standard_normal((N, 1, Z))
        data = [jnp.asarray(a, jnp.float64) for a in (x, h0, dt, rng.standard_normal((1, T, 8)),
                                                      rng.standard_normal((N, 1, Z)))]
        with use_backend("eager"):
            (_, ref), g_ref = losses(graphdef, rest, alone)(params, *data)
            eager = losses(graphdef, rest, packed)(params, *data)
    # The same parameters in a float32 module (its structure only: nothing is initialised).
    graphdef, _, rest = nnx.split(nnx.eval_shape(lambda: build(jnp.float32)), nnx.Param, ...)
    p32 = jax.tree.map(lambda a: jnp.asarray(a, jnp.float32), params)
    with use_backend("triton"), switches.forced("delta_rule", micro_chunk=16):
        kernel = losses(graphdef, rest, packed)(
            p32, *(jnp.asarray(a, jnp.float32) for a in data))
    for path, ((_, (y, st)), g), tol_o, tol_g in (("eager", eager, 1e-12, 1e-10),
                                                 ("triton", kernel, 1e-5, 1e-4)):
        assert y.shape == (1, T, 8) and st.shape == (N, 1, Z), path
        assert rel_err(y, ref[0]) <= tol_o and rel_err(st, ref[1]) <= tol_o, path
        leaves = zip(jax.tree.leaves(g), jax.tree.leaves(g_ref), strict=True)
        for i, (a, b) in enumerate(leaves):
            assert rel_err(a, b, floor=1e-12) <= tol_g, f"{path}: gradient leaf {i}"


# ----------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("cu,err", [
    ((1, 5, 24), ValueError),  # not starting at 0
    ((0, 5, 23), ValueError),  # not ending at T
    ((0, 7, 5, 24), ValueError),  # decreasing
    (((0, 24),), ValueError),  # 2-D
])
@pytest.mark.usefixtures("on_host")
def test_bad_offsets(cu, err):
    q, k, v, beta, lg, _ = (None if a is None else jnp.asarray(a, jnp.float32)
                            for a in _inputs(CU, 1, True, False))
    with pytest.raises(err, match="cu_seqlens"):
        _delta_rule(q, k, v, beta, lg, cu_seqlens=jnp.asarray(cu, jnp.int32))
    m = DeltaMinGRU(5, 8, n_heads=2, rngs=nnx.Rngs(0))
    with pytest.raises(err, match="cu_seqlens"):
        m(jnp.zeros((1, 24, 5)), cu_seqlens=jnp.asarray(cu, jnp.int32))


@pytest.mark.usefixtures("on_host")
def test_batch_of_two_rows_and_bad_h0():
    q, k, v, beta, lg, h0 = (None if a is None else jnp.asarray(a, jnp.float32)
                             for a in _inputs(CU, 1, True, True))
    cu = jnp.asarray(CU, jnp.int32)
    two = [jnp.concatenate([a, a]) for a in (q, k, v, beta, lg)]
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        _delta_rule(*two, cu_seqlens=cu)
    with pytest.raises(ValueError, match="h0 must have shape"):
        _delta_rule(q, k, v, beta, lg, h0[:3], cu_seqlens=cu)
    m = DeltaMinGRU(5, 8, n_heads=2, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        m(jnp.zeros((2, 24, 5)), cu_seqlens=cu)
    with pytest.raises(ValueError, match="h_0 must have shape"):
        m(jnp.zeros((1, 24, 5)), jnp.zeros((1, 1, m.state_size)), cu_seqlens=cu)
