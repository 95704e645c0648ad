"""``kernels/_fast_math.py``: compiled for the GPU, the cells' gate math and the log scan's
powers are single flush-to-zero ``MUFU`` instructions (no denormal-preserving ``ex2.approx.f32``
or ``div.full.f32`` sequences); under the interpreter the same names are the plain ``tl`` ops.

The compile check runs offline for sm_90 in a subprocess without ``TRITON_INTERPRET`` (Triton's
CUDA backend makes PTX without a GPU), so it runs in CI too.
"""

from __future__ import annotations

import textwrap

from tests.helpers import run_offline_gpu_compile

_PTX_CHECK = textwrap.dedent(
    """
    import inspect, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mingru_kernels import _fast_math, mingru_cell, parallel_scan_log

    assert not _fast_math.INTERPRETING

    def ptx(fn, consts):
        names = list(inspect.signature(fn.fn).parameters)
        sig = {n: "constexpr" if n in consts else "*fp32" if n.endswith("_ptr") else "i32"
               for n in names}
        src = ASTSource(fn, signature=sig, constexprs=consts)
        return triton.compile(src, target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": 4}).asm["ptx"]

    tiles = dict(MODE=0, BLOCK_T=32, BLOCK_D=32, LOOP_STAGES=1)
    cells = [ptx(mingru_cell.mingru_cell_fwd_kernel,
                 dict(tiles, HAS_H0=True, SIGNED=signed, COUPLED=signed, HAS_DECAY=True,
                      PACKED=False)) for signed in (False, True)]
    cells.append(ptx(mingru_cell.mingru_cell_bwd_kernel,
                     dict(tiles, HAS_H0=True, HAS_DHT=True, SIGNED=True, COUPLED=True,
                          HAS_DECAY=True, PACKED=False)))
    log = ptx(parallel_scan_log.parallel_scan_log_fwd_kernel, tiles)
    for text in (*cells, log):
        assert "ex2.approx.ftz.f32" in text
        assert not re.search(r"ex2\\.approx\\.f32", text)  # the denormal-keeping form
        assert "div.full.f32" not in text and "div.rn.f32" not in text
    assert all("rcp.approx.ftz.f32" in text for text in cells)
    assert "lg2.approx.ftz.f32" in log and not re.search(r"lg2\\.approx\\.f32", log)
    print("OK")
    """
)


def test_gpu_compile_uses_one_instruction_special_functions():
    assert run_offline_gpu_compile(_PTX_CHECK).strip().endswith("OK")


def test_interpreter_uses_the_plain_operations():
    from mingru_kernels import _fast_math
    from mingru_kernels._seam import interpreter_mode

    assert _fast_math.INTERPRETING == interpreter_mode()
