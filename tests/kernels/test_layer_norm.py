"""The fused LayerNorm (op ``layer_norm``) against ``nn.LayerNorm`` in float64: outputs and the
gradients of the input, weight and bias; odd widths and row counts; the autocast output dtype;
the block on it equal to the block on PyTorch's norm; the custom ops' registration; a clear
error past the widest row. Its residual variant (``add_layer_norm``, a decode step's add and
norm in one launch) against the sum and norm in float64, and where the block takes it. Through the interpreter on CPU, compiled on the GPU in every dtype.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

import mingru
from mingru._eager.layer_norm import layer_norm as layer_norm_eager
from mingru.block import MinGRUBlock, add_layer_norm, layer_norm
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE

F64 = torch.float64


def _norm(D: int, weight: bool = True, bias: bool = True, seed: int = 0) -> nn.LayerNorm:
    torch.manual_seed(seed)
    norm = nn.LayerNorm(D, elementwise_affine=weight, bias=bias).to(DEVICE)
    with torch.no_grad():
        for p in norm.parameters():
            p.normal_()
    return norm


def _check(D: int, N: int, weight: bool, bias: bool, dtype=torch.float32, tol=2e-6) -> None:
    norm = _norm(D, weight, bias)
    norm64 = _norm(D, weight, bias).double()
    g = torch.Generator().manual_seed(N * 7 + D)
    x = (torch.randn(2, N, D, generator=g, dtype=F64) * 3 + 1.5).to(DEVICE)
    x = x.to(dtype).double()  # the inputs the kernel sees
    w = torch.randn(2, N, D, generator=g, dtype=F64).to(DEVICE)
    x64 = x.clone().requires_grad_()
    (norm64(x64) * w).sum().backward()
    leaf = x.to(dtype).requires_grad_()
    norm.to(dtype)
    with mingru.use_backend("triton"):
        y = layer_norm(norm, leaf)
        (y.double() * w).sum().backward()
    assert y.dtype == dtype and leaf.grad.dtype == dtype
    assert rel_err(y, norm64(x)) <= tol
    assert rel_err(leaf.grad, x64.grad) <= tol
    for (name, p), p64 in zip(norm.named_parameters(), norm64.parameters(), strict=True):
        assert p.grad.dtype == p.dtype, name
        assert rel_err(p.grad, p64.grad) <= tol, name


@pytest.mark.interpreter
@pytest.mark.parametrize(("D", "N", "weight", "bias"), [
    (500, 7, True, True), (16, 1, True, True), (64, 63, True, False), (37, 5, False, False),
    (3, 4, True, True),
], ids=["D500", "one-row", "no-bias", "no-affine", "D3"])
def test_matches_float64(D, N, weight, bias):
    _check(D, N, weight, bias)


@pytest.mark.interpreter
def test_many_groups_sum_in_several_steps(monkeypatch):
    """More partial rows than one step of the gradient sum takes (150 groups of 2 rows against
    steps of 64), in the parameters' own dtype."""
    from mingru._launch import layer_norm as launcher
    from mingru_kernels.launch import layer_norm as meta

    monkeypatch.setattr(launcher, "INTERPRETER_SMS", 20)
    groups, _ = meta.bwd_groups(300, 20)
    assert groups > 2 * meta.SUM_BLOCK_G and groups % meta.SUM_BLOCK_G
    _check(24, 150, True, True)


@pytest.mark.interpreter
def test_autocast_output_dtype_and_values():
    """Under autocast the norm comes out in the autocast dtype: the float32 norm, rounded."""
    norm = _norm(48)
    x = torch.randn(3, 9, 48, device=DEVICE) * 2
    kind = torch.device(DEVICE).type
    with torch.autocast(kind, dtype=torch.bfloat16), mingru.use_backend("triton"):
        y = layer_norm(norm, x)
    want = layer_norm_eager(x, norm.weight, norm.bias, norm.eps, torch.float32)
    assert y.dtype == torch.bfloat16
    assert rel_err(y, want) <= 2 ** -7  # one bf16 ulp (the interpreter's cast truncates)
    with mingru.use_backend("eager"):
        assert layer_norm(norm, x).dtype == torch.float32  # eager: the module itself


@pytest.mark.interpreter
@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "autocast-bf16"])
def test_block_on_the_fused_norm_matches_the_module_norm(autocast):
    torch.manual_seed(0)
    block = MinGRUBlock(12, mlp_expansion=2).to(DEVICE)
    x = torch.randn(2, 7, 12, device=DEVICE)
    kind = torch.device(DEVICE).type
    outs = {}
    for mode in ("eager", "triton"):
        for p in block.parameters():
            p.grad = None
        leaf = x.clone().requires_grad_()
        with mingru.use_backend(mode), torch.autocast(kind, dtype=torch.bfloat16,
                                                      enabled=autocast):
            out, state = block(leaf)
        out.float().square().sum().backward()
        outs[mode] = (out.float(), leaf.grad, [p.grad.float() for p in block.parameters()])
    tol = 2e-2 if autocast else 1e-5
    (y_e, dx_e, g_e), (y_t, dx_t, g_t) = outs["eager"], outs["triton"]
    assert rel_err(y_t, y_e) <= tol and rel_err(dx_t, dx_e) <= tol
    for a, b in zip(g_t, g_e, strict=True):
        assert rel_err(a, b) <= tol


