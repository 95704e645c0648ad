"""Special functions for the scan kernels, as single hardware instructions on NVIDIA GPUs.

Triton lowers ``tl.exp2`` / ``tl.exp`` to ``ex2.approx.f32`` and ``x / y`` to
``div.full.f32``: both keep denormal results, which costs a range test and two rescaling
multiplies around each ``MUFU`` instruction (five instructions instead of one). The gate math
of the fused cells and the log-space scan is most of their instructions (an exponential and a
reciprocal per gate and element), so these helpers use the flush-to-zero forms,
``ex2.approx.ftz.f32``, ``rcp.approx.ftz.f32`` and ``lg2.approx.ftz.f32``: the same
approximation (≤ 2 ulp), with results below ``2⁻¹²⁶ ≈ 1.2e-38`` flushed to zero — far below
the fp32 rounding of any state they enter, since every use adds them to or multiplies them
with terms of order one or is itself below that size.

Triton's CPU interpreter cannot run inline PTX, so there (``TRITON_INTERPRET=1`` when this
module is imported) the same names are the plain ``tl`` operations.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels import _constants as constants
from mingru_kernels._seam import interpreter_mode

__all__ = ["INTERPRETING", "fast_exp", "fast_exp2", "fast_log2", "fast_rcp"]

INTERPRETING = interpreter_mode()
"""Whether the kernels were imported for Triton's interpreter (no inline PTX there)."""

if INTERPRETING:

    @triton.jit
    def fast_exp2(x):
        """``2^x`` (fp32)."""
        return tl.exp2(x)

    @triton.jit
    def fast_log2(x):
        """``log₂ x`` (fp32)."""
        return tl.log2(x)

    @triton.jit
    def fast_rcp(x):
        """``1 / x`` (fp32)."""
        return 1.0 / x

else:

    @triton.jit
    def _ptx_f32(x, instruction: tl.constexpr):
        """One PTX instruction ``instruction $0, $1;`` on fp32 ``x``, elementwise."""
        return tl.inline_asm_elementwise(instruction + " $0, $1;", "=f,f", [x],
                                         dtype=tl.float32, is_pure=True, pack=1)

    @triton.jit
    def fast_exp2(x):
        """``2^x`` (fp32): one ``MUFU.EX2``."""
        return _ptx_f32(x, "ex2.approx.ftz.f32")

    @triton.jit
    def fast_log2(x):
        """``log₂ x`` (fp32): one ``MUFU.LG2``."""
        return _ptx_f32(x, "lg2.approx.ftz.f32")

    @triton.jit
    def fast_rcp(x):
        """``1 / x`` (fp32): one ``MUFU.RCP``."""
        return _ptx_f32(x, "rcp.approx.ftz.f32")


@triton.jit
def fast_exp(x):
    """``e^x`` (fp32): one multiply and one ``MUFU.EX2``."""
    return fast_exp2(x * constants.LOG2E)
