"""Launch metadata of ``linear_recurrence`` (kernels in :mod:`mingru_kernels.linear_recurrence`), pure Python.

The elementwise scans share one planner (:mod:`mingru_kernels.launch._elementwise`); this
module names it for the op and holds the op's tiles.

Example:
    >>> from mingru_kernels.launch import linear_recurrence
    >>> linear_recurrence.plan(16, 16384, 128, **linear_recurrence.TILES)["strategy"]
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

TILES: dict = dict(walk_tile=(32, 32, 1, 4), lookback_tile=(16, 128, 1))
"""The forward's tiles, passed to :func:`plan`. ``lookback_tile`` (where T is split): one warp
per 16 × 128 tile, its 32 lanes along D and each thread's 16 steps scanned in registers.
``walk_tile`` (block_t, block_d, num_warps, loop_stages): one warp per program, the tile loop
pipelined four deep: a single warp scans its tile without Triton's cross-warp exchange."""

BWD_TILES: dict = dict(lookback_tile=(32, 32, 2))
"""The backward's tiles in float32: the one-warp tiles are no faster there."""

BWD_TILES_16BIT: dict = dict(lookback_tile=(16, 128, 1))
"""The backward's tiles for 16-bit inputs (bf16, fp16): one warp per 16 × 128 tile, as in
the forward."""


def bwd_tiles(itemsize: int) -> dict:
    """The backward's tiles for inputs of ``itemsize`` bytes per element.

    Example:
        >>> bwd_tiles(2)["lookback_tile"], bwd_tiles(4)["lookback_tile"]
        ((16, 128, 1), (32, 32, 2))
    """
    return BWD_TILES_16BIT if itemsize == 2 else BWD_TILES
