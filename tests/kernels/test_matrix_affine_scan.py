"""Triton kernels of ``matrix_affine_scan`` (and ``matrix_scan``, its k=2, v=1 case), and what
it shares with the fused rotation/Givens recurrence: the segment plan
(:func:`mingru_kernels.launch.matrix_affine_scan.segment_plan`), the dispatch contract and
``torch.compile`` tracing of both ops (the Givens kernels are in test_givens_recurrence.py).

On CPU the kernels run through Triton's interpreter; on a CUDA machine the same
``interpreter`` tests run on the GPU. Every case compares forward AND backward with the eager
op and with the float64 loop of tests/reference.py, with outputs and scratch NaN-poisoned
before the kernels run (tests/kernels/conftest.py), and forces short segments
(``switches.forced(op, seg_len=...)``) so the composite + carry path runs on tiny ``T``. The
``gpu`` class adds dtypes, long sequences and grads at longer ``T``.
"""

from __future__ import annotations

import math

import pytest
import torch

import mingru
from mingru._eager.matrix_affine_scan import matrix_affine_scan_eager
from mingru.scans import _givens_recurrence
from tests.helpers import rel_err
from tests.kernels.cases import (
    DEVICE,
    affine_inputs,
    givens_inputs,
    leaves,
    segments,
    weighted_grads,
)
from tests.reference import loop_affine

AFFINE_CASES = [
    # B, T, n, k, v, forced segment length (None: the launch plan's own)
    (2, 1, 3, 1, 1, None),
    (2, 23, 3, 1, 1, 4),
    (1, 40, 2, 2, 1, None),  # T > SINGLE_PASS_MAX_T: the default plan uses segments
    (2, 5, 3, 2, 1, 2),
    (2, 23, 1, 4, 2, 5),
    (2, 5, 3, 2, 8, 2),  # v > k
    (1, 5, 3, 8, 1, 2),
    (2, 23, 1, 8, 1, None),
    (1, 5, 1, 16, 1, 2),
    (1, 1, 3, 16, 1, None),
]


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "T", "n", "k", "v", "seg"), AFFINE_CASES)
def test_affine_matches_eager_and_loop(B, T, n, k, v, seg):
    A, Bm = leaves(*affine_inputs(B, T, n, k, v))
    with segments(seg), mingru.use_backend("triton"):
        P, Z = mingru.matrix_affine_scan(A, Bm)
        assert P.dtype == A.dtype and Z.dtype == Bm.dtype
        wP, wZ = torch.randn_like(P), torch.randn_like(Z)
        dA, dB = weighted_grads((P, Z), (wP, wZ), (A, Bm))

    Pe, Ze = matrix_affine_scan_eager(A, Bm)
    dAe, dBe = weighted_grads((Pe, Ze), (wP, wZ), (A, Bm))
    A64, B64 = leaves(A.double(), Bm.double())
    Pr, Zr = loop_affine(A64, B64)
    dAr, dBr = weighted_grads((Pr, Zr), (wP.double(), wZ.double()), (A64, B64))
    for got, eager, ref in ((P, Pe, Pr), (Z, Ze, Zr), (dA, dAe, dAr), (dB, dBe, dBr)):
        assert rel_err(got, ref) < 1e-5
        assert rel_err(got, eager) < 1e-5


@pytest.mark.interpreter
@pytest.mark.parametrize("use", ["Z", "P"])
def test_affine_one_output_used(use):
    """Autograd hands the backward ``None`` for the unused output; both cases stay exact."""
    A, Bm = leaves(*affine_inputs(2, 7, 3, 4, 1))
    with segments(3), mingru.use_backend("triton"):
        P, Z = mingru.matrix_affine_scan(A, Bm)
        out = Z if use == "Z" else P
        w = torch.randn_like(out)
        grads = torch.autograd.grad((out * w).sum(), (A, Bm), allow_unused=True)
    A64, B64 = leaves(A.double(), Bm.double())
    Pr, Zr = loop_affine(A64, B64)
    ref_out = Zr if use == "Z" else Pr
    refs = torch.autograd.grad((ref_out * w.double()).sum(), (A64, B64), allow_unused=True)
    assert rel_err(out, ref_out) < 1e-5
    assert rel_err(grads[0], refs[0]) < 1e-5
    if use == "Z":
        assert rel_err(grads[1], refs[1]) < 1e-5
    else:  # P does not depend on Bm
        assert grads[1] is None or torch.count_nonzero(grads[1]) == 0


