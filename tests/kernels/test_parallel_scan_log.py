"""Triton kernels of ``parallel_scan_log`` (what it shares with ``linear_scan`` — the planner,
compile tracing, half precision — is tested in test_elementwise_plan.py and test_linear_scan.py).

On CPU the kernels run through Triton's interpreter; on a CUDA machine the same tests run on
the GPU. Every case compares forward AND backward against the eager op and against the float64
loop of tests/reference.py, under both forced launch strategies (the walk and the look-back),
with NaN-poisoned outputs and scratch buffers (tests/kernels/conftest.py).
"""

from __future__ import annotations

import pytest
import torch

import mingru
from tests.helpers import rel_err
from tests.kernels.cases import (
    DEVICE,
    F64,
    LOOKBACK_CASES,
    PLANS,
    WALK_CASES,
    case_id,
    eager_f64,
    grads,
    log_inputs,
    triton_plan,
)
from tests.reference import loop_log

pytestmark = pytest.mark.usefixtures("fast_interpreter")

LOG_CASES = [(p, s, h0) for (p, s) in WALK_CASES + LOOKBACK_CASES for h0 in ("finite", "-inf")]


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "case", LOG_CASES, ids=lambda c: f"{case_id(c[:2])}-h0{c[2]}"
)
def test_parallel_scan_log_forward_backward(case):
    plan, (B, T, D), h0 = case
    la, lv = log_inputs(B, T, D, h0)
    cot = (torch.randn(B, T, D, device=DEVICE),)
    with triton_plan("parallel_scan_log", **PLANS[plan]):
        (h,), (dla, dlv) = grads(mingru.parallel_scan_log, (la, lv), cot)
    with mingru.use_backend("eager"):
        (he,), (dlae, dlve) = grads(mingru.parallel_scan_log, (la, lv), cot)
    (ho,), (dlao, dlvo) = grads(loop_log, (la.to(F64), lv.to(F64)), [cot[0].to(F64)])
    assert h.dtype == torch.float32 and h.shape == (B, T, D) and (h > 0).all()
    assert dlv.shape == (B, T + 1, D)
    if h0 == "-inf":  # h_0 = 0: its log has gradient 0, not NaN
        assert (dlv[:, 0] == 0).all()
    for x, eager, oracle in ((h, he, ho), (dla, dlae, dlao), (dlv, dlve, dlvo)):
        assert rel_err(x, oracle) < 1e-5
        assert rel_err(x, eager) < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "lookback", "lookback-walks"])
def test_parallel_scan_log_underflowing_products(plan):
    """Products of a underflow fp32 within a few steps (Σ log a ≈ -10³): still exact."""
    B, T, D = 1, 37, 3
    la, lv = log_inputs(B, T, D, hard=True)
    assert la.sum(1).min() < -300
    cot = (torch.randn(B, T, D, device=DEVICE),)
    with triton_plan("parallel_scan_log", **PLANS[plan]):
        (h,), (dla, dlv) = grads(mingru.parallel_scan_log, (la, lv), cot)
    (ho,), (dlao, dlvo) = grads(loop_log, (la.to(F64), lv.to(F64)), [cot[0].to(F64)])
    # per element: the states span many orders of magnitude
    assert ((h.double().cpu() - ho.cpu()).abs() / ho.cpu()).max() < 1e-5
    assert rel_err(dla, dlao) < 1e-5 and rel_err(dlv, dlvo) < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "lookback"])
def test_fast_and_exact_tiles_alternate(plan):
    """Per-element exact when the walk's tiles switch between the one-scale fast path and the
    per-row exact path: (8-step tiles) moderate values, a tile holding b = 0 and one spanning
    110 nats of log b (both exact), a tile of large coefficients a > 1 (growth 2^69), then
    moderate again — the carry crosses every kind of boundary."""
    B, T, D = 2, 48, 5
    g = torch.Generator().manual_seed(3)
    la = -torch.rand(B, T, D, generator=g, dtype=F64)
    lv = torch.randn(B, T + 1, D, generator=g, dtype=F64)
    lv[:, 9 + 3] = float("-inf")  # b = 0 in the second tile (rows 8-15)
    lv[:, 1 + 16:1 + 24] = torch.linspace(-75, 35, 8, dtype=F64)[None, :, None]  # third tile
    la[:, 24:32] = 6.0  # a = e^6 per step: growth e^48 over the fourth tile
    la, lv = la.float().to(DEVICE), lv.float().to(DEVICE)
    cot = (torch.randn(B, T, D, generator=g).to(DEVICE),)
    with triton_plan("parallel_scan_log", **PLANS[plan]):
        (h,), (dla, dlv) = grads(mingru.parallel_scan_log, (la, lv), cot)
    (ho,), (dlao, dlvo) = grads(loop_log, (la.to(F64), lv.to(F64)), [cot[0].to(F64)])
    err = (h.double().cpu() - ho.cpu()).abs() / ho.cpu()
    # Before the growth tile fp32 rounding; after it, the fp32 rounding of log₂ a = 6 log₂ e
    # (~5e-7 absolute per step) compounds to ~3e-5 in e^48 (the eager op: 1e-5).
    assert err[:, :24].max() < 1e-6 and err.max() < 1e-4
    assert rel_err(dla, dlao) < 1e-4 and rel_err(dlv, dlvo) < 1e-4


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "lookback"])
def test_expanded_state_gradient_is_read_in_place(plan):
    """``h.sum()`` sends an expanded (stride 0) gradient, read through its strides."""
    B, T, D = 2, 37, 5
    la, lv = log_inputs(B, T, D, "finite")
    leaves = [x.clone().requires_grad_() for x in (la, lv)]
    with triton_plan("parallel_scan_log", **PLANS[plan]):
        got = torch.autograd.grad(mingru.parallel_scan_log(*leaves).sum(), leaves)
    ref = [x.to(F64).requires_grad_() for x in (la, lv)]
    want = torch.autograd.grad(loop_log(*ref).sum(), ref)
    for g, w in zip(got, want, strict=True):
        assert rel_err(g, w) < 1e-5


# --- GPU: long T ------------------------------------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    D = 500

    # One long T (100 000: not a whole number of tiles), the planner's look-back there and
    # the forced walk; the same kernels as any other long T (T is no compile-time constant).
    @pytest.mark.parametrize("strategy", [None, "walk"])
    @pytest.mark.parametrize("h0", ["finite", "-inf"])
    @pytest.mark.parametrize("T", [1, 63, 1000, pytest.param(100_000, marks=pytest.mark.slow)])
    def test_log_fp32(self, T, h0, strategy):
        la, lv = log_inputs(1, T, self.D, h0, device="cuda")
        cot = (torch.randn_like(la),)
        with triton_plan("parallel_scan_log",
                         **({} if strategy is None else {"strategy": strategy})):
            outs, gs = grads(mingru.parallel_scan_log, (la, lv), cot)
        ref_outs, ref_gs = eager_f64(mingru.parallel_scan_log, (la, lv), cot)
        for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
            assert rel_err(x, r) <= 1e-5
