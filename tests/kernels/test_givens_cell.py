"""GivensMinGRU's fused cell (``mingru.cells.givens_cell``: the Givens recurrence's kernels in
their gated form, reading the angles and gates as column views of one projection and writing
its whole gradient in place) against the float64 loop of tests/reference.py and the eager
twin: outputs and the gradients of ``k``, ``h_0`` and ``log γ``, NaN-poisoned, odd widths,
forced short segments (the composite pass reads the gated input term too)."""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru._eager.givens_cell import givens_cell_eager
from mingru.cells import givens_cell
from tests.helpers import rel_err
from tests.kernels.cases import (
    DEVICE,
    F64,
    assert_cell_matches_loop_and_eager,
    assert_mixer_triton_matches_eager,
    leaves,
    weighted_grads,
)
from tests.reference import loop_givens

CASES = [
    # B, T, D, block_size, rounds, h0, log_gamma, forced segment length
    (2, 23, 6, 2, 1, True, True, None),  # W = 15: odd rows
    (1, 63, 12, 4, 3, False, False, 8),
    (2, 1, 8, 8, 2, True, True, None),
    (1, 200, 16, 16, 2, True, True, None),
    (2, 40, 24, 8, 3, True, False, 7),
]


def _inputs(B, T, D, kb, R, with_h0, with_gamma, dtype=torch.float32):
    W = D * R // 2 + 2 * D
    k = torch.randn(B, T, W, dtype=F64)
    k[..., : D * R // 2] *= 2.0  # angles over several turns
    h0 = torch.randn(B, D, dtype=F64) if with_h0 else None
    lg = torch.log(0.5 + 0.45 * torch.rand(B, T, D // kb, dtype=F64)) if with_gamma else None
    return tuple(None if x is None else x.to(DEVICE, dtype) for x in (k, h0, lg))


def _loop(k, h0, lg, kb, R):
    """The float64 oracle: the gates by hand, then the sequential Givens loop."""
    B, T, W = k.shape
    D = 2 * W // (R + 4)
    n = D // kb
    theta = k[..., : D * R // 2].reshape(B, T, n, R, kb // 2)
    z, h_tilde = k[..., D * R // 2: D * R // 2 + D], k[..., D * R // 2 + D:]
    b = (h_tilde / (1 + torch.exp(-z))).reshape(B, T, n, kb)
    start = torch.zeros(B, n, kb, dtype=k.dtype, device=k.device) if h0 is None else (
        h0.reshape(B, n, kb))
    return loop_givens(theta, b, start, None, lg).reshape(B, T, D)


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "D", "kb", "R", "with_h0", "with_gamma", "seg"), CASES)
def test_givens_cell_matches_loop_and_eager(B, T, D, kb, R, with_h0, with_gamma, seg):
    assert_cell_matches_loop_and_eager(
        lambda *xs: givens_cell(*xs, block_size=kb, rounds=R),
        lambda *xs: givens_cell_eager(*xs, kb, R), lambda *xs: _loop(*xs, kb, R),
        _inputs(B, T, D, kb, R, with_h0, with_gamma), seg, (B, T, D))


@pytest.mark.interpreter
def test_givens_mixer_runs_on_the_cell_and_matches_eager():
    """GivensMinGRU's forward takes the fused cell (one projection, no per-gate tensor) and
    agrees with its eager path, outputs and every parameter gradient."""
    torch.manual_seed(3)
    m = mingru.GivensMinGRU(5, 12, block_size=4, rounds=3, decay="learnable").to(DEVICE)
    x = torch.randn(2, 17, 5, device=DEVICE)
    assert_mixer_triton_matches_eager(m, x, torch.rand(2, 17, device=DEVICE))


@pytest.mark.parametrize(("args", "match"), [
    (dict(k=torch.randn(2, 3, 41)), "k must be"),
    (dict(k=torch.randn(2, 0, 28)), "at least one time step"),
    (dict(rounds=0), "rounds must be"),
    (dict(block_size=5), "block_size must be"),
    (dict(initial_state=torch.randn(2, 7)), "initial_state must be"),
    (dict(log_gamma=torch.randn(2, 3, 4)), "log_gamma must be"),
])
def test_givens_cell_rejects_bad_inputs(args, match):
    call = dict(k=torch.randn(2, 3, 8 * 3 // 2 + 16), initial_state=None, log_gamma=None,
                block_size=4, rounds=3) | args
    with pytest.raises(ValueError, match=match):
        givens_cell(call.pop("k"), **call)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("T", [1, 63, 65536])
def test_givens_cell_dtypes_on_the_gpu(dtype, T):
    """Compiled for the GPU: every dtype against the float64 eager cell on the same (rounded)
    inputs, B = 1, D = 24 in blocks of 8, 3 rounds, decay: one segment (T = 1), and the
    composite and output passes over a few segments and over a long sequence."""
    ins = leaves(*_inputs(1, T, 24, 8, 3, True, True, dtype))
    ins64 = leaves(*(x.double() for x in ins))
    with mingru.use_backend("triton"):
        h = givens_cell(*ins, block_size=8, rounds=3)
    w = torch.randn_like(h, dtype=torch.float32)
    grads = weighted_grads((h.float(),), (w,), ins)
    hr = givens_cell_eager(*ins64, 8, 3)
    grads_r = weighted_grads((hr,), (w.double(),), ins64)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert h.dtype == dtype and rel_err(h, hr) < tol
    for got, ref in zip(grads, grads_r, strict=True):
        assert got.dtype == dtype and rel_err(got, ref) < tol


_OFFLINE_COMPILE = """
import inspect
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from mingru_kernels import givens_recurrence as kernels
from mingru_kernels.launch import givens_recurrence as meta

INTS = ("npair", "n", "T", "seg_len", "nseg", "th_row", "in_row", "dh_sb", "dh_st", "dh_sd")
F32 = ("m_ptr", "c_ptr", "g_ptr", "dg_ptr", "snap_ptr")
# (block size, rounds, mode): the Givens cell's plain and gated forms, the rotation cell's
FORMS = ((8, 3, "plain"), (8, 3, "gated"), (2, 1, "rotation"))
for fn in (kernels.givens_recurrence_fwd_kernel, kernels.givens_recurrence_bwd_kernel):
    names = list(inspect.signature(fn.fn).parameters)
    for dtype in ("fp32", "bf16"):
        for k, R, mode in FORMS:
            cfg = meta.givens_config(k, R)
            for composite in (False, True):
                consts = dict(K2=k // 2, R=R, RP=cfg["RP"], LP=cfg["LP"],
                              HAS_SCALE=mode != "gated", HAS_GAMMA=True, COMPOSITE=composite,
                              GATED=mode != "plain", ROTATION=mode == "rotation",
                              SNAP=mode == "rotation")
                sig = {n: "constexpr" if n in consts else "i32" if n in INTS
                       else "*fp32" if n in F32 else f"*{dtype}" for n in names}
                src = ASTSource(fn, signature=sig, constexprs=consts)
                triton.compile(src, target=GPUTarget("cuda", 90, 32),
                               options={"num_warps": cfg["num_warps"]})
print("OK")
"""


def test_givens_kernels_compile_for_sm90_in_both_forms():
    """Without a GPU: the forward and backward kernels, plain, gated and in rotation mode
    (the rotation cell's), walk and composite passes, in float32 and bfloat16, compile for an
    H100/H200 (sm_90): what the interpreter, looser than the GPU compiler, cannot show. On a
    GPU the tests compile and run those kernels there (the plain form in
    test_givens_recurrence.py, gated here, rotation in test_rotation_cell.py; every dtype, one
    segment and several), so this check is left to machines without one."""
    from tests.helpers import run_offline_gpu_compile

    if DEVICE == "cuda":
        pytest.skip("a GPU compiles these kernels natively in the gpu tests")

    assert run_offline_gpu_compile(_OFFLINE_COMPILE).strip().endswith("OK")
