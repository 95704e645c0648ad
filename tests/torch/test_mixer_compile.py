"""Every mixer under ``torch.compile`` on the Triton path: one graph with no breaks, the
library's kernel ops inside it, and the same outputs and parameter gradients as the eager
mixer. On a GPU the same with ``mode="reduce-overhead"``, where CUDA graphs must capture the
whole step (no cudagraph skips) and stay correct across replays with new inputs.

On CPU the kernels run through Triton's interpreter and the graphs through ``aot_eager``.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru import DeltaMinGRU, GivensMinGRU, MinGRU, RotationMinGRU, SignedMinGRU
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE

B, T, IN = 2, 11, 6

# name -> (class, kwargs, the custom op its forward must put in the graph)
CASES = {
    "log": (MinGRU, dict(hidden_size=5, decay="learnable"), "mingru.mingru_cell_fwd"),
    "signed": (SignedMinGRU, dict(hidden_size=5, learnable_h0=True, decay="fixed"), "mingru.mingru_cell_fwd"),
    "rotation": (RotationMinGRU, dict(hidden_size=6, decay="learnable"), "mingru.rotation_cell_fwd"),
    "givens": (GivensMinGRU, dict(hidden_size=8, block_size=4, rounds=2, decay="fixed"),
               "mingru.givens_cell_fwd"),
    "delta": (DeltaMinGRU, dict(hidden_size=8, n_heads=2, nh=2, decay="learnable"),
              "mingru.delta_rule_fwd"),
}


def _mixer(name: str) -> torch.nn.Module:
    cls, kwargs, _ = CASES[name]
    torch.manual_seed(0)
    return cls(IN, **kwargs).to(DEVICE)


def _inputs(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(B, T, IN, generator=g)
    dt = torch.rand(B, T, generator=g) * 2
    return x.to(DEVICE), dt.to(DEVICE)


def _loss_and_grads(m: torch.nn.Module, fn, x: torch.Tensor, dt: torch.Tensor):
    for p in m.parameters():
        p.grad = None
    leaf = x.clone().requires_grad_()
    y = fn(leaf, delta_t=dt)
    (y.float().square().sum() + y.float().sum()).backward()
    grads = {n: p.grad.detach().clone() for n, p in m.named_parameters()}
    return y.detach().clone(), leaf.grad.detach().clone(), grads


def _assert_close(got, want, tol: float) -> None:
    (y, dx, grads), (y_ref, dx_ref, grads_ref) = got, want
    assert rel_err(y, y_ref) <= tol
    assert rel_err(dx, dx_ref) <= tol
    assert grads.keys() == grads_ref.keys()
    for name in grads:
        assert rel_err(grads[name], grads_ref[name]) <= tol, name


@pytest.mark.interpreter
@pytest.mark.parametrize("name", list(CASES))
def test_mixer_compiles_fullgraph_onto_its_kernels(name):
    m = _mixer(name)
    x, dt = _inputs(1)
    graphs: list[str] = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    with mingru.use_backend("eager"):
        want = _loss_and_grads(m, m, x, dt)
    compiled = torch.compile(m, fullgraph=True, backend=recording_backend)
    with mingru.use_backend("triton"):
        got = _loss_and_grads(m, compiled, x, dt)
    assert len(graphs) == 1, f"{len(graphs)} graphs: a graph break"
    assert CASES[name][2] in graphs[0]
    _assert_close(got, want, 1e-4)


@pytest.mark.parametrize("name", list(CASES))
def test_mixer_compiles_with_symbolic_sizes(name):
    """``torch.compile(dynamic=True)``: the shape checks of ``delta_t`` (either of its two
    shapes) trace on symbolic sizes, and one graph serves a second batch and length. Dynamo's
    caches are reset before and after: the compiles of a worker's other tests count against
    the same code objects' recompile limit."""
    m = _mixer(name)
    x, dt = _inputs(3)
    torch._dynamo.reset()
    try:
        compiled = torch.compile(m, fullgraph=True, dynamic=True, backend="eager")
        with mingru.use_backend("eager"):
            for inputs, delta_t in [(x, dt), (x[:1, :7], dt[:1, :7, None])]:
                torch.testing.assert_close(compiled(inputs, delta_t=delta_t),
                                           m(inputs, delta_t=delta_t))
    finally:
        torch._dynamo.reset()


@pytest.mark.interpreter
@pytest.mark.parametrize("mode", ["", "triton"], ids=["unset", "triton"])
def test_mode_from_the_environment_traces_without_a_break(mode, monkeypatch, name="log"):
    """The seam reads ``MINGRU_SCAN`` and ``TRITON_INTERPRET`` while dynamo traces (no
    ``use_backend`` override here): those reads must trace, not break the graph."""
    m = _mixer(name)
    x, dt = _inputs(2)
    monkeypatch.setenv("MINGRU_SCAN", mode)
    graphs: list[str] = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    torch.compile(m, fullgraph=True, backend=recording_backend)(x, delta_t=dt).sum().backward()
    assert len(graphs) == 1, f"{len(graphs)} graphs: a graph break"
    if mode == "triton":
        assert CASES[name][2] in graphs[0]


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("name", list(CASES))
def test_mixer_reduce_overhead_captures_and_replays(name):
    """CUDA graphs over the whole compiled mixer (no skip), correct on three replays with
    new inputs each, against the uncompiled Triton path."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    m = _mixer(name)
    compiled = torch.compile(m, fullgraph=True, mode="reduce-overhead")
    with mingru.use_backend("triton"):
        for step in range(4):
            x, dt = _inputs(10 + step)
            want = _loss_and_grads(m, m, x, dt)
            torch.compiler.cudagraph_mark_step_begin()
            got = _loss_and_grads(m, compiled, x, dt)
            _assert_close(got, want, 1e-4)
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