@pytest.mark.interpreter
def test_matrix_scan_and_noncontiguous():
    """``matrix_scan`` (k=2, v=1) goes through the same kernel; strided inputs are fine."""
    M_big, b_big = leaves(*affine_inputs(3, 6, 4, 2, 2))
    M, b = M_big[::2, :, 1:].transpose(-1, -2), b_big[::2, :, 1:, :, 0]  # strided views
    assert not M.is_contiguous() and not b.is_contiguous()
    with segments(2), mingru.use_backend("triton"):
        P, Z = mingru.matrix_scan(M, b)
        wP, wZ = torch.randn_like(P), torch.randn_like(Z)
        dM, db = weighted_grads((P, Z), (wP, wZ), (M, b))
    M64, b64 = leaves(M.double(), b.double())
    Pr, Zr = loop_affine(M64, b64.unsqueeze(-1))
    dMr, dbr = weighted_grads((Pr, Zr.squeeze(-1)), (wP.double(), wZ.double()), (M64, b64))
    for got, ref in ((P, Pr), (Z, Zr.squeeze(-1)), (dM, dMr), (db, dbr)):
        assert rel_err(got, ref) < 1e-5


# --- dispatch contract, segment plan and compile (both block scans) -------------------------


def test_unsupported_reasons():
    from mingru._launch import givens_recurrence as lg
    from mingru._launch import matrix_affine_scan as la

    A, Bm = affine_inputs(1, 2, 1, 2, 1)
    assert la.unsupported_reason(A, Bm) is None and la.prefer_over_eager(A, Bm)
    assert "k=3" in la.unsupported_reason(torch.zeros(1, 2, 1, 3, 3, device=DEVICE), Bm)
    assert "v=3" in la.unsupported_reason(A, torch.zeros(1, 2, 1, 2, 3, device=DEVICE))
    assert "float64" in la.unsupported_reason(A.double(), Bm.double())
    ins = givens_inputs(1, 2, 1, 4, 2, False, False)
    assert lg.unsupported_reason(*ins) is None and lg.prefer_over_eager(*ins)
    bad = givens_inputs(1, 2, 1, 6, 1, False, False)
    assert "k=6" in lg.unsupported_reason(*bad)
    assert "float64" in lg.unsupported_reason(*(None if x is None else x.double() for x in ins))


@pytest.mark.interpreter
def test_triton_mode_refuses_unsupported_block_size():
    A = torch.randn(1, 3, 2, 3, 3, device=DEVICE)
    Bm = torch.randn(1, 3, 2, 3, 1, device=DEVICE)
    with mingru.use_backend("triton"), pytest.raises(RuntimeError, match="k=3"):
        mingru.matrix_affine_scan(A, Bm)


def test_segment_plan_covers_t_with_a_short_chain():
    from mingru_kernels.launch.matrix_affine_scan import SINGLE_PASS_MAX_T, segment_plan

    for T in (1, 2, 31, 32, 33, 64, 1000, 1024, 65536, 100_003):
        seg_len, nseg = segment_plan(T)
        assert seg_len * nseg >= T > seg_len * (nseg - 1)
        assert (nseg == 1) == (T <= SINGLE_PASS_MAX_T)
        chain = T if nseg == 1 else 2 * seg_len + nseg  # dependent steps of the two walks
        assert chain <= 3 * math.isqrt(2 * T) + 8 or nseg == 1
    assert segment_plan(23, 4) == (4, 6) and segment_plan(3, 8) == (3, 1)
    with pytest.raises(ValueError, match="T"):
        segment_plan(0)