@pytest.mark.interpreter
def test_custom_op_registration():
    from mingru._launch import layer_norm as launcher  # registers the custom ops

    norm = _norm(20)
    x = torch.randn(4, 20, device=DEVICE, requires_grad=True)
    result = torch.library.opcheck(
        torch.ops.mingru.layer_norm_fwd.default,
        (x, norm.weight, norm.bias, 1e-5, torch.float32),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                    "test_aot_dispatch_dynamic"),
    )
    assert set(result.values()) == {"SUCCESS"}, result
    # auto takes the fused norm from 2^24 elements (measured faster there), not below
    from mingru_kernels.launch import layer_norm as meta

    assert launcher.prefer_over_eager(x) is False
    from mingru._step_fusion import StepFusion

    with StepFusion():  # a captured decode step spends no host time per launch
        assert launcher.prefer_over_eager(x) is True
    assert launcher.prefer_over_eager(x.new_empty(()).expand(16384, 1024)) is True
    assert launcher.prefer_over_eager(x.new_empty(()).expand(8192, 1024)) is False
    assert meta.AUTO_MIN_ELEMENTS == 16384 * 1024


@pytest.mark.interpreter
def test_rows_wider_than_the_registers_name_the_limit():
    norm = nn.LayerNorm(16385).to(DEVICE)
    with mingru.use_backend("triton"), pytest.raises(RuntimeError, match="16385 features"):
        layer_norm(norm, torch.randn(1, 2, 16385, device=DEVICE))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("D", "N"), [(512, 16384), (1000, 333), (4096, 64)])
def test_gpu_matches_float64(dtype, D, N):
    _check(D, N, True, True, dtype, tol=2e-6 if dtype == torch.float32 else 2e-2)


@pytest.mark.interpreter
def test_block_compiles_fullgraph_with_pytorchs_norm():
    """Under torch.compile the block keeps ``nn.LayerNorm`` (inductor fuses it with its cast):
    one graph, no fused-norm op in it, the same output as the uncompiled Triton path."""
    torch.manual_seed(0)
    block = MinGRUBlock(12, mlp_expansion=2).to(DEVICE)
    x = torch.randn(2, 7, 12, device=DEVICE)
    graphs: list[str] = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    with mingru.use_backend("triton"):
        want, _ = block(x)
        got, _ = torch.compile(block, fullgraph=True, backend=recording_backend)(x)
    assert len(graphs) == 1 and "layer_norm_fwd" not in graphs[0]
    assert "mingru.mingru_cell_fwd" in graphs[0]
    assert rel_err(got, want) <= 1e-5


def _check_add(D: int, N: int, weight: bool, bias: bool, dtype=torch.float32,
               tol=2e-6) -> None:
    norm = _norm(D, weight, bias).to(dtype)
    g = torch.Generator().manual_seed(N * 5 + D)
    x, branch = ((torch.randn(3, N, D, generator=g) * 2 + 1).to(DEVICE, dtype) for _ in "xb")
    total64 = x.double() + branch.double()
    want = _norm(D, weight, bias).double()(total64.to(dtype).double())  # of the stored sum
    with mingru.use_backend("triton"), torch.no_grad():
        total, y = add_layer_norm(norm, x, branch)
    assert total.dtype == y.dtype == dtype
    assert torch.equal(total, x + branch)  # one rounding of the float32 sum, as PyTorch's add
    assert rel_err(y, want) <= tol


@pytest.mark.interpreter
@pytest.mark.parametrize(("D", "N", "weight", "bias"), [
    (500, 7, True, True), (16, 1, True, True), (64, 63, True, False), (37, 5, False, False),
], ids=["D500", "one-row", "no-bias", "no-affine"])
def test_add_variant_matches_float64(D, N, weight, bias):
    _check_add(D, N, weight, bias)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("D", "N"), [(512, 64), (1000, 3)])
def test_gpu_add_variant_matches_float64(dtype, D, N):
    _check_add(D, N, True, True, dtype, tol=2e-6 if dtype == torch.float32 else 2e-2)


@pytest.mark.interpreter
def test_add_variant_only_without_gradients(monkeypatch):
    """The fused add and norm has no backward: with a gradient to take, the add and the
    differentiable norm run instead (the same values), and so on PyTorch's own path."""
    from mingru._launch import layer_norm as launcher

    calls = []
    fused = launcher._add_fwd_impl
    monkeypatch.setattr(launcher, "_add_fwd_impl", lambda *a, **k: calls.append(1) or fused(*a, **k))
    norm = _norm(24)
    x, branch = torch.randn(2, 5, 24, device=DEVICE), torch.randn(2, 5, 24, device=DEVICE)
    with mingru.use_backend("triton"):
        with torch.no_grad():
            want_total, want = add_layer_norm(norm, x, branch)
        assert len(calls) == 1
        total, y = add_layer_norm(norm, x, branch)
        y.sum().backward()
    assert len(calls) == 1 and norm.weight.grad is not None
    assert torch.equal(total, want_total) and rel_err(y, want) <= 2e-6
    with mingru.use_backend("eager"), torch.no_grad():
        assert rel_err(add_layer_norm(norm, x, branch)[1], want) <= 2e-6
    assert len(calls) == 1
    result = torch.library.opcheck(torch.ops.mingru.add_layer_norm_fwd.default,
                                   (x, branch, norm.weight, norm.bias, 1e-5),
                                   test_utils=("test_schema", "test_faketensor"))
    assert set(result.values()) == {"SUCCESS"}, result
