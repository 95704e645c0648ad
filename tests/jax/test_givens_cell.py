"""``mingru_jax.cells.givens_cell`` (GivensMinGRU's fused cell: the Givens recurrence's kernels
in their gated form, reading the angles and gates as columns of one projection and writing its
whole gradient as one array) against the float64 loop of tests/reference.py, the eager twin
against the jax-triton launcher (Triton's interpreter on CPU, NaN-poisoned outputs): outputs
and the gradients of ``k``, ``h_0`` and ``log γ`` at T = 1, odd T, several blocks and forced
short segments; ``vmap``; bad input; and the same ``h`` as :func:`mingru.cells.givens_cell`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_jax._eager.givens_cell import givens_cell_eager
from mingru_jax.cells import givens_cell
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.reference import loop_givens

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = [
    # B, T, D, block_size, rounds, h0, log_gamma, forced segment length
    (2, 1, 4, 4, 1, True, True, None),  # one step, one block
    (1, 37, 8, 4, 3, True, True, 8),  # two blocks, five segments (the composite pass)
    (2, 37, 6, 2, 2, False, False, None),  # three blocks, W = 18
]


def _inputs(B, T, D, kb, R, with_h0, with_gamma, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, D * R // 2 + 2 * D))
    k[..., : D * R // 2] *= 2.0  # angles over several turns
    h0 = rng.standard_normal((B, D)) if with_h0 else None
    lg = np.log(0.5 + 0.45 * rng.random((B, T, D // kb))) if with_gamma else None
    w = rng.standard_normal((B, T, D))
    return [None if x is None else jnp.asarray(x, jnp.float32) for x in (k, h0, lg, w)]


def _loop(k, h0, lg, kb, R):
    """The float64 oracle: the gates by hand, then the sequential Givens loop."""
    k = np.asarray(k, np.float64)
    B, T, W = k.shape
    D = 2 * W // (R + 4)
    n, a = D // kb, D * R // 2
    theta = k[..., :a].reshape(B, T, n, R, kb // 2)
    b = (k[..., a + D:] / (1 + np.exp(-k[..., a:a + D]))).reshape(B, T, n, kb)
    start = np.zeros((B, n, kb)) if h0 is None else np.asarray(h0, np.float64).reshape(B, n, kb)
    lg = None if lg is None else np.asarray(lg, np.float64)
    return loop_givens(theta, b, start, None, lg).reshape(B, T, D)


def _value_and_grads(k, h0, lg, w, kb, R):
    def loss(k, h0, lg):
        h = givens_cell(k, h0, lg, block_size=kb, rounds=R)
        return (h * w).sum(), h

    argnums = tuple(i for i, x in enumerate((k, h0, lg)) if x is not None)
    (_, h), grads = jax.jit(jax.value_and_grad(loss, argnums=argnums, has_aux=True))(k, h0, lg)
    return [h, *grads]


@pytest.mark.parametrize(("B", "T", "D", "kb", "R", "with_h0", "with_gamma", "seg"), CASES)
def test_eager_twin_matches_the_loop(B, T, D, kb, R, with_h0, with_gamma, seg):
    k, h0, lg, _ = _inputs(B, T, D, kb, R, with_h0, with_gamma)
    h = jax.jit(givens_cell_eager, static_argnums=(3, 4))(k, h0, lg, kb, R)
    assert h.dtype == jnp.float32 and h.shape == (B, T, D)
    assert rel_err(np.asarray(h), _loop(k, h0, lg, kb, R)) < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "D", "kb", "R", "with_h0", "with_gamma", "seg"), CASES)
def test_triton_matches_eager(B, T, D, kb, R, with_h0, with_gamma, seg):
    """Outputs and every gradient; a forced segment length runs the composite passes too."""
    k, h0, lg, w = _inputs(B, T, D, kb, R, with_h0, with_gamma)
    with mingru_jax.use_backend("eager"):
        want = _value_and_grads(k, h0, lg, w, kb, R)
    force = {} if seg is None else dict(seg_len=seg)
    with mingru_jax.use_backend("triton"), switches.forced("givens_recurrence", **force):
        got = jax.jit(lambda *a: _value_and_grads(*a, kb, R))(k, h0, lg, w)
    assert rel_err(np.asarray(got[0]), _loop(k, h0, lg, kb, R)) < 1e-5
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert rel_err(np.asarray(g), np.asarray(e)) < 1e-5


@pytest.mark.interpreter
def test_vmap_of_the_triton_cell():
    k, h0, lg, _ = _inputs(3, 5, 8, 4, 2, True, True)
    with mingru_jax.use_backend("triton"):
        got = jax.vmap(lambda k, h0, lg: givens_cell(
            k[None], h0[None], lg[None], block_size=4, rounds=2)[0])(k, h0, lg)
    assert rel_err(np.asarray(got), _loop(k, h0, lg, 4, 2)) < 1e-5


@pytest.mark.parametrize(("args", "match"), [
    (dict(k=jnp.ones((2, 3, 41))), "k must be"),
    (dict(k=jnp.ones((2, 0, 28))), "at least one time step"),
    (dict(rounds=0), "rounds must be"),
    (dict(block_size=5), "block_size must be"),
    (dict(initial_state=jnp.ones((2, 7))), "initial_state must be"),
    (dict(log_gamma=jnp.ones((2, 3, 4))), "log_gamma must be"),
    (dict(initial_state=jnp.ones((2, 8), jnp.bfloat16)), "dtype"),
    (dict(k=jnp.ones((2, 3, 28), jnp.int32)), "floating"),
])
def test_givens_cell_rejects_bad_inputs(args, match):
    call = dict(k=jnp.ones((2, 3, 8 * 3 // 2 + 16)), initial_state=None, log_gamma=None,
                block_size=4, rounds=3) | args
    with pytest.raises((TypeError, ValueError), match=match):
        givens_cell(call.pop("k"), **call)


def test_same_h_as_the_pytorch_cell():
    """The same projection gives the same ``h`` as :func:`mingru.cells.givens_cell`."""
    torch = pytest.importorskip("torch")
    from mingru.cells import givens_cell as torch_givens_cell

    k, h0, lg, _ = _inputs(2, 9, 8, 4, 3, True, True)
    want = torch_givens_cell(*(torch.tensor(np.asarray(x)) for x in (k, h0, lg)),
                             block_size=4, rounds=3)
    got = jax.jit(lambda *a: givens_cell(*a, block_size=4, rounds=3))(k, h0, lg)
    assert rel_err(np.asarray(got), want.detach().numpy()) < 1e-5


_OFFLINE_COMPILE = """
import inspect
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mingru_jax._launch import givens_cell as launcher
from mingru_kernels.launch import givens_recurrence as meta

