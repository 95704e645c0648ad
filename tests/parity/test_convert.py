"""Cross-framework parity: the same weights and inputs give the same outputs and gradients in
``mingru`` (PyTorch) and ``mingru_jax`` (Flax NNX), with weights converted both ways.

For every mixer (decay on, nh = 2 delta, Rotation with snap) and for a homogeneous and a
heterogeneous (``["signed", "givens"]``) MinGRUStack: build the PyTorch module, convert it to
NNX, run both on the same float32 inputs and compare outputs (1e-5 relative) and gradients
with respect to the inputs and every parameter (1e-4); then convert a freshly initialised NNX
module to PyTorch and compare again. The state-output mixers are also checked against the
float64 oracles of tests/reference.py (independent of both frontends). Needs both frameworks:
skipped when either is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
import jax.numpy as jnp  # noqa: E402

import mingru  # noqa: E402
import mingru_jax  # noqa: E402
from mingru_jax.convert import _pairs, nnx_to_torch, torch_to_nnx  # noqa: E402
from tests import reference  # noqa: E402
from tests.helpers import assert_rel  # noqa: E402

IN, HID, B, T = 3, 8, 2, 5
FLOOR = 1e-3  # errors are relative to the largest reference magnitude, but at least this

CASES = {
    "log": ("MinGRU", (IN, HID), {}),
    "log-decay-h0": (
        "MinGRU", (IN, HID), dict(learnable_h0=True, decay="learnable", log1p_delta=True)
    ),
    "signed": (
        "SignedMinGRU", (IN, HID),
        dict(coupled=True, learnable_h0=True, decay="fixed", decay_rate=0.5),
    ),
    "rotation-snap": ("RotationMinGRU", (IN, HID), dict(snap=(2, 3, 4, 6), decay="learnable")),
    "givens": ("GivensMinGRU", (IN, HID), dict(block_size=4, rounds=3, decay="learnable")),
    "delta-nh2": (
        "DeltaMinGRU", (IN, HID), dict(n_heads=2, nh=2, chunk_size=3, decay="learnable")
    ),
    "stack-log": (
        "MinGRUStack", (IN, HID, 2),
        dict(mlp_expansion=2, mixer="log", mixer_kwargs={"decay": "learnable"},
             decay_layers="last"),
    ),
    "stack-expanded": (
        "MinGRUStack", (IN, HID, 2),
        dict(mlp_expansion=2, learnable_h0=True, mixer=["log", "rotation"], mixer_expansion=3),
    ),
    "stack-signed-givens": (
        "MinGRUStack", (IN, HID, 2),
        dict(mlp_expansion=2, learnable_h0=True, mixer=["signed", "givens"],
             mixer_kwargs={"givens": {"block_size": 4, "rounds": 2}}),
    ),
}


def _decayed(kw) -> bool:
    return bool(kw.get("decay") or (kw.get("mixer_kwargs") or {}).get("decay"))


def _inputs(seed: int, decay: bool, batch: int = B, steps: int = T):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, steps, IN)).astype(np.float32)
    dt = rng.uniform(0.0, 2.0, (batch, steps)).astype(np.float32) if decay else None
    ct = rng.standard_normal((batch, steps, HID)).astype(np.float32)  # output cotangent
    return x, dt, ct


def _torch_out(out):
    return out[0] if isinstance(out, tuple) else out


def _jax_runner(fx):
    """Jitted ``(params, x, dt, ct) -> (y, (d_params, d_x))`` for ``sum(y * ct)``."""
    graphdef, params = nnx.split(fx)

    def loss(params, x, dt, ct):
        y = nnx.merge(graphdef, params)(x, None, dt)
        y = y[0] if isinstance(y, tuple) else y
        return jnp.sum(y * ct), y

    @jax.jit
    def run(params, x, dt, ct):
        (_, y), grads = jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(
            params, x, dt, ct
        )
        return y, grads

    return graphdef, params, run


def _check_outputs_and_grads(pt, graphdef, y_pt, xt, y_fx, g_params, g_x):
    """PyTorch output and gradients (after ``backward``) against the JAX run's: output 1e-5,
    gradients w.r.t. the input and every parameter 1e-4 (relative)."""
    assert_rel(y_fx, y_pt.detach().cpu().numpy(), 1e-5, "output", floor=FLOOR)
    assert_rel(g_x, xt.grad.cpu().numpy(), 1e-4, "d x", floor=FLOOR)
    grad_module = nnx.merge(graphdef, g_params)  # a module whose parameters are the gradients
    pairs = _pairs(pt, grad_module)
    assert len(pairs) == len(list(pt.parameters()))
    for param, g_var, transpose, name in pairs:
        g = np.asarray(g_var[...])
        assert_rel(g.T if transpose else g, param.grad.cpu().numpy(), 1e-4, f"d {name}", floor=FLOOR)


@pytest.mark.usefixtures("on_host")  # PyTorch on the CPU too; both on a GPU: below
@pytest.mark.parametrize("case", list(CASES))
def test_parity_both_directions(case):
    cls, args, kw = CASES[case]
    decay = _decayed(kw)
    torch.manual_seed(0)
    pt = getattr(mingru, cls)(*args, **kw)
    fx = getattr(mingru_jax, cls)(*args, **kw, rngs=nnx.Rngs(0))
    assert torch_to_nnx(pt, fx) is fx
    graphdef, params, run = _jax_runner(fx)

    # PyTorch -> Flax: outputs and gradients w.r.t. the input and every parameter.
    x, dt, ct = _inputs(1, decay)
    xt = torch.from_numpy(x).requires_grad_(True)
    dtt = None if dt is None else torch.from_numpy(dt)
    y_pt = _torch_out(pt(xt, None, dtt))
    (y_pt * torch.from_numpy(ct)).sum().backward()
    y_fx, (g_params, g_x) = run(params, jnp.asarray(x), None if dt is None else jnp.asarray(dt),
                                jnp.asarray(ct))
    _check_outputs_and_grads(pt, graphdef, y_pt, xt, y_fx, g_params, g_x)

    # An independent float64 oracle for the state-output mixers.
    if cls in reference.ORACLES:
        ref = reference.oracle_for(pt)(pt, x, None, dt)
        assert_rel(y_fx, ref, 1e-5, "output vs float64 oracle", floor=FLOOR)

    # Flax -> PyTorch, from a different initialisation (same compiled JAX function).
    fx2 = getattr(mingru_jax, cls)(*args, **kw, rngs=nnx.Rngs(7))
    pt2 = nnx_to_torch(fx2, getattr(mingru, cls)(*args, **kw))
    x2, dt2, ct2 = _inputs(2, decay)
    y2_fx, _ = run(nnx.state(fx2), jnp.asarray(x2), None if dt2 is None else jnp.asarray(dt2),
                   jnp.asarray(ct2))
    with torch.no_grad():
        y2_pt = _torch_out(pt2(torch.from_numpy(x2), None,
                               None if dt2 is None else torch.from_numpy(dt2)))
    assert_rel(y2_fx, y2_pt.numpy(), 1e-5, "output after nnx_to_torch", floor=FLOOR)

    # Round trip is exact, parameter by parameter.
    pt3 = nnx_to_torch(torch_to_nnx(pt2, getattr(mingru_jax, cls)(*args, **kw,
                                                                  rngs=nnx.Rngs(3))),
                       getattr(mingru, cls)(*args, **kw))
    for (n2, p2), (n3, p3) in zip(pt2.state_dict().items(), pt3.state_dict().items(),
                                  strict=True):
        assert n2 == n3 and torch.equal(p2, p3), n2


def test_conversion_rejects_modules_that_are_not_twins():
    fx = mingru_jax.GivensMinGRU(IN, HID, block_size=4, rounds=3, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="rounds is 2 in PyTorch but 3 in Flax"):
        torch_to_nnx(mingru.GivensMinGRU(IN, HID, block_size=4, rounds=2), fx)
    with pytest.raises(ValueError, match="not twins"):
        torch_to_nnx(mingru.MinGRU(IN, HID), fx)
    with pytest.raises(ValueError, match="mixer_expansion is 2 in PyTorch but 1 in Flax"):
        torch_to_nnx(mingru.MinGRUBlock(HID, mixer_expansion=2),
                     mingru_jax.MinGRUBlock(HID, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="snap"):
        torch_to_nnx(mingru.RotationMinGRU(IN, HID, snap=None),
                     mingru_jax.RotationMinGRU(IN, HID, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="h0"):
        torch_to_nnx(mingru.MinGRU(IN, HID, learnable_h0=True),
                     mingru_jax.MinGRU(IN, HID, rngs=nnx.Rngs(0)))
    with pytest.raises(ValueError, match="without a PyTorch counterpart"):
        nnx_to_torch(mingru_jax.MinGRU(IN, HID, decay="learnable", rngs=nnx.Rngs(0)),
                     _drop_rho(mingru.MinGRU(IN, HID, decay="learnable")))


def _drop_rho(module):
    """A torch MinGRU whose decay lost its parameter: the Flax side then has one extra."""
    module.decay.rho = None
    return module


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(CASES))
def test_parity_on_gpu_triton(case):
    """The same comparison on a GPU, both frontends on their Triton path (PyTorch-on-GPU vs
    jax-triton), at a longer sequence so the chunked kernels run."""
    if not torch.cuda.is_available() or jax.default_backend() != "gpu":
        pytest.skip("needs CUDA for both PyTorch and JAX")
    if mingru_jax.available() is not True:
        pytest.skip(f"jax-triton path unavailable: {mingru_jax.available()}")
    cls, args, kw = CASES[case]
    decay = _decayed(kw)
    torch.manual_seed(0)
    pt = getattr(mingru, cls)(*args, **kw).cuda()
    fx = getattr(mingru_jax, cls)(*args, **kw, rngs=nnx.Rngs(0))
    torch_to_nnx(pt, fx)
    x, dt, ct = _inputs(5, decay, batch=3, steps=300)
    xt = torch.from_numpy(x).cuda().requires_grad_(True)
    dtt = None if dt is None else torch.from_numpy(dt).cuda()
    with mingru.use_backend("triton"):
        y_pt = _torch_out(pt(xt, None, dtt))
        (y_pt * torch.from_numpy(ct).cuda()).sum().backward()
    with jax.default_matmul_precision("highest"), mingru_jax.use_backend("auto"):
        graphdef, params, run = _jax_runner(fx)
        y_fx, (g_params, g_x) = run(params, jnp.asarray(x),
                                    None if dt is None else jnp.asarray(dt), jnp.asarray(ct))
    _check_outputs_and_grads(pt, graphdef, y_pt, xt, y_fx, g_params, g_x)
