"""Triton kernels of ``linear_recurrence`` (the states-only recurrence with initial and final
state) against the float64 loop of tests/reference.py and the eager twin: forward and every
gradient (``a``, ``b``, ``initial_state``, through ``h`` and ``h_T``), both launch strategies
(the walk and the look-back) forced through :func:`mingru_kernels.launch.switches.forced`, NaN-poisoned outputs, odd shapes,
chaining through the final state, and ``torch.compile(fullgraph=True)``.
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
    PIPELINE_SHAPE,
    PLANS,
    WALK_CASES,
    assert_pipelining_changes_nothing,
    case_id,
    linear_inputs,
    triton_plan,
)
from tests.reference import loop_recurrence

pytestmark = pytest.mark.usefixtures("fast_interpreter")


def _run(fn, a, b, h0, w, w_T):
    """Outputs and gradients of ``<h, w> + <h_T, w_T>`` for fresh leaves of ``a, b, h0``."""
    leaves = [x.detach().clone().requires_grad_() for x in (a, b)]
    h0_leaf = None if h0 is None else h0.detach().clone().requires_grad_()
    h, h_T = fn(*leaves, h0_leaf)
    loss = (h.to(w.dtype) * w).sum() + (h_T.to(w.dtype) * w_T).sum()
    loss.backward()
    grads = [x.grad for x in leaves] + ([] if h0_leaf is None else [h0_leaf.grad])
    return h.detach(), h_T.detach(), grads


def _lib(a, b, h0):
    return mingru.linear_recurrence(a, b, initial_state=h0, return_final_state=True)


@pytest.mark.interpreter
@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no-h0"])
@pytest.mark.parametrize("case", WALK_CASES + LOOKBACK_CASES, ids=case_id)
def test_forward_and_every_gradient(case, with_h0):
    plan, (B, T, D) = case
    a, b = linear_inputs(B, T, D)
    h0 = torch.randn(B, D, device=DEVICE) if with_h0 else None
    w, w_T = torch.randn(B, T, D, dtype=F64), torch.randn(B, D, dtype=F64)
    w, w_T = w.to(DEVICE), w_T.to(DEVICE)
    with triton_plan("linear_recurrence", **PLANS[plan]):
        h, h_T, grads = _run(_lib, a, b, h0, w, w_T)
    with mingru.use_backend("eager"):
        he, hTe, grads_e = _run(_lib, a, b, h0, w, w_T)
    h64 = None if h0 is None else h0.to(F64)
    ho, hTo, grads_o = _run(loop_recurrence, a.to(F64), b.to(F64), h64, w, w_T)
    assert h.dtype == torch.float32 and h.shape == (B, T, D) and h_T.shape == (B, D)
    assert not torch.isnan(h).any() and not torch.isnan(h_T).any()
    for got, eager, oracle in zip((h, h_T, *grads), (he, hTe, *grads_e), (ho, hTo, *grads_o),
                                  strict=True):
        assert rel_err(got, oracle) < 2e-6
        assert rel_err(got, eager) < 2e-6


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "lookback", "lookback-walks"])
def test_chaining_through_the_final_state_equals_one_call(plan):
    B, T, D = 2, 29, 5
    a, b = linear_inputs(B, T, D)
    h0 = torch.randn(B, D, device=DEVICE)
    with triton_plan("linear_recurrence", **PLANS[plan]):
        whole, whole_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
        first, mid = mingru.linear_recurrence(a[:, :11], b[:, :11], h0, return_final_state=True)
        second, end = mingru.linear_recurrence(a[:, 11:], b[:, 11:], mid, return_final_state=True)
    assert rel_err(torch.cat([first, second], 1), whole) < 1e-6
    assert rel_err(end, whole_T) < 1e-6


@pytest.mark.interpreter
def test_only_the_final_state_in_the_loss():
    """``dh`` is absent (only ``h_T`` is used): the kernels take a zero state gradient."""
    B, T, D = 2, 21, 3
    a, b = linear_inputs(B, T, D)
    h0 = torch.randn(B, D, device=DEVICE)
    leaves = [x.clone().requires_grad_() for x in (a, b, h0)]
    with triton_plan("linear_recurrence", **PLANS["lookback"]):
        _, h_T = mingru.linear_recurrence(*leaves, return_final_state=True)
    h_T.sum().backward()
    ref = [x.detach().to(F64).requires_grad_() for x in (a, b, h0)]
    loop_recurrence(*ref)[1].sum().backward()
    for got, want in zip(leaves, ref, strict=True):
        assert rel_err(got.grad, want.grad) < 2e-6


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", ["walk", "lookback"])
def test_expanded_and_strided_state_gradients_are_read_in_place(plan):
    """``h.sum()`` sends an expanded (stride 0) gradient and a loss on ``h.transpose(1, 2)`` a
    transposed one; the backward reads both through their strides, without a copy."""
    B, T, D = 2, 37, 5
    a, b = linear_inputs(B, T, D)
    w = torch.randn(B, D, T, dtype=F64).to(DEVICE)
    ref = [x.to(F64).requires_grad_() for x in (a, b)]
    h_ref, _ = loop_recurrence(*ref)
    want_sum = torch.autograd.grad(h_ref.sum(), ref, retain_graph=True)
    want_t = torch.autograd.grad((h_ref.transpose(1, 2) * w).sum(), ref)
    leaves = [x.clone().requires_grad_() for x in (a, b)]
    with triton_plan("linear_recurrence", **PLANS[plan]):
        h = mingru.linear_recurrence(*leaves)
        got_sum = torch.autograd.grad(h.sum(), leaves, retain_graph=True)
        got_t = torch.autograd.grad((h.transpose(1, 2).to(F64) * w).sum(), leaves)
    for got, want in zip((*got_sum, *got_t), (*want_sum, *want_t), strict=True):
        assert rel_err(got, want) < 2e-6


@pytest.mark.interpreter
def test_non_contiguous_inputs_and_t1():
    a, b = linear_inputs(2, 6, 9)
    a, b = a.transpose(1, 2), b.transpose(1, 2)  # (2, 9, 6), not contiguous
    with mingru.use_backend("triton"):
        h = mingru.linear_recurrence(a, b)
        h1, h1_T = mingru.linear_recurrence(a[:, :1], b[:, :1], return_final_state=True)
    assert rel_err(h, loop_recurrence(a.to(F64), b.to(F64))[0]) < 2e-6
    assert rel_err(h1[:, 0], b[:, 0]) < 1e-7 and rel_err(h1_T, b[:, 0]) < 1e-7


def test_compile_traces_without_graph_breaks():
    """The custom ops trace (fullgraph); inductor compiles them on a GPU in
    test_linear_scan.py's TestGPU.test_torch_compile_fullgraph."""
    a, b = linear_inputs(2, 9, 4)
    h0 = torch.randn(2, 4, device=DEVICE)

    def fn(a, b, h0):
        h, h_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
        return h.sum() + h_T.sum()

    with mingru.use_backend("triton"):
        want = fn(a, b, h0)
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(a, b, h0)
    assert rel_err(got, want) < 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1, 500), (3, 63, 500), (2, 1000, 17), (1, 65536, 33)])
