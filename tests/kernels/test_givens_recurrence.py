"""Triton kernels of the fused rotation/Givens recurrence (``mingru.scans._givens_recurrence``;
what it shares with ``matrix_affine_scan`` is tested in test_matrix_affine_scan.py).

On CPU the kernels run through Triton's interpreter; on a CUDA machine the same
``interpreter`` tests run on the GPU. Every case compares forward AND backward with the eager
op and with the float64 loop of tests/reference.py, NaN-poisoned (tests/kernels/conftest.py),
with short forced segments. The ``gpu`` class adds dtypes, long sequences and the
GivensMinGRU peak-memory budget.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru._eager.givens_recurrence import givens_recurrence_eager
from mingru.scans import _givens_recurrence
from tests.helpers import rel_err
from tests.kernels.cases import (
    assert_cell_matches_loop_and_eager,
    givens_inputs,
    leaves,
    segments,
    weighted_grads,
)
from tests.reference import loop_givens

GIVENS_CASES = [
    # B, T, n, k, rounds, scale, log_gamma, forced segment length
    (2, 23, 3, 2, 1, True, True, None),  # the RotationMinGRU shape
    (2, 5, 1, 4, 2, False, False, 2),
    (1, 11, 3, 8, 3, True, False, 4),
    (2, 5, 3, 8, 3, False, True, None),
    (2, 1, 3, 4, 3, True, True, None),
    (1, 23, 1, 2, 2, False, True, 5),
    (1, 7, 2, 4, 1, True, False, 3),
    (1, 40, 1, 8, 2, True, True, None),  # default plan with segments
]


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "n", "k", "R", "with_scale", "with_gamma", "seg"), GIVENS_CASES)
def test_givens_matches_eager_and_loop(B, T, n, k, R, with_scale, with_gamma, seg):
    assert_cell_matches_loop_and_eager(
        _givens_recurrence, givens_recurrence_eager, loop_givens,
        givens_inputs(B, T, n, k, R, with_scale, with_gamma), seg, (B, T, n, k))


@pytest.mark.interpreter
@pytest.mark.parametrize("seg", [None, 4])
def test_output_gradient_is_read_through_its_strides(seg):
    """``dh`` arriving expanded (a sum's gradient, stride 0) or strided (every other channel of
    a wider tensor) gives bit for bit the gradients of its contiguous copy: the backward reads
    it through its strides instead of copying it."""
    B, T, n, k = 2, 13, 3, 4
    ins = givens_inputs(B, T, n, k, 2, True, True)
    wide = torch.randn(B, T, n, 2 * k, device=ins[0].device)
    cotangents = {"expanded": torch.full((), 0.7, device=wide.device).expand(B, T, n, k),
                  "strided": wide[..., ::2]}

    def input_grads(cot):
        xs = leaves(*ins)
        with segments(seg), mingru.use_backend("triton"):
            h = _givens_recurrence(*xs)
        return torch.autograd.grad(h, [x for x in xs if x is not None], cot)

    for name, cot in cotangents.items():
        assert not cot.is_contiguous(), name
        for got, want in zip(input_grads(cot), input_grads(cot.contiguous()), strict=True):
            assert torch.equal(got, want), name


# --- GPU: dtypes, long sequences, memory ------------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    @pytest.mark.parametrize("T", [1, 63, 1000, 65536])
    @pytest.mark.parametrize(("k", "R"), [(2, 1), (8, 3), (16, 2)])
    def test_givens_fp32_long(self, T, k, R):
        # decay keeps the state bounded, so fp32 rounding cannot grow with T
        ins = givens_inputs(1, T, 3, k, R, True, True)
        with mingru.use_backend("triton"):
            h = _givens_recurrence(*ins)
        ref = givens_recurrence_eager(*(None if x is None else x.double() for x in ins))
        assert rel_err(h, ref) < 1e-5

    @pytest.mark.parametrize("T", [63, 1000])
    @pytest.mark.parametrize(("with_scale", "with_gamma"), [(False, False), (True, True)])
    def test_givens_fp32_grads(self, T, with_scale, with_gamma):
        ins = leaves(*givens_inputs(3, T, 5, 8, 3, with_scale, with_gamma))
        used = [x for x in ins if x is not None]
        with mingru.use_backend("triton"):
            h = _givens_recurrence(*ins)
        w = torch.randn_like(h)
        grads = weighted_grads((h,), (w,), used)
        ins64 = leaves(*(None if x is None else x.double() for x in ins))
        refs = weighted_grads((givens_recurrence_eager(*ins64),), (w.double(),),
                              [x for x in ins64 if x is not None])
        # A pure rotation (no decay) preserves norms, so fp32 rounding random-walks with T
        # (~sqrt(T)·eps: 1.4e-5 measured at T=1000 on an H200); a decaying state forgets it.
        tol = 1e-5 if with_gamma else 3e-5
        assert rel_err(h, givens_recurrence_eager(*ins64)) < tol
        for g, r in zip(grads, refs, strict=True):
            assert rel_err(g, r) < tol

    @pytest.mark.parametrize(("dtype", "tol"), [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
    def test_givens_half_dtypes(self, dtype, tol):
        ins = leaves(*givens_inputs(2, 300, 4, 8, 3, True, True, dtype=dtype))
        with mingru.use_backend("triton"):
            h = _givens_recurrence(*ins)
        assert h.dtype == dtype
        w = torch.randn_like(h)
        grads = weighted_grads((h,), (w,), ins)
        ins64 = leaves(*(x.double() for x in ins))
        hr = givens_recurrence_eager(*ins64)
        refs = weighted_grads((hr,), (w.double(),), ins64)
        assert rel_err(h, hr) < tol
        for g, r in zip(grads, refs, strict=True):
            assert g.dtype == dtype and rel_err(g, r) < 2 * tol

    def test_givens_mixer_peak_memory(self):
        """GivensMinGRU(64, 64, block_size=8, rounds=3) fwd+bwd at B=128, T=64 stays ≤ 38 MiB
        (the eager path materializes per-token 8×8 matrices and needs ~10× that)."""
        GivensMinGRU = getattr(mingru, "GivensMinGRU", None)
        if GivensMinGRU is None:
            pytest.skip("GivensMinGRU not available")
        model = GivensMinGRU(64, 64, block_size=8, rounds=3).cuda()
        x = torch.randn(128, 64, 64, device="cuda")
        with mingru.use_backend("triton"):
            model(x).sum().backward()  # compile the kernels outside the measurement
            model.zero_grad(set_to_none=True)
            torch.cuda.synchronize()
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
            # What fwd+bwd itself allocates: tensors left by earlier tests in this process
            # (and the model and x) are the baseline, not part of the op's footprint.
            base = torch.cuda.memory_allocated()
            model(x).sum().backward()
            torch.cuda.synchronize()
        peak = torch.cuda.max_memory_allocated() - base
        assert peak <= 38 * 2**20, f"peak {peak / 2**20:.1f} MiB"
