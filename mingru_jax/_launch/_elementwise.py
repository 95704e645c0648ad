"""Pieces the elementwise-scan launchers (``linear_scan``, ``linear_recurrence``,
``parallel_scan_log``, the cells) share: the launch plan on this device (forced choices
honoured), the look-back launch and the chunked strategy's carry-pass adapter.

The twin of :mod:`mingru._launch._elementwise`; the planner itself is pure Python in
:mod:`mingru_kernels.launch._elementwise`.
"""

from __future__ import annotations

import jax
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_kernels import _scan_common as scan_common
from mingru_kernels.launch import _elementwise as meta
from mingru_kernels.launch import switches

__all__ = ["carry_adapter", "dims", "lookback_launch", "lookback_specs", "plan", "run_scan"]


def plan(op: str, x: jax.Array, tiles: dict | None = None) -> dict:
    """The plan of the elementwise scan ``op`` for ``x (B, T, D)``: the op's tuned ``tiles``
    (its launch module's ``TILES``, or its backward's), forced choices honoured."""
    B, T, D = x.shape
    choices = switches.plan_choices(op)
    if int(choices.get("lookback_stride") or 1) > 1:
        # The stride sits in the first status word, which the launch zeroes here: the
        # kernels' aggregate path is tested through the PyTorch launchers.
        raise NotImplementedError("lookback_stride > 1 is a PyTorch-launcher test switch")
    return meta.plan(B, T, D, n_sm=common.sm_count(), **{**(tiles or {}), **choices})


# The chunked strategy's carry pass. jax-triton passes outputs after the inputs and runtime
# scalars; the adapter reorders them. do_not_specialize as the kernel's own (n_chunks follows T).
@triton.jit(do_not_specialize=["n_chunks"])
def carry_adapter(sa, sx, sy, n_chunks, D, n_dblk, ca, cx, cy,
                   REVERSE: tl.constexpr, STORE_A: tl.constexpr, HAS_Y: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    scan_common.linear_carry_kernel(sa, sx, sy, ca, cx, cy, n_chunks, D, n_dblk,
                          REVERSE, STORE_A, HAS_Y, BLOCK_N, BLOCK_D)


def dims(cfg: dict, T: int, D: int) -> tuple[int, int, int, int, int]:
    """The scan adapters' runtime sizes ``(T, D, chunk_len, n_chunks + 1, n_dblk)``; the
    adapters take ``n_chunks_p1`` and pass ``n_chunks_p1 - 1`` on.

    jax-triton's lowering turns every scalar argument equal to 1 into a constant, whatever the
    kernel's ``do_not_specialize`` says (:mod:`mingru_jax._launch._compile`), and the walk
    always has ``n_chunks = 1``. PyTorch's launcher keeps it a runtime value, and the two
    compiles differ: with ``n_chunks`` a constant 1 the long walk takes more registers (fewer
    resident programs, a slower walk). ``n_chunks + 1`` is never 1, so both frontends compile
    the same kernel."""
    T, D, chunk_len, n_chunks, n_dblk = meta.dims(cfg, T, D)
    return T, D, chunk_len, n_chunks + 1, n_dblk


def lookback_specs(cfg: dict, B: int, D: int) -> tuple[jax.ShapeDtypeStruct, ...]:
    """The look-back strategy's two scratch outputs (the last two of the adapters that have
    it): fp32 chunk values ``(B, n_chunks, 3, D)`` and the int32 status words, which
    :func:`lookback_launch` zeroes (the twin of ``mingru._launch._elementwise
    .lookback_scratch``); 1-element placeholders for the other strategies."""
    if cfg["strategy"] != "lookback":
        return common.f32((1,)), common.i32((1,))
    values_shape, n_status = meta.lookback_shapes(cfg, B, D)
    return common.f32(values_shape), common.i32((n_status,))


def lookback_launch(adapter, cfg: dict, B: int, *, D: int, inputs: tuple, outs: tuple,
                    scalars: tuple, **consts) -> tuple:
    """The single pass of the look-back strategy: ``adapter(*inputs, *scalars, *outs,
    values, status, MODE=LOOKBACK, ...)``; returns ``outs``' results."""
    specs = lookback_specs(cfg, B, D)
    results = common.launch(adapter, meta.grid(cfg, B), inputs, outputs=(*outs, *specs),
                            scalars=scalars, zeroed=(len(outs) + 1,), MODE=meta.LOOKBACK, **consts)
    return results[:len(outs)]


def run_scan(adapter, cfg: dict, B: int, *, D: int, inputs: tuple, outs: tuple, scalars: tuple,
             **consts) -> tuple:
    """Launch a single-state scan whose kernels have a look-back mode with the plan's strategy
    (the twin of ``mingru._launch._elementwise.run_scan``): the walk or the look-back.
    ``adapter(*inputs, *scalars, *outs, values, status, MODE=..., **consts)`` takes the
    look-back's values and status words as its last two outputs (placeholders for the walk).
    Returns ``outs``' results."""
    if cfg["strategy"] == "lookback":
        return lookback_launch(adapter, cfg, B, D=D, inputs=inputs, outs=outs, scalars=scalars,
                               **consts)
    if cfg["strategy"] != "walk":
        raise ValueError(f"this op's kernels run the walk or the look-back; got {cfg['strategy']!r}")
    specs = lookback_specs(cfg, B, D)
    return common.launch(adapter, meta.grid(cfg, B), inputs, outputs=(*outs, *specs),
                         scalars=scalars, MODE=meta.WALK, **consts)[:len(outs)]
