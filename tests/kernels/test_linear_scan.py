"""Triton kernels of ``linear_scan``, and what the elementwise scans (``linear_scan``,
``parallel_scan_log``) share besides their planner (tested in ``test_elementwise_plan.py``):
``torch.compile`` tracing, half precision.

On CPU the kernels run through Triton's interpreter (tests/conftest.py sets
``TRITON_INTERPRET=1``); on a CUDA machine the same tests run on the GPU. Every case compares
forward AND backward against the eager op and against the float64 loop of tests/reference.py,
forces both launch strategies (walk and 3-phase chunked, with several chunks and several carry
tiles) through :func:`mingru_kernels.launch.switches.forced`, and runs with NaN-poisoned
outputs and scratch buffers (tests/kernels/conftest.py), so any element a kernel fails to
write shows up as NaN.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru.cells import mingru_cell
from tests.helpers import rel_err
from tests.kernels.cases import (
    CASES,
    DEVICE,
    F64,
    PLANS,
    case_id,
    eager_f64,
    grads,
    linear_inputs,
    log_inputs,
    triton_plan,
)
from tests.reference import loop_linear

pytestmark = pytest.mark.usefixtures("fast_interpreter")


def test_outputs_are_poisoned():
    """The checks below rely on NaN-filled outputs, so unwritten elements fail."""
    from mingru._launch._alloc import new_tensor

    assert torch.isnan(new_tensor((2, 3), torch.float32, torch.device(DEVICE))).all()


# --- linear_scan -----------------------------------------------------------------------------


@pytest.mark.interpreter
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_linear_scan_forward_backward(case):
    plan, (B, T, D) = case
    a, b = linear_inputs(B, T, D)
    cot = (torch.randn(B, T, D, device=DEVICE), torch.randn(B, T, D, device=DEVICE))
    with triton_plan("linear_scan", **PLANS[plan]):
        (P, Z), (da, db) = grads(mingru.linear_scan, (a, b), cot)
    with mingru.use_backend("eager"):
        (Pe, Ze), (dae, dbe) = grads(mingru.linear_scan, (a, b), cot)
    (Po, Zo), (dao, dbo) = grads(loop_linear, (a.to(F64), b.to(F64)), [c.to(F64) for c in cot])
    for x, eager, oracle in ((P, Pe, Po), (Z, Ze, Zo), (da, dae, dao), (db, dbe, dbo)):
        assert x.dtype == torch.float32 and x.shape == (B, T, D)
        assert rel_err(x, oracle) < 2e-6
        assert rel_err(x, eager) < 2e-6


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "chunked"])
@pytest.mark.parametrize("used", ["Z", "P"])
def test_linear_scan_one_output_used(plan, used):
    """Only one output in the loss: the unused gradient is absent (the dP scan is skipped)."""
    B, T, D = 2, 13, 5
    a, b = linear_inputs(B, T, D)
    c = torch.randn(B, T, D, device=DEVICE)
    cot = (c, None) if used == "P" else (None, c)
    with triton_plan("linear_scan", **PLANS[plan]):
        _, (da, db) = grads(mingru.linear_scan, (a, b), cot)
    c64 = c.to(F64)
    cot64 = (c64, None) if used == "P" else (None, c64)
    _, (dao, dbo) = grads(loop_linear, (a.to(F64), b.to(F64)), cot64)
    assert rel_err(da, dao) < 2e-6
    if used == "P":  # Z is unused and P does not depend on b
        assert db is None or not db.abs().max() > 0
    else:
        assert rel_err(db, dbo) < 2e-6


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "chunked"])
def test_expanded_and_strided_output_gradients_are_read_in_place(plan):
    """``P.sum() + Z.sum()`` sends expanded (stride 0) gradients and a loss on transposed
    outputs transposed ones; the backward reads both through their strides, without a copy."""
    B, T, D = 2, 37, 5
    a, b = linear_inputs(B, T, D)
    w = torch.randn(B, D, T, dtype=F64, device=DEVICE)
    ref = [x.to(F64).requires_grad_() for x in (a, b)]
    P_ref, Z_ref = loop_linear(*ref)
    want_sum = torch.autograd.grad(P_ref.sum() + Z_ref.sum(), ref, retain_graph=True)
    want_t = torch.autograd.grad((P_ref.transpose(1, 2) * w).sum()
                                 + (Z_ref.transpose(1, 2) * w * 2).sum(), ref)
    leaves = [x.clone().requires_grad_() for x in (a, b)]
    with triton_plan("linear_scan", **PLANS[plan]):
        P, Z = mingru.linear_scan(*leaves)
        got_sum = torch.autograd.grad(P.sum() + Z.sum(), leaves, retain_graph=True)
        got_t = torch.autograd.grad((P.transpose(1, 2).to(F64) * w).sum()
                                    + (Z.transpose(1, 2).to(F64) * w * 2).sum(), leaves)
    for got, want in zip((*got_sum, *got_t), (*want_sum, *want_t), strict=True):
        assert rel_err(got, want) < 2e-6


@pytest.mark.interpreter
def test_linear_scan_non_contiguous_inputs():
    B, T, D = 2, 9, 6
    a, b = linear_inputs(B, D, T)  # (B, D, T) then transposed: not contiguous
    a, b = a.transpose(1, 2), b.transpose(1, 2)
    cot = (torch.randn(B, T, D, device=DEVICE), torch.randn(B, T, D, device=DEVICE))
    with triton_plan("linear_scan", **PLANS["chunked"]):
        (P, Z), (da, db) = grads(mingru.linear_scan, (a, b), cot)
    (Po, Zo), (dao, dbo) = grads(loop_linear, (a.to(F64), b.to(F64)), [c.to(F64) for c in cot])
    for x, oracle in ((P, Po), (Z, Zo), (da, dao), (db, dbo)):
        assert rel_err(x, oracle) < 2e-6


@pytest.mark.slow
@pytest.mark.interpreter
def test_custom_ops_trace_under_torch_compile_fullgraph():
    """The launchers' custom ops (fake + autograd registrations) trace without graph breaks."""
    from mingru._launch import linear_scan as linear_launcher
    from mingru._launch import parallel_scan_log as log_launcher

    a, b = linear_inputs(2, 9, 5)
    la, lv = log_inputs(2, 9, 5)

    def f(a, b, la, lv):
        P, Z = linear_launcher.run(a, b)
        return (P * 0.5 + Z).sum() + (log_launcher.run(la, lv) ** 2).sum()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    one = (torch.ones((), device=DEVICE),)
    with triton_plan("linear_scan", **PLANS["chunked"]), \
            triton_plan("parallel_scan_log", **PLANS["lookback"]):
        (y_c,), g_c = grads(compiled, (a, b, la, lv), one)
        (y_e,), g_e = grads(f, (a, b, la, lv), one)
    assert rel_err(y_c, y_e) < 1e-6
    for x, r in zip(g_c, g_e, strict=True):
        assert rel_err(x, r) < 1e-6