INTS = ("npair", "n", "T", "seg_len", "nseg", "row", "u_col", "z_col", "h_col")
F32 = ("g", "snap", "s1", "s2", "o2")
# (block size, rounds, rotation): the Givens cell's form and the rotation cell's
FORMS = ((8, 3, False), (2, 1, True))
for fn in (launcher._fwd_adapter, launcher._bwd_adapter):
    names = list(inspect.signature(fn.fn).parameters)
    for k, R, rotation in FORMS:
        cfg = meta.givens_config(k, R)
        for composite in (False, True):
            consts = dict(K2=k // 2, R=R, RP=cfg["RP"], LP=cfg["LP"], HAS_GAMMA=True,
                          COMPOSITE=composite, ROTATION=rotation, SNAP=rotation)
            sig = {n: "constexpr" if n in consts else "i32" if n in INTS
                   else "*fp32" if n in F32 else "*bf16" for n in names}
            src = ASTSource(fn, signature=sig, constexprs=consts)
            triton.compile(src, target=GPUTarget("cuda", 90, 32),
                           options={"num_warps": cfg["num_warps"]})
print("OK")
"""


def test_the_adapters_compile_for_sm90():
    """Without a GPU: the jax-triton adapters (the projection's columns reached by offsetting
    one pointer), forward and backward, walk and composite passes, for the Givens and the
    rotation cell, compile for sm_90: what the interpreter, looser than the GPU compiler,
    cannot show."""
    from tests.helpers import run_offline_gpu_compile

    if jax.default_backend() == "gpu":
        pytest.skip("a GPU compiles these kernels natively")
    assert run_offline_gpu_compile(_OFFLINE_COMPILE).strip().endswith("OK")
