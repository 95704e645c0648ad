"""``mingru.linear_recurrence`` on the eager path: against the float64 loop of
tests/reference.py, float64 gradcheck in all three inputs, chaining through the final state
(outputs and gradients), and bad input."""

from __future__ import annotations

import pytest
import torch

import mingru
from tests.helpers import rel_err
from tests.reference import loop_recurrence

F64 = torch.float64


@pytest.mark.parametrize("shape", [(1, 1, 3), (2, 63, 5), (1, 40, 500)])
def test_matches_the_float64_loop(shape):
    B, T, D = shape
    a, b, h0 = torch.tanh(torch.randn(B, T, D)), torch.randn(B, T, D), torch.randn(B, D)
    with mingru.use_backend("eager"):
        h, h_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
        h_zero = mingru.linear_recurrence(a, b)
    ho, hTo = loop_recurrence(a.to(F64), b.to(F64), h0.to(F64))
    assert h.dtype == torch.float32 and rel_err(h, ho) < 1e-6 and rel_err(h_T, hTo) < 1e-6
    assert rel_err(h_zero, loop_recurrence(a.to(F64), b.to(F64))[0]) < 1e-6


def test_gradcheck_float64():
    a = torch.tanh(torch.randn(2, 7, 3, dtype=F64)).requires_grad_()
    b = torch.randn(2, 7, 3, dtype=F64, requires_grad=True)
    h0 = torch.randn(2, 3, dtype=F64, requires_grad=True)

    def fn(a, b, h0):
        h, h_T = mingru.linear_recurrence(a, b, h0, return_final_state=True)
        return h, h_T

    assert torch.autograd.gradcheck(fn, (a, b, h0))


def test_chaining_equals_one_call_in_outputs_and_gradients():
    a, b, h0 = torch.tanh(torch.randn(2, 30, 4)), torch.randn(2, 30, 4), torch.randn(2, 4)
    w = torch.randn(2, 30, 4)

    def grads(split):
        leaves = [x.clone().requires_grad_() for x in (a, b, h0)]
        if split:
            h1, mid = mingru.linear_recurrence(leaves[0][:, :13], leaves[1][:, :13], leaves[2],
                                               return_final_state=True)
            h2 = mingru.linear_recurrence(leaves[0][:, 13:], leaves[1][:, 13:], mid)
            h = torch.cat([h1, h2], 1)
        else:
            h = mingru.linear_recurrence(*leaves)
        (h * w).sum().backward()
        return [h.detach()] + [x.grad for x in leaves]

    for got, want in zip(grads(True), grads(False), strict=True):
        assert rel_err(got, want) < 1e-6


def test_bad_input_names_the_argument():
    a = torch.ones(2, 5, 3)
    with pytest.raises(ValueError, match="initial_state"):
        mingru.linear_recurrence(a, a, initial_state=torch.ones(2, 4))
    with pytest.raises(ValueError, match="b must have shape"):
        mingru.linear_recurrence(a, torch.ones(2, 5, 4))
    with pytest.raises(TypeError, match="initial_state"):
        mingru.linear_recurrence(a, a, initial_state=torch.ones(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="at least one time step"):
        mingru.linear_recurrence(torch.ones(2, 0, 3), torch.ones(2, 0, 3))
