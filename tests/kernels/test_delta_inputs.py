"""The delta-rule mixer's fused inputs (op ``delta_inputs``) against a float64 oracle written
out by hand (the split, ``k / max(sqrt(Σ k²), eps)``, ``2 / (1 + e^{−z})``): the four outputs and
the projection's gradient, with odd row counts and head sizes, several micro-steps, a key
below ``eps`` (the clamp's branch), unused outputs, the custom ops' registration, a clear
error for a wrong width, and DeltaMinGRU on it equal to the mixer on its eager twin. Through
the interpreter on CPU, compiled on the GPU in every dtype.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru.cells import delta_inputs
from mingru.mixers.delta import DeltaMinGRU
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE, delta_inputs_oracle

F64 = torch.float64
EPS = 1e-6


def _oracle(p: torch.Tensor, H: int, nh: int, dk: int, dv: int):
    return delta_inputs_oracle(p, H, nh, dk, dv, eps=EPS)


def _check(N: int, H: int, nh: int, dk: int, dv: int, dtype=torch.float32, used=(1, 1, 1, 1),
           tol=2e-6) -> None:
    g = torch.Generator().manual_seed(N * 31 + H * 7 + nh + dk)
    W = H * dk + nh * H * (dk + dv + 1)
    p = torch.randn(2, N, W, generator=g, dtype=F64) * 2
    if dtype != torch.float16:
        # One key far below eps: the clamp's branch, whose gradient dk̂/eps (~1e6) float16
        # cannot hold (the eager twin overflows there too).
        p[0, 0, H * dk:H * dk + dk] *= 1e-9
    p = p.to(dtype).to(F64).to(DEVICE)  # the inputs the kernel sees
    outs64 = _oracle(p, H, nh, dk, dv)
    weights = [torch.randn(o.shape, generator=g, dtype=F64).to(DEVICE) if u else None
               for o, u in zip(outs64, used, strict=True)]
    p64 = p.clone().requires_grad_()
    sum((o * w).sum() for o, w in zip(_oracle(p64, H, nh, dk, dv), weights, strict=True)
        if w is not None).backward()
    leaf = p.to(dtype).requires_grad_()
    with mingru.use_backend("triton"):
        outs = delta_inputs(leaf, H, nh, dk, dv, EPS)
    sum((o.double() * w).sum() for o, w in zip(outs, weights, strict=True)
        if w is not None).backward()
    for name, o, o64 in zip("qkvb", outs, outs64, strict=True):
        assert o.dtype == dtype and o.shape == o64.shape and o.is_contiguous(), name
        assert rel_err(o, o64) <= tol, name
    assert leaf.grad.dtype == dtype
    assert rel_err(leaf.grad, p64.grad) <= tol


@pytest.mark.interpreter
@pytest.mark.parametrize(("N", "H", "nh", "dk", "dv"), [
    (7, 2, 1, 4, 3), (63, 3, 2, 60, 20), (1, 1, 3, 16, 16), (20, 4, 1, 64, 64),
    (5, 1, 1, 1, 1),
], ids=["small", "T63-dk60", "one-row-nh3", "d64", "d1"])
def test_matches_float64(N, H, nh, dk, dv):
    _check(N, H, nh, dk, dv)


@pytest.mark.interpreter
@pytest.mark.parametrize("used", [(0, 1, 0, 1), (1, 0, 1, 0), (0, 0, 0, 1)],
                         ids=["k-beta", "q-v", "beta"])
def test_unused_outputs_give_zero_gradients(used):
    _check(9, 2, 2, 8, 5, used=used)


@pytest.mark.interpreter
def test_custom_op_registration():
    from mingru._launch import delta_inputs as launcher  # registers the custom ops

    p = torch.randn(6, 2 * 4 + 2 * 2 * (4 + 3 + 1), device=DEVICE, requires_grad=True)
    result = torch.library.opcheck(
        torch.ops.mingru.delta_inputs_fwd.default, (p, 2, 2, 4, 3, EPS),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                    "test_aot_dispatch_dynamic"),
    )
    assert set(result.values()) == {"SUCCESS"}, result
    assert launcher.prefer_over_eager(p, 2, 2, 4, 3, EPS) is True


@pytest.mark.interpreter
def test_a_wrong_width_names_the_expected_shape():
    with pytest.raises(ValueError, match=r"p must have shape \(\.\.\., 24\)"):
        delta_inputs(torch.randn(2, 3, 25, device=DEVICE), 2, 1, 4, 3, EPS)


@pytest.mark.interpreter
@pytest.mark.parametrize("nh", [1, 2])
def test_mixer_on_fused_inputs_matches_its_eager_twin(nh):
    """DeltaMinGRU's projection split by the kernels equals the eager split, outputs and
    every parameter's gradient (the delta rule itself eager both times)."""
    torch.manual_seed(0)
    mixer = DeltaMinGRU(10, 12, n_heads=2, nh=nh, decay="learnable").to(DEVICE)
    x = torch.randn(2, 5, 10, device=DEVICE)
    results = {}
    for mode in ("eager", "triton"):
        for p in mixer.parameters():
            p.grad = None
        leaf = x.clone().requires_grad_()
        with mingru.use_backend(mode):
            parts = mixer._project(leaf)
        sum((t.double() * (i + 1)).sin().sum() for i, t in enumerate(parts)).backward()
        results[mode] = (parts, leaf.grad, [p.grad for p in mixer.parameters()
                                            if p.grad is not None])
    (parts_e, dx_e, grads_e), (parts_t, dx_t, grads_t) = results["eager"], results["triton"]
    for a, b in zip(parts_t, parts_e, strict=True):
        assert rel_err(a, b) <= 1e-6
    assert rel_err(dx_t, dx_e) <= 1e-5
    assert len(grads_t) == len(grads_e)
    for a, b in zip(grads_t, grads_e, strict=True):
        assert rel_err(a, b) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("N", "H", "nh", "dk", "dv"), [(16384, 4, 1, 64, 64), (999, 3, 2, 60, 20)])
def test_gpu_matches_float64(dtype, N, H, nh, dk, dv):
    _check(N, H, nh, dk, dv, dtype, tol=2e-6 if dtype == torch.float32 else 1e-2)