def test_gpu_dtypes_and_shapes(dtype, shape):
    B, T, D = shape
    a, b = linear_inputs(B, T, D, dtype=dtype)
    h0 = torch.randn(B, D, device=DEVICE).to(dtype)
    with mingru.use_backend("triton"):
        h, h_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
    ho, hTo = loop_recurrence(a.to(F64), b.to(F64), h0.to(F64))
    tol = 2e-5 if dtype == torch.float32 else 2e-2
    assert h.dtype == dtype and rel_err(h, ho) < tol and rel_err(h_T, hTo) < tol


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_lookback_equals_the_walk(dtype):
    """The single-pass look-back plan on the GPU (thousands of chunks waiting on each other)
    equals the walk (checked against the float64 loop above), forward and every gradient, on
    tiles of 2 and 4 warps, long and wide; also with only every 5th chunk publishing its
    inclusive state (look-backs compose aggregates). One walk is the reference of them all."""
    B, T, D = 2, 30000, 257
    a, b = linear_inputs(B, T, D, dtype=dtype)
    h0 = torch.randn(B, D, device=DEVICE).to(dtype)
    w, w_T = torch.randn(B, T, D, dtype=F64, device=DEVICE), torch.randn(B, D, dtype=F64,
                                                                         device=DEVICE)
    with triton_plan("linear_recurrence", strategy="walk"):
        want = _run(_lib, a, b, h0, w, w_T)
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    for bt, bd, nw in [(64, 32, 4), (128, 32, 4), (32, 128, 2)]:
        for stride in (1, 5):
            with triton_plan("linear_recurrence", strategy="lookback", block_t=bt, block_d=bd,
                             num_warps=nw, lookback_stride=stride):
                got = _run(_lib, a, b, h0, w, w_T)
            for g, wt in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2]),
                             strict=True):
                assert g.dtype == dtype and torch.isfinite(g).all(), (bt, bd, nw, stride)
                assert rel_err(g, wt) < tol, (bt, bd, nw, stride)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_pipelined_tile_loop(dtype):
    B, T, D = PIPELINE_SHAPE
    a, b = linear_inputs(B, T, D, dtype=dtype)
    h0 = torch.randn(B, D, device=DEVICE).to(dtype)
    cot = (torch.randn(B, T, D, device=DEVICE).to(dtype), torch.randn(B, D, device=DEVICE).to(dtype))
    assert_pipelining_changes_nothing("linear_recurrence", _lib, (a, b, h0), cot)
