"""A decode step's GEMM (op ``linear``, inference only) against ``F.linear`` in float64, with
and without bias and GELU, with the reduction split over K and not; the custom op equal to
the direct call; where ``auto`` takes it (inside a ``StepFusion``, float32, 16 to 128 rows);
a captured step on it giving the plain step's logits. Through the interpreter on CPU,
compiled on the GPU in every dtype."""

from __future__ import annotations

import contextlib

import pytest
import torch

import mingru
from mingru._eager.linear import linear as linear_eager
from mingru._step_fusion import StepFusion
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE
from tests.torch._lm_cases import VOCAB, make_model


def _launcher():
    from mingru._launch import linear

    return linear


def _inputs(M: int, N: int, K: int, bias: bool, dtype=torch.float32, seed: int = 0):
    g = torch.Generator().manual_seed(seed + M * 31 + N * 7 + K)
    x = torch.randn(M, K, generator=g, dtype=torch.float64)
    w = torch.randn(N, K, generator=g, dtype=torch.float64) / K ** 0.5
    b = torch.randn(N, generator=g, dtype=torch.float64) if bias else None
    return [None if t is None else t.to(DEVICE, dtype) for t in (x, w, b)]


def _check(M, N, K, bias, gelu, dtype=torch.float32, tol=1e-6):
    x, w, b = _inputs(M, N, K, bias, dtype)
    want = linear_eager(x.double(), w.double(), None if b is None else b.double(), gelu=gelu)
    got = _launcher().run(x, w, b, gelu=gelu)
    assert got.dtype == dtype and got.shape == (M, N)
    assert rel_err(got, want) <= tol


# (M, N, K): one slice of K and masked edges; K split in 2 on the interpreter's 8 SMs, in 3; a
# batch-16 step's projection; one row.
SHAPES = [(5, 50, 37), (64, 96, 512), (16, 40, 300), (1, 33, 129)]


@pytest.mark.interpreter
@pytest.mark.parametrize("gelu", [False, True], ids=["plain", "gelu"])
@pytest.mark.parametrize("bias", [True, False], ids=["bias", "no-bias"])
@pytest.mark.parametrize(("M", "N", "K"), SHAPES, ids=["edges", "split", "b16", "one-row"])
def test_matches_float64(M, N, K, bias, gelu):
    _check(M, N, K, bias, gelu)


@pytest.mark.interpreter
def test_plans_split_the_reduction_where_the_grid_is_small():
    from mingru_kernels.launch import linear as meta

    launcher = _launcher()
    assert meta.config(64, 96, 512, n_sm=launcher.INTERPRETER_SMS)["SPLIT"] == 2
    assert meta.config(5, 50, 37, n_sm=launcher.INTERPRETER_SMS)["SPLIT"] == 1
    down = meta.config(64, 512, 2048, n_sm=132)  # an MLP's down projection at batch 64
    assert down["SPLIT"] * down["k_per_split"] >= 2048 and meta.grid(down, 64, 512) == (1, 16, 8)


@pytest.mark.interpreter
def test_custom_op_equals_the_direct_call_and_extra_dims_pass_through():
    x, w, b = _inputs(6, 20, 40, True)
    x3 = x.view(2, 3, 40)
    direct = _launcher().run(x3, w, b, gelu=True)
    assert direct.shape == (2, 3, 20)
    assert torch.equal(direct, torch.ops.mingru.linear_fwd(x3, w, b, True))
    result = torch.library.opcheck(torch.ops.mingru.linear_fwd.default, (x3, w, b, True),
                                   test_utils=("test_schema", "test_faketensor"))
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.interpreter
def test_auto_takes_it_only_in_a_captured_float32_step():
    launcher = _launcher()
    x, w, _ = _inputs(64, 8, 16, False)
    assert launcher.prefer_over_eager(x, w) is False
    with StepFusion():
        assert launcher.prefer_over_eager(x, w) is True
        assert launcher.prefer_over_eager(x[:1], w) is False  # a batch-1 step: cuBLAS's GEMV
        assert launcher.prefer_over_eager(x.to(torch.bfloat16), w) is False
        assert launcher.prefer_over_eager(torch.cat([x, x, x]), w) is False  # 192 rows
    assert launcher.unsupported_reason(x, w.double()) is not None


@pytest.mark.interpreter
@pytest.mark.parametrize("mixer", ["log", "delta"])
def test_a_captured_step_on_it_gives_the_plain_logits(mixer, monkeypatch):
    """Every GEMM of a step goes through it on the kernel path: each layer's projection and
    its MLP's two, and the head."""
    launcher = _launcher()
    calls = []
    fused = launcher._fwd_impl
    monkeypatch.setattr(launcher, "_fwd_impl", lambda *a, **k: calls.append(1) or fused(*a, **k))
    model = make_model(mixer, n_layers=2).to(DEVICE).eval()
    token = torch.randint(0, VOCAB, (16,), generator=torch.Generator().manual_seed(5)).to(DEVICE)
    state = model.init_state(16)
    with torch.no_grad():
        with mingru.use_backend("eager"):
            want, _ = model.step(token, state)
        with mingru.use_backend("triton"), StepFusion():
            got, _ = model.step(token, state)
    assert len(calls) == 2 * 3 + 1
    assert rel_err(got, want) <= 1e-5


@pytest.mark.interpreter
def test_split_launches_share_the_step_counters_and_leave_them_at_zero():
    """Inside a StepFusion the GEMMs count their slices in one buffer, so each must leave it
    at zero for the next: a counter left behind would make the next GEMM's tiles never sum."""
    from mingru_kernels.launch import linear as meta

    launcher = _launcher()
    shapes = [(64, 96, 512), (16, 40, 300), (64, 96, 512)]
    assert all(meta.config(*shape, n_sm=launcher.INTERPRETER_SMS)["SPLIT"] > 1
               for shape in shapes)
    fusion = StepFusion()
    with fusion:
        for M, N, K in shapes:
            x, w, b = _inputs(M, N, K, True)
            want = linear_eager(x.double(), w.double(), b.double(), gelu=False)
            assert rel_err(launcher.run(x, w, b, gelu=False), want) <= 1e-6
        (counters,) = fusion._counters.values()
        assert counters.numel() >= 1024 and not counters.any()
        assert fusion.counters(counters.device, 8) is counters
        larger = fusion.counters(counters.device, 4096)
        assert larger.numel() == 4096 and not larger.any() and larger is not counters
        assert fusion._outgrown == [counters]  # a graph captured on it may still read it


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("M", "N", "K"), [(64, 2048, 512), (64, 512, 2048), (16, 1024, 512),
                                           (100, 300, 37)])
def test_gpu_matches_float64(dtype, M, N, K):
    _check(M, N, K, True, True, dtype, tol=1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("shared", [False, True], ids=["own-counters", "step-counters"])
def test_gpu_split_sum_is_the_same_every_run(shared):
    """The last slice to arrive sums the slices in their order: a slice read before its
    program stored it would change the result between runs (or poison it), and a counter not
    set back to zero would leave the step's next GEMM unsummed."""
    x, w, b = _inputs(64, 512, 2048, True)
    launcher = _launcher()
    with StepFusion() if shared else contextlib.nullcontext():
        first = launcher.run(x, w, b, gelu=False)
        assert all(torch.equal(launcher.run(x, w, b, gelu=False), first) for _ in range(50))
