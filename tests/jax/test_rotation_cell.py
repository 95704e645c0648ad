"""``mingru_jax.cells.rotation_cell`` (RotationMinGRU's fused cell: the Givens recurrence's
kernels with one round on 2×2 blocks, gated and in rotation mode, reading ``[k_θ | k_u | k_z |
k_h]`` as columns of one projection) against the float64 loop of tests/reference.py, the eager
twin against the jax-triton launcher (Triton's interpreter on CPU, NaN-poisoned outputs):
outputs and the gradients of ``k``, ``h_0`` and ``log γ`` (straight-through snap) at T = 1,
odd T, several blocks and forced short segments; ``vmap``; bad input; and the same ``h`` as
:func:`mingru.cells.rotation_cell`.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import mingru_jax
from mingru_jax._eager.rotation_cell import rotation_cell_eager
from mingru_jax.cells import rotation_cell
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.reference import loop_givens

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

CASES = [
    # B, T, n blocks, h0, log_gamma, snap, forced segment length
    (2, 1, 1, True, True, True, None),  # one step, one block
    (1, 37, 2, True, True, True, 8),  # two blocks, five segments (the composite pass)
    (2, 37, 3, False, False, False, None),
]


def _inputs(B, T, n, with_h0, with_gamma, with_snap, seed=0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, 6 * n))
    k[..., :n] *= 3.0  # angles over a turn and more: many snapping steps
    h0 = rng.standard_normal((B, 2 * n)) if with_h0 else None
    lg = np.log(0.5 + 0.45 * rng.random((B, T, n))) if with_gamma else None
    snap = np.array([(2.0, 3.0, 4.0, 6.0)[j % 4] for j in range(n)]) if with_snap else None
    if snap is not None:
        # At least 0.1 step away from a tie: a float32 quotient θ / (2π/K) rounds as the
        # float64 one does (at a tie the snapped angle jumps by a step, and so does h).
        unit = 2 * math.pi / snap
        steps = np.round(k[..., :n] / unit)
        k[..., :n] = (steps + 0.8 * (rng.random(steps.shape) - 0.5)) * unit
    w = rng.standard_normal((B, T, 2 * n))
    return [None if x is None else jnp.asarray(x, jnp.float32) for x in (k, h0, lg, snap, w)]


def _loop(k, h0, lg, snap):
    """The float64 oracle: snapped angles, scale and gates by hand, then the sequential Givens
    loop."""
    k = np.asarray(k, np.float64)
    B, T, W = k.shape
    n = W // 6
    theta = k[..., :n]
    if snap is not None:
        unit = 2 * math.pi / np.asarray(snap, np.float64)
        theta = np.round(theta / unit) * unit
    s = np.tanh(k[..., n:2 * n])
    scale = np.stack([np.ones_like(s), s], axis=-1)
    b = (k[..., 4 * n:] / (1 + np.exp(-k[..., 2 * n:4 * n]))).reshape(B, T, n, 2)
    start = np.zeros((B, n, 2)) if h0 is None else np.asarray(h0, np.float64).reshape(B, n, 2)
    lg = None if lg is None else np.asarray(lg, np.float64)
    return loop_givens(theta[..., None, None], b, start, scale, lg).reshape(B, T, 2 * n)


def _value_and_grads(k, h0, lg, snap, w):
    def loss(k, h0, lg):
        h = rotation_cell(k, h0, lg, snap_k=snap)
        return (h * w).sum(), h

    argnums = tuple(i for i, x in enumerate((k, h0, lg)) if x is not None)
    (_, h), grads = jax.value_and_grad(loss, argnums=argnums, has_aux=True)(k, h0, lg)
    return [h, *grads]


@pytest.mark.parametrize(("B", "T", "n", "with_h0", "with_gamma", "with_snap", "seg"), CASES)
def test_eager_twin_matches_the_loop(B, T, n, with_h0, with_gamma, with_snap, seg):
    k, h0, lg, snap, _ = _inputs(B, T, n, with_h0, with_gamma, with_snap)
    h = jax.jit(rotation_cell_eager)(k, h0, lg, snap)
    assert h.dtype == jnp.float32 and h.shape == (B, T, 2 * n)
    assert rel_err(np.asarray(h), _loop(k, h0, lg, snap)) < 1e-5


def test_snap_is_straight_through():
    """The snapped angle's gradient is the identity: the same as with no snapping at the
    snapped angles."""
    k, h0, lg, snap, w = _inputs(1, 6, 2, True, True, True)
    _, *grads = jax.jit(_value_and_grads)(k, h0, lg, snap, w)
    unit = 2 * math.pi / snap
    snapped = k.at[..., :2].set(jnp.round(k[..., :2] / unit) * unit)
    _, *want = jax.jit(_value_and_grads)(snapped, h0, lg, None, w)
    for g, e in zip(grads, want, strict=True):
        assert rel_err(np.asarray(g), np.asarray(e)) < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "n", "with_h0", "with_gamma", "with_snap", "seg"), CASES)
def test_triton_matches_eager(B, T, n, with_h0, with_gamma, with_snap, seg):
    """Outputs and every gradient; a forced segment length runs the composite passes too."""
    k, h0, lg, snap, w = _inputs(B, T, n, with_h0, with_gamma, with_snap)
    with mingru_jax.use_backend("eager"):
        want = jax.jit(_value_and_grads)(k, h0, lg, snap, w)
    force = {} if seg is None else dict(seg_len=seg)
    with mingru_jax.use_backend("triton"), switches.forced("givens_recurrence", **force):
        got = jax.jit(lambda *a: _value_and_grads(*a))(k, h0, lg, snap, w)
    assert rel_err(np.asarray(got[0]), _loop(k, h0, lg, snap)) < 1e-5
    for g, e in zip(got, want, strict=True):
        assert g.shape == e.shape and g.dtype == e.dtype
        assert rel_err(np.asarray(g), np.asarray(e)) < 1e-5


@pytest.mark.interpreter
def test_vmap_of_the_triton_cell():
    k, h0, lg, snap, _ = _inputs(2, 5, 2, True, True, True)
    with mingru_jax.use_backend("triton"):
        got = jax.vmap(lambda k, h0, lg: rotation_cell(
            k[None], h0[None], lg[None], snap_k=snap)[0])(k, h0, lg)
    assert rel_err(np.asarray(got), _loop(k, h0, lg, snap)) < 1e-5


@pytest.mark.parametrize(("args", "match"), [
    (dict(k=jnp.ones((2, 3, 17))), "k must be"),
    (dict(k=jnp.ones((2, 0, 18))), "at least one time step"),
    (dict(initial_state=jnp.ones((2, 7))), "initial_state must be"),
    (dict(log_gamma=jnp.ones((2, 3, 4))), "log_gamma must be"),
    (dict(snap_k=jnp.array([2.0, 3.0])), "snap_k must be"),
    (dict(snap_k=jnp.array([2.0, 0.0, 3.0])), "snap_k must be positive"),
    (dict(log_gamma=jnp.ones((2, 3, 3), jnp.bfloat16)), "dtype"),
])
def test_rotation_cell_rejects_bad_inputs(args, match):
    call = dict(k=jnp.ones((2, 3, 18)), initial_state=None, log_gamma=None, snap_k=None) | args
    with pytest.raises((TypeError, ValueError), match=match):
        rotation_cell(call.pop("k"), **call)


def test_same_h_as_the_pytorch_cell():
    """The same projection gives the same ``h`` as :func:`mingru.cells.rotation_cell`."""
    torch = pytest.importorskip("torch")
    from mingru.cells import rotation_cell as torch_rotation_cell

    k, h0, lg, snap, _ = _inputs(2, 9, 3, True, True, True)
    want = torch_rotation_cell(*(torch.tensor(np.asarray(x)) for x in (k, h0, lg)),
                               snap_k=torch.tensor(np.asarray(snap)))
    got = jax.jit(lambda *a: rotation_cell(*a[:3], snap_k=a[3]))(k, h0, lg, snap)
    assert rel_err(np.asarray(got), want.detach().numpy()) < 1e-5
