"""RotationMinGRU's fused cell (``mingru.cells.rotation_cell``: the Givens recurrence's kernels
with one round on 2×2 blocks, gated and in rotation mode: angles snapped, scale ``[1,
tanh(k_u)]`` and input ``σ(k_z) ⊙ k_h`` formed from the projection's columns in place, the
projection's whole gradient written in place) against the float64 loop of tests/reference.py
and the eager twin: outputs and the gradients of ``k``, ``h_0`` and ``log γ``, NaN-poisoned,
with and without snapping, forced short segments."""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

import mingru
from mingru._eager.rotation_cell import rotation_cell_eager
from mingru.cells import rotation_cell
from mingru_kernels._givens_inputs import _round_half_even
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
    # B, T, n blocks, h0, log_gamma, snap, forced segment length
    (2, 23, 3, True, True, True, None),
    (1, 63, 4, False, False, True, 8),
    (2, 1, 1, True, True, False, None),
    (1, 200, 5, True, False, False, None),
    (2, 40, 2, True, True, True, 7),
]


def _inputs(B, T, n, with_h0, with_gamma, with_snap, dtype=torch.float32):
    k = torch.randn(B, T, 6 * n, dtype=F64)
    k[..., :n] *= 3.0  # angles over a turn and more: many snapping steps
    h0 = torch.randn(B, 2 * n, dtype=F64) if with_h0 else None
    lg = torch.log(0.5 + 0.45 * torch.rand(B, T, n, dtype=F64)) if with_gamma else None
    snap = (torch.tensor([(2.0, 3.0, 4.0, 6.0)[j % 4] for j in range(n)], dtype=F64)
            if with_snap else None)
    if snap is not None:
        # At least 0.1 step away from a tie: a float32 quotient θ / (2π/K) rounds as the
        # float64 one does (at a tie the snapped angle jumps by a step, and so does h).
        unit = 2 * math.pi / snap
        steps = torch.round(k[..., :n] / unit)
        k[..., :n] = (steps + 0.8 * (torch.rand_like(steps) - 0.5)) * unit
        snap = snap.float()
    moved = tuple(None if x is None else x.to(DEVICE, dtype) for x in (k, h0, lg))
    return (*moved, None if snap is None else snap.to(DEVICE))


def _loop(k, h0, lg, snap):
    """The float64 oracle: snapped angles (straight-through), scale and gates by hand, then the
    sequential Givens loop."""
    B, T, W = k.shape
    n = W // 6
    theta = k[..., :n]
    if snap is not None:
        unit = 2 * math.pi / snap.double()
        theta = theta + (torch.round(theta / unit) * unit - theta).detach()
    s = torch.tanh(k[..., n: 2 * n])
    scale = torch.stack([torch.ones_like(s), s], dim=-1)
    b = (k[..., 4 * n:] / (1 + torch.exp(-k[..., 2 * n: 4 * n]))).reshape(B, T, n, 2)
    start = torch.zeros(B, n, 2, dtype=k.dtype, device=k.device) if h0 is None else (
        h0.reshape(B, n, 2))
    return loop_givens(theta[..., None, None], b, start, scale, lg).reshape(B, T, 2 * n)


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "n", "with_h0", "with_gamma", "with_snap", "seg"), CASES)
def test_rotation_cell_matches_loop_and_eager(B, T, n, with_h0, with_gamma, with_snap, seg):
    *ins, snap = _inputs(B, T, n, with_h0, with_gamma, with_snap)
    assert_cell_matches_loop_and_eager(
        lambda *xs: rotation_cell(*xs, snap_k=snap), lambda *xs: rotation_cell_eager(*xs, snap),
        lambda *xs: _loop(*xs, snap), ins, seg, (B, T, 2 * n))


@pytest.mark.interpreter
def test_rotation_mixer_runs_on_the_cell_and_matches_eager():
    """RotationMinGRU's forward takes the fused cell and agrees with its eager path, outputs,
    final state and every parameter gradient."""
    torch.manual_seed(5)
    m = mingru.RotationMinGRU(5, 8, decay="learnable").to(DEVICE)
    x = torch.randn(2, 17, 5, device=DEVICE)
    assert_mixer_triton_matches_eager(m, x, torch.rand(2, 17, device=DEVICE))


@pytest.mark.parametrize(("args", "match"), [
    (dict(k=torch.randn(2, 3, 20)), "k must be"),
    (dict(k=torch.randn(2, 0, 18)), "at least one time step"),
    (dict(initial_state=torch.randn(2, 7)), "initial_state must be"),
    (dict(log_gamma=torch.randn(2, 3, 4)), "log_gamma must be"),
    (dict(snap_k=torch.tensor([2.0, 3.0])), "snap_k must be"),
    (dict(snap_k=torch.tensor([2.0, 0.0, 3.0])), "snap_k must be positive"),
])
def test_rotation_cell_rejects_bad_inputs(args, match):
    call = dict(k=torch.randn(2, 3, 18), initial_state=None, log_gamma=None, snap_k=None) | args
    with pytest.raises(ValueError, match=match):
        rotation_cell(call.pop("k"), **call)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("T", [1, 63, 65536])
def test_rotation_cell_dtypes_on_the_gpu(dtype, T):
    """Compiled for the GPU: every dtype against the float64 eager cell on the same (rounded)
    inputs, B = 1, 12 blocks, decay, snapping: one segment (T = 1), and the composite and
    output passes over a few segments and over a long sequence."""
    *xs, snap = _inputs(1, T, 12, True, True, True, dtype)
    ins = leaves(*xs)
    ins64 = leaves(*(x.double() for x in ins))
    with mingru.use_backend("triton"):
        h = rotation_cell(*ins, snap_k=snap)
    w = torch.randn_like(h, dtype=torch.float32)
    grads = weighted_grads((h.float(),), (w,), ins)
    hr = rotation_cell_eager(*ins64, snap)
    grads_r = weighted_grads((hr,), (w.double(),), ins64)
    tol = 1e-4 if dtype == torch.float32 else 3e-2
    assert h.dtype == dtype and rel_err(h, hr) < tol
    for got, ref in zip(grads, grads_r, strict=True):
        assert got.dtype == dtype and rel_err(got, ref) < tol


@triton.jit
def _rounded(x_ptr, y_ptr, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y_ptr + i, _round_half_even(tl.load(x_ptr + i)))


@pytest.mark.interpreter
def test_snapping_rounds_half_to_even_like_torch():
    """The kernels' rounding (``_round_half_even``) is ``torch.round``'s at ties and between."""
    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, 2.6, -2.6, 0.0, 7.5, -7.49,
                      1e6 + 0.5, 3.0, -3.0, 0.49999997], device=DEVICE)
    y = torch.empty_like(x)
    _rounded[(1,)](x, y, N=16)
    assert torch.equal(y, torch.round(x))