@pytest.mark.interpreter
def test_compile_fullgraph_traces_both_ops():
    """The custom ops, their fakes and their autograd registrations trace without breaks."""
    A, Bm = leaves(*affine_inputs(1, 5, 2, 2, 1))
    ins = leaves(*givens_inputs(1, 5, 2, 4, 2, True, True))

    def f(A, Bm, theta, b, h0, scale, log_gamma):
        with mingru.use_backend("triton"):
            P, Z = mingru.matrix_affine_scan(A, Bm)
            h = _givens_recurrence(theta, b, h0, scale, log_gamma)
        return P.sum() + Z.square().sum() + h.square().sum()

    with segments(2):
        f(A, Bm, *ins)  # warm: launcher modules are imported outside the traced region
        ref = torch.autograd.grad(f(A, Bm, *ins), [A, Bm, *ins])
        backend = "inductor" if DEVICE == "cuda" else "aot_eager"
        compiled = torch.compile(f, fullgraph=True, backend=backend)
        got = torch.autograd.grad(compiled(A, Bm, *ins), [A, Bm, *ins])
    for g, r in zip(got, ref, strict=True):
        assert rel_err(g, r) < 1e-6


# --- GPU: dtypes, long sequences, Inductor ----------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    @pytest.mark.parametrize("T", [1, 63, 1000, 65536])
    @pytest.mark.parametrize(("k", "v"), [(2, 1), (8, 1), (16, 1), (4, 4)])
    def test_affine_fp32_long(self, T, k, v):
        A, Bm = affine_inputs(1, T, 3, k, v, contraction=0.7)
        with mingru.use_backend("triton"):
            P, Z = mingru.matrix_affine_scan(A, Bm)
        Pr, Zr = matrix_affine_scan_eager(A.double(), Bm.double())
        assert rel_err(P, Pr) < 1e-5 and rel_err(Z, Zr) < 1e-5

    @pytest.mark.parametrize("T", [63, 1000])
    @pytest.mark.parametrize(("k", "v"), [(2, 1), (8, 1), (16, 2)])
    def test_affine_fp32_grads(self, T, k, v):
        A, Bm = leaves(*affine_inputs(3, T, 5, k, v, contraction=0.7))
        with mingru.use_backend("triton"):
            P, Z = mingru.matrix_affine_scan(A, Bm)
        wP, wZ = torch.randn_like(P), torch.randn_like(Z)
        grads = weighted_grads((P, Z), (wP, wZ), (A, Bm))
        A64, B64 = leaves(A.double(), Bm.double())
        refs = weighted_grads(matrix_affine_scan_eager(A64, B64), (wP.double(), wZ.double()),
                              (A64, B64))
        for g, r in zip(grads, refs, strict=True):
            assert rel_err(g, r) < 1e-5

    @pytest.mark.parametrize(("dtype", "tol"), [(torch.bfloat16, 2e-2), (torch.float16, 4e-3)])
    def test_affine_half_dtypes(self, dtype, tol):
        A, Bm = leaves(*affine_inputs(2, 300, 4, 8, 1, dtype=dtype, contraction=0.7))
        with mingru.use_backend("triton"):
            P, Z = mingru.matrix_affine_scan(A, Bm)
        assert P.dtype == dtype and Z.dtype == dtype
        wP, wZ = torch.randn_like(P), torch.randn_like(Z)
        grads = weighted_grads((P, Z), (wP, wZ), (A, Bm))
        A64, B64 = leaves(A.double(), Bm.double())
        Pr, Zr = matrix_affine_scan_eager(A64, B64)
        refs = weighted_grads((Pr, Zr), (wP.double(), wZ.double()), (A64, B64))
        assert rel_err(P, Pr) < tol and rel_err(Z, Zr) < tol
        for g, r in zip(grads, refs, strict=True):
            assert g.dtype == dtype and rel_err(g, r) < 2 * tol
