"""Triton kernels of ``mingru_cell`` (the fused MinGRU and signed cells) against the float64
loop of tests/reference.py and the eager twin: outputs and every gradient (pre-activations,
``h_0``, the log-decay in both of its shapes), both launch strategies (the walk and the
look-back), NaN-poisoned outputs,
odd shapes, T up to 65536, ±80 pre-activations, expanded gradients, chaining through the final
state, and ``torch.compile(fullgraph=True)``.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru.cells import mingru_cell
from tests.helpers import rel_err
from tests.kernels.cases import (
    CELLS,
    DEVICE,
    F64,
    LONG_WALK_SHAPE,
    PIPELINE_SHAPE,
    PLANS,
    assert_backward_tiles,
    assert_long_walk_plan_matches_float64,
    assert_pipelining_changes_nothing,
    call_cell,
    cell_inputs,
    triton_plan,
)
from tests.reference import loop_cell

pytestmark = pytest.mark.usefixtures("fast_interpreter")

def _oracle(cell, k, h0, lg):
    signed, coupled = CELLS[cell]
    return loop_cell(k, h0, lg, signed, coupled)


def _grads(fn, inputs, w, w_T):
    leaves = [None if x is None else x.detach().clone().requires_grad_() for x in inputs]
    h, h_T = fn(*leaves)
    ((h.to(w.dtype) * w).sum() + (h_T.to(w.dtype) * w_T).sum()).backward()
    return h.detach(), h_T.detach(), [x.grad for x in leaves if x is not None]


@pytest.mark.interpreter
@pytest.mark.parametrize("decay", [None, "B,T,1", "B,T,D"], ids=["no-decay", "decay1", "decayD"])
@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize(("plan", "shape"), [
    ("walk", (2, 37, 5)), ("walk", (2, 1, 3)), ("lookback", (1, 63, 3)),
    ("lookback", (2, 37, 17)), ("lookback-walks", (2, 37, 3)),
], ids=lambda v: v if isinstance(v, str) else "B{}T{}D{}".format(*v))
def test_forward_and_every_gradient(plan, shape, cell, decay):
    B, T, D = shape
    k, h0, lg = cell_inputs(cell, B, T, D, decay)
    w = torch.randn(B, T, D, dtype=F64).to(DEVICE)
    w_T = torch.randn(B, D, dtype=F64).to(DEVICE)
    inputs = (k, h0, lg)
    with triton_plan("mingru_cell", **PLANS[plan]):
        h, h_T, grads = _grads(lambda *x: call_cell(cell, *x), inputs, w, w_T)
    with mingru.use_backend("eager"):
        he, hTe, grads_e = _grads(lambda *x: call_cell(cell, *x), inputs, w, w_T)
    ho, hTo, grads_o = _grads(lambda *x: _oracle(cell, *x),
                              [None if x is None else x.to(F64) for x in inputs], w, w_T)
    assert h.dtype == torch.float32 and h.shape == (B, T, D) and h_T.shape == (B, D)
    assert len(grads) == len(grads_o) == (3 if decay else 2)
    assert grads[-1].shape == (lg if decay else h0).shape
    for got, eager, oracle in zip((h, h_T, *grads), (he, hTe, *grads_e), (ho, hTo, *grads_o),
                                  strict=True):
        assert not torch.isnan(got).any()
        assert rel_err(got, oracle) < 5e-6
        assert rel_err(got, eager) < 5e-6


@pytest.mark.interpreter
@pytest.mark.parametrize("cell", ["log", "coupled"])
def test_t1000_without_initial_state(cell):
    k, _, lg = cell_inputs(cell, 1, 1000, 3, "B,T,D")
    with triton_plan("mingru_cell", **PLANS["lookback"]):
        h, h_T = call_cell(cell, k, None, lg)
    ho, hTo = _oracle(cell, k.to(F64), None, lg.to(F64))
    assert rel_err(h, ho) < 5e-6 and rel_err(h_T, hTo) < 5e-6


@pytest.mark.interpreter
@pytest.mark.slow
@pytest.mark.parametrize("cell", ["log", "signed"])
def test_long_sequence_with_extreme_pre_activations(cell):
    """T = 65536 with pre-activations up to ±80 (saturated gates, products that underflow to
    0 within a tile): finite, and equal to the float64 loop; gradients on a shorter piece."""
    B, T, D = 1, 65536, 3
    k, h0, _ = cell_inputs(cell, B, T, D, None, scale=30.0)
    k = k.clamp(-80, 80)
    # Long tiles keep the interpreter's per-tile cost down; the GPU test runs the real plan.
    with triton_plan("mingru_cell", strategy="walk", block_t=2048, block_d=4):
        h, h_T = call_cell(cell, k, h0, None)
    # The loop in NumPy: the same float64 steps, a tenth of torch's per-op cost.
    ho, hTo = (torch.from_numpy(x) for x in _oracle(cell, k.cpu().double().numpy(),
                                                     h0.cpu().double().numpy(), None))
    h, h_T = h.cpu(), h_T.cpu()
    assert torch.isfinite(h).all()
    assert rel_err(h, ho) < 1e-5 and rel_err(h_T, hTo) < 1e-5
    piece = (k[:, :2000], h0, None)
    w, w_T = torch.randn(B, 2000, D, dtype=F64).to(DEVICE), torch.randn(B, D, dtype=F64).to(DEVICE)
    with triton_plan("mingru_cell", strategy="walk", block_t=256, block_d=4):
        *_, grads = _grads(lambda *x: call_cell(cell, *x), piece, w, w_T)
    *_, grads_o = _grads(lambda *x: _oracle(cell, *x), [piece[0].to(F64), h0.to(F64), None],
                         w.to(DEVICE), w_T.to(DEVICE))
    for got, want in zip(grads, grads_o, strict=True):
        assert torch.isfinite(got).all() and rel_err(got, want) < 1e-5


@pytest.mark.interpreter
def test_expanded_gradient_and_chaining_through_the_final_state():
    """The gradient of ``h.sum()`` arrives expanded (stride 0) and is read in place; two calls
    chained through ``h_T`` equal one call."""
    k, h0, lg = cell_inputs("signed", 2, 29, 4, "B,T,1")
    with triton_plan("mingru_cell", **PLANS["lookback"]):
        whole, whole_T = call_cell("signed", k, h0, lg)
        first, mid = call_cell("signed", k[:, :11], h0, lg[:, :11])
        second, end = call_cell("signed", k[:, 11:], mid, lg[:, 11:])
        leaf = k.clone().requires_grad_()
        call_cell("signed", leaf, h0, lg)[0].sum().backward()
    assert rel_err(torch.cat([first, second], 1), whole) < 1e-6 and rel_err(end, whole_T) < 1e-6
    ref = k.to(F64).requires_grad_()
    _oracle("signed", ref, h0.to(F64), lg.to(F64))[0].sum().backward()
    assert rel_err(leaf.grad, ref.grad) < 5e-6


def test_compile_traces_without_graph_breaks():
    """The custom ops trace (fullgraph); inductor compiles them on a GPU in
    test_linear_scan.py's TestGPU.test_torch_compile_fullgraph."""
    k, h0, lg = cell_inputs("log", 2, 9, 4, "B,T,D")

    def fn(k, h0, lg):
        h, h_T = mingru_cell(k, h0, lg, return_final_state=True)
        return h.sum() + h_T.sum()

    leaf = k.clone().requires_grad_()
    with mingru.use_backend("triton"):
        want = fn(k, h0, lg)
        got = torch.compile(fn, fullgraph=True, backend="aot_eager")(leaf, h0, lg)
        got.backward()
    assert rel_err(got, want) < 1e-6 and torch.isfinite(leaf.grad).all()


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(k=torch.randn(2, 5, 7)), r"multiple of 2"),
    (dict(k=torch.randn(2, 5)), r"k must have shape \(B, T, 2·D\)"),
    (dict(k=torch.randn(2, 0, 6)), r"at least one time step"),
    (dict(k=torch.randn(2, 5, 6), initial_state=torch.rand(2, 4)), r"initial_state must have"),
    (dict(k=torch.randn(2, 5, 6), log_gamma=torch.rand(2, 5, 2)), r"log_gamma must have shape"),
    (dict(k=torch.randn(2, 5, 6), initial_state=torch.rand(2, 3, dtype=F64)), r"dtype of k"),
])
def test_bad_inputs_name_the_argument(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        mingru_cell(**kwargs)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("cell", list(CELLS))
@pytest.mark.parametrize("shape", [(1, 1, 500), (3, 63, 500), (2, 1000, 17), (1, 65536, 17)])
def test_gpu_dtypes_and_shapes(shape, cell, dtype):
    """Compiled kernels with the production plans; gradients up to T = 1000, the forward at
    T = 65536 against the loop in NumPy (a float64 loop on the GPU is too slow to run). The
    long T takes the look-back kernels of T = 1000 (the same D: T is no compile-time
    constant); several channel blocks look back in test_gpu_lookback_equals_the_walk."""
    B, T, D = shape
    k, h0, lg = cell_inputs(cell, B, T, D, "B,T,D", dtype=dtype)
    if T > 1000:
        with mingru.use_backend("triton"):
            h, h_T = call_cell(cell, k, h0, lg)
        ho, hTo = (torch.from_numpy(x) for x in _oracle(
            cell, *(x.cpu().double().numpy() for x in (k, h0, lg))))
        tol = 2e-5 if dtype == torch.float32 else 3e-2
        assert h.dtype == dtype and rel_err(h.cpu(), ho) < tol and rel_err(h_T.cpu(), hTo) < tol
        return
    w, w_T = torch.randn(B, T, D, dtype=F64, device=DEVICE), torch.randn(B, D, dtype=F64,
                                                                         device=DEVICE)
    with mingru.use_backend("triton"):
        h, h_T, grads = _grads(lambda *x: call_cell(cell, *x), (k, h0, lg), w, w_T)
    ho, hTo, grads_o = _grads(lambda *x: _oracle(cell, *x),
                              [x.to(F64) for x in (k, h0, lg)], w, w_T)
    tol = 2e-5 if dtype == torch.float32 else 3e-2
    assert h.dtype == dtype and rel_err(h, ho) < tol and rel_err(h_T, hTo) < tol
    for got, want in zip(grads, grads_o, strict=True):
        assert got.dtype == dtype and rel_err(got, want) < 10 * tol


def _lookback_tiles() -> list[tuple[int, int, int]]:
    """Every look-back tile the cells ship: the forwards', the float32 and the 16-bit
    backwards' (of both cells)."""
    from mingru_kernels.launch import mingru_cell as meta

    tiles = {meta.TILES[signed]["lookback_tile"] for signed in (False, True)}
    tiles |= {meta.bwd_tiles(signed, itemsize)["lookback_tile"]
              for signed in (False, True) for itemsize in (2, 4)}
    return sorted(tiles)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("cell", ["log", "coupled"])
def test_gpu_lookback_equals_the_walk(cell):
    """The single-pass look-back plan on the GPU, where programs really run concurrently and
    wait on each other (thousands of chunks, many lanes), equals the walk: outputs and every
    gradient, fp32, with an expanded state gradient and a final-state gradient, on every
    look-back tile the cells ship (forward and backward forced to it)."""
    B, T, D = 3, 20000, 300
    k, h0, lg = cell_inputs(cell, B, T, D, "B,T,D")
    w_T = torch.randn(B, D, dtype=F64, device=DEVICE)
    w = torch.randn(B, T, D, dtype=F64, device=DEVICE)
    with triton_plan("mingru_cell", strategy="walk"):
        want = _grads(lambda *x: call_cell(cell, *x), (k, h0, lg), w, w_T)
    for bt, bd, nw in _lookback_tiles():
        with triton_plan("mingru_cell", strategy="lookback", block_t=bt, block_d=bd,
                         num_warps=nw):
            got = _grads(lambda *x: call_cell(cell, *x), (k, h0, lg), w, w_T)
        for g, wt in zip((got[0], got[1], *got[2]), (want[0], want[1], *want[2]), strict=True):
            assert torch.isfinite(g).all() and rel_err(g, wt) < 1e-5, (bt, bd, nw)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("cell", list(CELLS))
def test_gpu_pipelined_tile_loop(cell, dtype):
    B, T, D = PIPELINE_SHAPE
    k, h0, lg = cell_inputs(cell, B, T, D, "B,T,D", dtype=dtype)
    cot = (torch.randn(B, T, D, device=DEVICE).to(dtype), torch.randn(B, D, device=DEVICE).to(dtype))
    assert_pipelining_changes_nothing("mingru_cell", lambda *x: call_cell(cell, *x), (k, h0, lg), cot)


@pytest.mark.gpu
@pytest.mark.parametrize("cell", ["log", "signed"])
def test_gpu_long_walk_plan(cell):
    from mingru_kernels.launch import mingru_cell as meta

    B, T, D = LONG_WALK_SHAPE
    k, h0, lg = cell_inputs(cell, B, T, D, "B,T,1")
    cot = (torch.randn(B, T, D, device=DEVICE), torch.randn(B, D, device=DEVICE))
    assert_long_walk_plan_matches_float64(meta.TILES[CELLS[cell][0]], lambda *x: call_cell(cell, *x),
                                          (k, h0, lg), cot, tol=1e-4)


@pytest.mark.parametrize("cell", ["log", "signed"])
def test_backward_plans_its_tile_by_element_size(cell, monkeypatch):
    """The PyTorch launcher plans the cell's backward with the tiles measured for its
    pre-activations' element size (``bwd_tiles``): one warp per look-back tile in bf16."""
    from mingru_kernels.launch import mingru_cell as meta

    def fwd_bwd(dtype):
        k, h0, _ = cell_inputs(cell, 1, 80, 8, None, dtype=dtype)
        h, _ = call_cell(cell, k.requires_grad_(True), h0, None)
        h.float().sum().backward()

    assert_backward_tiles(monkeypatch, fwd_bwd,
                          lambda itemsize: meta.bwd_tiles(CELLS[cell][0], itemsize))