# --- GPU: dtypes, long T, torch.compile -------------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    D = 500

    @pytest.mark.parametrize("strategy", [None, "walk"])
    @pytest.mark.parametrize("T", [1, 63, 1000, pytest.param(65536, marks=pytest.mark.slow)])
    def test_linear_fp32(self, T, strategy):
        a, b = linear_inputs(1, T, self.D, device="cuda")
        cot = (torch.randn_like(a), torch.randn_like(a))
        with triton_plan("linear_scan", **({} if strategy is None else {"strategy": strategy})):
            outs, gs = grads(mingru.linear_scan, (a, b), cot)
        ref_outs, ref_gs = eager_f64(mingru.linear_scan, (a, b), cot)
        for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
            assert rel_err(x, r) <= 1e-5

    @pytest.mark.parametrize("dtype,tol", [(torch.bfloat16, 3e-2), (torch.float16, 4e-3)])
    @pytest.mark.parametrize("T", [63, 1000, pytest.param(65536, marks=pytest.mark.slow)])
    def test_half_precision(self, T, dtype, tol):
        a, b = linear_inputs(1, T, self.D, dtype=dtype, device="cuda")
        la, lv = log_inputs(1, T, self.D, device="cuda")
        # keep h below float16's 65504: a ≤ e^-0.01, b ≤ ~e^2.5
        la, lv = (la - 0.01).to(dtype), (lv * 0.5).to(dtype)
        for fn, inputs in ((mingru.linear_scan, (a, b)), (mingru.parallel_scan_log, (la, lv))):
            cot = [torch.randn_like(inputs[0]) for _ in range(2 if fn is mingru.linear_scan else 1)]
            with mingru.use_backend("triton"):
                outs, gs = grads(fn, inputs, cot)
            ref_outs, ref_gs = eager_f64(fn, inputs, cot)  # same rounded inputs
            for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
                assert x.dtype == dtype
                assert rel_err(x, r) <= tol

    @pytest.mark.slow
    def test_torch_compile_fullgraph(self):
        """Inductor compiles one graph of the elementwise scans' custom ops (linear_scan,
        parallel_scan_log, linear_recurrence and the MinGRU cell: one compile for all four;
        their tracing alone is tested per op, on CPU too) to the gradients of the eager
        calls."""
        a, b = linear_inputs(2, 300, 70, device="cuda")
        la, lv = log_inputs(2, 300, 70, device="cuda")
        k = torch.randn(2, 300, 140, device="cuda")
        h0 = torch.rand(2, 70, device="cuda") + 0.1

        def f(a, b, la, lv, k, h0):
            P, Z = mingru.linear_scan(a, b)
            h = mingru.parallel_scan_log(la, lv)
            r, r_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
            c, c_T = mingru_cell(k, h0, return_final_state=True)
            return ((P * 0.5 + Z).sum() + (h * h).sum() + (r * r).sum() + r_T.sum()
                    + (c * c).sum() + c_T.sum())

        inputs = (a, b, la, lv, k, h0)
        with mingru.use_backend("triton"):
            compiled = torch.compile(f, fullgraph=True)
            _, g_c = grads(compiled, inputs, (torch.ones((), device="cuda"),))
            _, g_e = grads(f, inputs, (torch.ones((), device="cuda"),))
        for x, r in zip(g_c, g_e, strict=True):
            assert rel_err(x, r) <= 1e-6
