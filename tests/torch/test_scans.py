"""The four public scans (eager path) against the float64 loops of tests/reference.py."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mingru
from mingru import linear_scan, matrix_affine_scan, matrix_scan, parallel_scan_log
from tests.helpers import rel_err
from tests.reference import loop_affine, loop_linear, loop_log

F64 = torch.float64


# --- inputs --------------------------------------------------------------------------------

TS = [1, 2, 7, 63, 257]


def log_inputs(B, T, D, dtype=F64):
    log_a = -F.softplus(torch.randn(B, T, D, dtype=dtype) * 2)
    log_values = torch.randn(B, T + 1, D, dtype=dtype)
    return log_a, log_values


# --- forward vs oracle ------------------------------------------------------------------------


@pytest.mark.parametrize("T", TS)
def test_parallel_scan_log_matches_loop(T):
    log_a, log_values = log_inputs(2, T, 5)
    h = parallel_scan_log(log_a, log_values)
    torch.testing.assert_close(h, loop_log(log_a, log_values), rtol=1e-10, atol=1e-12)


def test_parallel_scan_log_zero_initial_state():
    log_a, log_values = log_inputs(2, 9, 3)
    log_values[:, 0] = float("-inf")
    h = parallel_scan_log(log_a, log_values)
    assert torch.isfinite(h).all()
    torch.testing.assert_close(h, loop_log(log_a, log_values), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("T", TS)
def test_linear_scan_matches_loop(T):
    a = torch.tanh(torch.randn(3, T, 4, dtype=F64) * 2)  # signed transitions
    b = torch.randn(3, T, 4, dtype=F64)
    P, Z = linear_scan(a, b)
    P_ref, Z_ref = loop_linear(a, b)
    torch.testing.assert_close(P, P_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(Z, Z_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("T", TS)
@pytest.mark.parametrize("k,v", [(1, 1), (2, 1), (4, 3)])
def test_matrix_affine_scan_matches_loop(T, k, v):
    A = torch.randn(2, T, 3, k, k, dtype=F64) / k**0.5
    Bm = torch.randn(2, T, 3, k, v, dtype=F64)
    P, Z = matrix_affine_scan(A, Bm)
    P_ref, Z_ref = loop_affine(A, Bm)
    torch.testing.assert_close(P, P_ref, rtol=1e-9, atol=1e-11)
    torch.testing.assert_close(Z, Z_ref, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("T", [1, 8, 63])
def test_matrix_scan_equals_affine_with_v1(T):
    M = torch.randn(2, T, 4, 2, 2, dtype=F64) * 0.7
    b = torch.randn(2, T, 4, 2, dtype=F64)
    P, Z = matrix_scan(M, b)
    P_ref, Z_ref = loop_affine(M, b.unsqueeze(-1))
    torch.testing.assert_close(P, P_ref, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(Z, Z_ref.squeeze(-1), rtol=1e-10, atol=1e-12)


# --- fp32 accuracy and dtype -------------------------------------------------------------------


@pytest.mark.parametrize("T", [63, 257])
def test_fp32_within_1e4_of_oracle(T):
    log_a, log_values = log_inputs(2, T, 6)
    h = parallel_scan_log(log_a.float(), log_values.float())
    assert h.dtype == torch.float32
    assert rel_err(h, loop_log(log_a, log_values)) < 1e-4

    a, b = torch.tanh(torch.randn(2, T, 6, dtype=F64)), torch.randn(2, T, 6, dtype=F64)
    P, Z = linear_scan(a.float(), b.float())
    P_ref, Z_ref = loop_linear(a, b)
    assert P.dtype == Z.dtype == torch.float32
    assert rel_err(Z, Z_ref) < 1e-4 and rel_err(P, P_ref) < 1e-4

    A = torch.linalg.qr(torch.randn(2, T, 3, 4, 4, dtype=F64))[0] * 0.95
    Bm = torch.randn(2, T, 3, 4, 1, dtype=F64)
    P, Z = matrix_affine_scan(A.float(), Bm.float())
    P_ref, Z_ref = loop_affine(A, Bm)
    assert rel_err(Z, Z_ref) < 1e-4 and rel_err(P, P_ref) < 1e-4


def test_log_scan_long_sequence_fp32_stays_accurate():
    """T = 20 000: the running product underflows fp32 long before the end."""
    log_a, log_values = log_inputs(1, 20_000, 4)
    h = parallel_scan_log(log_a.float(), log_values.float())
    assert torch.isfinite(h).all()
    assert log_a.sum(1).min() < -1000  # the products really do underflow
    assert rel_err(h, loop_log(log_a, log_values)) < 1e-4
    # Relative accuracy holds element-wise too, not just against the largest state.
    ref = loop_log(log_a, log_values)
    assert ((h.double() - ref).abs() / ref).max() < 1e-4


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_dtypes_are_preserved(dtype):
    log_a, log_values = log_inputs(2, 17, 3, dtype=torch.float32)
    assert parallel_scan_log(log_a.to(dtype), log_values.to(dtype)).dtype == dtype
    P, Z = linear_scan(torch.rand(2, 17, 3, dtype=dtype), torch.rand(2, 17, 3, dtype=dtype))
    assert P.dtype == Z.dtype == dtype


# --- gradients ------------------------------------------------------------------------------------


@pytest.mark.parametrize("T", [1, 6, 33])
def test_gradcheck_parallel_scan_log(T):
    log_a, log_values = log_inputs(2, T, 3)
    torch.autograd.gradcheck(parallel_scan_log, (log_a.requires_grad_(), log_values.requires_grad_()))


@pytest.mark.parametrize("T", [1, 6, 33])
def test_gradcheck_linear_scan(T):
    a = torch.tanh(torch.randn(2, T, 3, dtype=F64)).requires_grad_()
    b = torch.randn(2, T, 3, dtype=F64, requires_grad=True)
    torch.autograd.gradcheck(linear_scan, (a, b))
    # Each output alone too: the backward must handle an unused P or Z.
    torch.autograd.gradcheck(lambda a, b: linear_scan(a, b)[1], (a, b))
    torch.autograd.gradcheck(lambda a, b: linear_scan(a, b)[0], (a, b))


@pytest.mark.parametrize("T", [1, 5, 18])
def test_gradcheck_matrix_scans(T):
    A = (torch.randn(1, T, 2, 3, 3, dtype=F64) * 0.5).requires_grad_()
    Bm = torch.randn(1, T, 2, 3, 2, dtype=F64, requires_grad=True)
    torch.autograd.gradcheck(matrix_affine_scan, (A, Bm))
    torch.autograd.gradcheck(lambda A, B: matrix_affine_scan(A, B)[1], (A, Bm))
    M = (torch.randn(1, T, 2, 2, 2, dtype=F64) * 0.7).requires_grad_()
    b = torch.randn(1, T, 2, 2, dtype=F64, requires_grad=True)
    torch.autograd.gradcheck(matrix_scan, (M, b))


def test_log_scan_gradient_matches_autograd_through_loop():
    log_a, log_values = log_inputs(2, 40, 3)
    la1, lv1 = log_a.clone().requires_grad_(), log_values.clone().requires_grad_()
    la2, lv2 = log_a.clone().requires_grad_(), log_values.clone().requires_grad_()
    w = torch.randn(2, 40, 3, dtype=F64)
    (parallel_scan_log(la1, lv1) * w).sum().backward()
    (loop_log(la2, lv2) * w).sum().backward()
    torch.testing.assert_close(la1.grad, la2.grad)
    torch.testing.assert_close(lv1.grad, lv2.grad)


# --- bad input ------------------------------------------------------------------------------------


def test_bad_inputs_raise_clear_errors():
    x = torch.randn(2, 5, 3)
    with pytest.raises(ValueError, match=r"log_values must have shape \(B, T\+1, D\)"):
        parallel_scan_log(x, torch.randn(2, 5, 3))
    with pytest.raises(ValueError, match="log_coeffs must have shape"):
        parallel_scan_log(torch.randn(5, 3), torch.randn(6, 3))
    with pytest.raises(TypeError, match="log_coeffs must be a torch.Tensor"):
        parallel_scan_log(x.numpy(), torch.randn(2, 6, 3))
    with pytest.raises(TypeError, match="floating"):
        linear_scan(torch.ones(2, 5, 3, dtype=torch.int64), torch.ones(2, 5, 3, dtype=torch.int64))
    with pytest.raises(TypeError, match="dtype of a"):
        linear_scan(x, x.double())
    with pytest.raises(ValueError, match="b must have shape"):
        linear_scan(x, torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="at least one time step"):
        linear_scan(torch.randn(2, 0, 3), torch.randn(2, 0, 3))
    with pytest.raises(ValueError, match="square blocks"):
        matrix_affine_scan(torch.randn(1, 4, 2, 3, 2), torch.randn(1, 4, 2, 3, 1))
    with pytest.raises(ValueError, match="Bm must have shape"):
        matrix_affine_scan(torch.randn(1, 4, 2, 3, 3), torch.randn(1, 4, 2, 2, 1))
    with pytest.raises(ValueError, match=r"M must have shape \(B, T, n, 2, 2\)"):
        matrix_scan(torch.randn(1, 4, 2, 3, 3), torch.randn(1, 4, 2, 3))
    with pytest.raises(ValueError, match=r"b must have shape \(B, T, n, 2\)"):
        matrix_scan(torch.randn(1, 4, 2, 2, 2), torch.randn(1, 4, 3, 2))


def test_public_names():
    for name in ["parallel_scan_log", "linear_scan", "matrix_scan", "matrix_affine_scan", "available"]:
        assert callable(getattr(mingru, name))
    with pytest.raises(AttributeError):
        mingru.not_a_name  # noqa: B018
