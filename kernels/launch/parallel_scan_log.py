"""Launch metadata of ``parallel_scan_log`` (kernels in :mod:`mingru_kernels.parallel_scan_log`), pure Python.

The elementwise scans share one planner (:mod:`mingru_kernels.launch._elementwise`); this
module names it for the op and holds the op's tiles.

Example:
    >>> from mingru_kernels.launch import parallel_scan_log
    >>> parallel_scan_log.plan(8, 16384, 128, **parallel_scan_log.TILES)["strategy"]
    'lookback'
"""

from mingru_kernels.launch._elementwise import (
    LOOKBACK,
    PLAN_KEYS,
    WALK,
    dims,
    grid,
    launch_kwargs,
    plan,
)

__all__ = [
    "BWD_TILES", "BWD_TILES_16BIT", "LOOKBACK", "PLAN_KEYS", "TILES", "WALK", "bwd_tiles",
    "dims", "grid", "launch_kwargs", "plan",
]

TILES: dict = dict(walk_tile=(64, 32, 2, 3), lookback_tile=(32, 64, 1),
                   narrow_walk_tile=(256, 8, 2, 3))
"""The forward's tiles, passed to :func:`plan`. ``lookback_tile`` (where T is split): one warp
per 32 × 64 tile. ``walk_tile`` (block_t, block_d, num_warps, loop_stages): the long walk,
its tile loop pipelined three deep. ``narrow_walk_tile``: 8 channels per program, so that a
batch too narrow for the default walk still fills the GPU with walks, which read the inputs
once and publish nothing (the backward keeps its look-back, the faster there)."""

BWD_TILES: dict = dict(lookback_tile=(32, 32, 2))
"""The backward's tiles in float32: its adjoint is the linear recurrence's, so its look-back
tile."""

BWD_TILES_16BIT: dict = dict(lookback_tile=(16, 128, 1))
"""The backward's tiles for 16-bit inputs (bf16, fp16): one warp per 16 × 128 tile (in
float32 that tile is the slower one at short sequences)."""


def bwd_tiles(itemsize: int) -> dict:
    """The backward's tiles for inputs of ``itemsize`` bytes per element.

    Example:
        >>> bwd_tiles(2)["lookback_tile"], bwd_tiles(4)["lookback_tile"]
        ((16, 128, 1), (32, 32, 2))
    """
    return BWD_TILES_16BIT if itemsize == 2 else BWD_TILES
