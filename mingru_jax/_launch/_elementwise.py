"""Pieces the elementwise-scan launchers (``linear_scan``, ``parallel_scan_log``) share: the
launch plan on this device (forced choices honoured) and the carry-pass adapter.

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

__all__ = ["carry_adapter", "plan", "run_scan"]


def plan(op: str, x: jax.Array, tiles: dict | None = None) -> dict:
    """The plan of the elementwise scan ``op`` for ``x (B, T, D)``: the op's measured
    ``tiles`` (forward only), forced choices honoured."""
    B, T, D = x.shape
    # No look-back launch sequence through jax-triton yet: the chunked one instead.
    tiles = {key: value for key, value in (tiles or {}).items() if key != "lookback_tile"}
    return meta.plan(B, T, D, n_sm=common.sm_count(), **{**tiles,
                                                    **switches.plan_choices(op)})


# jax-triton passes outputs after the inputs and runtime scalars; the adapter reorders them.
# do_not_specialize as the kernel's own (n_chunks follows T).
@triton.jit(do_not_specialize=["n_chunks"])
def carry_adapter(sa, sx, sy, n_chunks, D, n_dblk, ca, cx, cy,
                   REVERSE: tl.constexpr, STORE_A: tl.constexpr, HAS_Y: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    scan_common.linear_carry_kernel(sa, sx, sy, ca, cx, cy, n_chunks, D, n_dblk,
                          REVERSE, STORE_A, HAS_Y, BLOCK_N, BLOCK_D)


def run_scan(adapter, cfg: dict, B: int, D: int, inputs: tuple, outs: tuple, scalars: tuple, *,
             reverse: bool, **consts) -> tuple:
    """Launch a single-state elementwise scan with the plan's strategy (the twin of
    ``mingru._launch._elementwise.run_scan``): the walk, or chunk summaries → the carry pass →
    apply. ``adapter(*inputs, s1, s2, *scalars, *outs, MODE=..., **consts)`` writes the chunk
    maps into its first two outputs in SUMMARY and reads the carry-ins ``(s1, s2)`` in APPLY;
    returns the outputs of the walk or of APPLY."""
    grid = meta.grid(cfg, B)
    if cfg["strategy"] == "lookback":
        raise NotImplementedError("the lookback strategy is not launched through jax-triton "
                                  "yet; force 'walk' or 'chunked' in JAX")
    first = inputs[0]  # placeholder for the scratch operands the walk and SUMMARY ignore
    if cfg["strategy"] == "walk":
        return common.launch(adapter, grid, (*inputs, first, first), outs, scalars,
                             MODE=meta.WALK, **consts)
    s, dummy = common.f32((B, int(cfg["n_chunks"]), D)), common.f32((1,))
    sa, sb, *_ = common.launch(adapter, grid, (*inputs, first, first),
                               (s, s, *(dummy,) * (len(outs) - 2)), scalars,
                               MODE=meta.SUMMARY, **consts)
    ca, cb, _ = common.launch(
        carry_adapter, meta.carry_grid(cfg, B), (sa, sb, sb), (dummy if reverse else s, s, dummy),
        (int(cfg["n_chunks"]), D, int(cfg["n_dblk"])), REVERSE=reverse, STORE_A=not reverse,
        HAS_Y=False, **meta.carry_kwargs(cfg))
    if reverse:
        ca = sa  # adjoint scans carry the state only (STORE_A off)
    return common.launch(adapter, grid, (*inputs, ca, cb), outs, scalars, MODE=meta.APPLY,
                         **consts)
