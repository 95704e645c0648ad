"""The interpreter's out-of-bounds check (``tests/bounds.py``, on for every interpreter test)
catches what it should and nothing else: a load past a buffer, an atomic past one, addresses
that are masked off, and the delta rule's fused one-launch backward at the micro-chunk of 64
whose GPU run died with an illegal memory access (bf16, nh2 with decay, d = 16)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from mingru_kernels._seam import interpreter_mode
from tests.bounds import bounds_checked
from tests.kernels.test_delta_rule import kernel_fwd_bwd, make_inputs

pytestmark = pytest.mark.skipif(not interpreter_mode(), reason="checks Triton's interpreter")


def _kernels():
    import triton
    import triton.language as tl

    @triton.jit
    def shifted_copy(x_ptr, y_ptr, shift, MASKED: tl.constexpr):
        i = tl.arange(0, 16)
        if MASKED:
            val = tl.load(x_ptr + i + shift, mask=i + shift < 16, other=0.0)
        else:
            val = tl.load(x_ptr + i + shift)
        tl.store(y_ptr + i, val)

    @triton.jit
    def shifted_add(y_ptr, shift):
        i = tl.arange(0, 16)
        tl.atomic_add(y_ptr + i + shift, 1.0)

    return shifted_copy, shifted_add


def test_in_bounds_and_masked_off_accesses_pass():
    shifted_copy, shifted_add = _kernels()
    x, y = torch.randn(16), torch.empty(16)
    with bounds_checked() as report:
        shifted_copy[(1,)](x, y, 0, MASKED=False)
        shifted_copy[(1,)](x, y, 5, MASKED=True)  # addresses past x, all masked off
        shifted_add[(1,)](y, 0)
    assert report.checks >= 5 and not report.violations
    np.testing.assert_array_equal(y[:11].numpy(), x[5:].numpy() + 1)


@pytest.mark.parametrize("which", ["load", "atomic"])
def test_an_access_past_the_buffer_fails_naming_the_kernel(which):
    shifted_copy, shifted_add = _kernels()
    x, y = torch.randn(16), torch.zeros(16)
    # Triton's interpreter re-raises what a kernel raised as an InterpreterError.
    with pytest.raises(Exception, match=f"shifted_(copy|add): 3 {which}"):
        with bounds_checked():
            if which == "load":
                shifted_copy[(1,)](x, y, 3, MASKED=False)
            else:
                shifted_add[(1,)](y, 3)
    assert torch.equal(y, torch.zeros(16))  # raised before the access


def test_delta_rule_few_rows_fused_backward_stays_in_bounds():
    """The 16-bit few-rows plan (16-bit ``Wk``/``U`` and WY inverse, the output pass, the
    one-launch backward): every address in bounds. Its bf16 arithmetic is not checked here
    (the interpreter's is not bf16's), only its addressing."""
    layout = dict(micro_chunk=32, half=True, few_rows=True)
    args = make_inputs(1, 300, 2, 2, 16, 16, True, True, False, seed=7)
    wo, wh = torch.randn(1, 300, 2, 16, dtype=torch.float64), torch.randn(1, 2, 16, 16,
                                                                           dtype=torch.float64)
    with bounds_checked() as report, np.errstate(all="ignore"):
        kernel_fwd_bwd(args, torch.bfloat16, wo, wh, layout)
    assert report.checks > 0 and not report.violations
