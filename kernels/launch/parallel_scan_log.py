"""Launch metadata of ``parallel_scan_log`` (kernels in :mod:`mingru_kernels.parallel_scan_log`), pure Python.

The elementwise scans share one planner (:mod:`mingru_kernels.launch._elementwise`); this
module names it for the op and adds the op's scratch counts.

Example:
    >>> from mingru_kernels.launch import parallel_scan_log
    >>> parallel_scan_log.plan(16, 16384, 128)["strategy"]
    'chunked'
"""

from mingru_kernels.launch._elementwise import (
    APPLY,
    LOOKBACK,
    PLAN_KEYS,
    SUMMARY,
    WALK,
    carry_grid,
    carry_kwargs,
    dims,
    grid,
    launch_kwargs,
    plan,
)

__all__ = [
    "BWD_TILES", "BWD_TILES_16BIT", "TILES", "bwd_tiles",
    "APPLY", "BWD_SCRATCH", "LOOKBACK", "FWD_SCRATCH", "PLAN_KEYS", "SUMMARY", "WALK", "carry_grid",
    "carry_kwargs", "dims", "grid", "launch_kwargs", "plan",
]

FWD_SCRATCH = 3
"""fp32 ``(B, n_chunks, D)`` buffers the chunked forward needs (chunk maps and carries)."""
BWD_SCRATCH = 3
"""The same for the chunked backward."""

TILES: dict = dict(walk_tile=(64, 32, 2, 3), chunked_tile=(32, 64, 1), lookback_tile=(32, 64, 1),
                   narrow_walk_tile=(256, 8, 2, 3))
"""The forward's measured tiles, passed to :func:`plan` (``scripts/plan_sweep.py`` on an NVIDIA
H200, forward times with ``triton.testing.do_bench``: at B16 T16384 D128 (chunked) 0.527 → 0.426 ms
with (64, 64, 2), then 0.423 → 0.357 ms with the one-warp (32, 64, 1) in one run,
``docs/results/gpu-h200/session5-tile-sweep-16k.log``; the default walk tile was already the
best at B8 T65536 D1536). ``lookback_tile``: the single-pass strategy, used where T is split: at B16 T16384 D128 0.300 ms
with (32, 64, 1), against 0.447 with (16, 128, 4) and 0.357 for the chunked strategy (sixth
round in ``docs/results/gpu-h200.md``). ``walk_tile`` (block_t, block_d, num_warps,
loop_stages): the long walk at B8 T65536 D1536, its tile loop pipelined three deep: 4.66 →
4.07 ms with (64, 16, 2, 3) on the exact path alone, then with the one-scale fast path 3.73
ms, and 3.51 ms with (64, 32, 2, 3) (eighth round). ``narrow_walk_tile``: at B16 T16384 D128
a walk of 256 programs over 8 channels each, 0.261 ms against 0.293 ms for the look-back in
the same run (ninth round, ``docs/results/gpu-h200/session9-walk-sweep.log``; the backward
keeps its look-back, which measured faster)."""

BWD_TILES: dict = dict(lookback_tile=(32, 32, 2))
"""The backward's tiles: its adjoint is the linear recurrence's, so its look-back tile."""

BWD_TILES_16BIT: dict = dict(lookback_tile=(16, 128, 1))
"""The backward's tiles for 16-bit inputs (bf16, fp16): one warp per 16 × 128 tile. Measured with
the log scan's backward kernels alone (``plan_sweep.py --bwd-kernel``, bf16, an NVIDIA
H100, twenty-seventh round), at B8 T2048 D512, B16 T4096 D256 and B16 T16384 D128: 0.078 /
0.142 / 0.287 ms with (32, 32, 2) → 0.075 / 0.132 / 0.242 with (16, 128, 1). In float32 that
tile was slower at the two shorter shapes (0.113 / 0.212 / 0.369), so float32 keeps (32, 32, 2)."""


def bwd_tiles(itemsize: int) -> dict:
    """The backward's measured tiles for inputs of ``itemsize`` bytes per element.

    Example:
        >>> bwd_tiles(2)["lookback_tile"], bwd_tiles(4)["lookback_tile"]
        ((16, 128, 1), (32, 32, 2))
    """
    return BWD_TILES_16BIT if itemsize == 2 else BWD_TILES
