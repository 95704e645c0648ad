"""Launch metadata of ``mingru_cell`` (kernels in :mod:`mingru_kernels.mingru_cell`), pure Python.

The fused cells launch like ``linear_recurrence`` (the walk, or the single-pass look-back
where T is split), with the shared planner of :mod:`mingru_kernels.launch._elementwise`,
planned on the state shape ``(B, T, D)``.

Example:
    >>> from mingru_kernels.launch import mingru_cell
    >>> mingru_cell.gate_count(signed=True), mingru_cell.plan(8, 65536, 1536)["strategy"]
    (3, 'walk')
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
    "dims", "gate_count", "grid", "launch_kwargs", "plan",
]

TILES: dict = {
    False: dict(walk_tile=(64, 32, 4, 3), lookback_tile=(16, 32, 1)),
    True: dict(walk_tile=(128, 32, 4, 2), lookback_tile=(16, 32, 1)),
}
"""The forward's tiles per cell (key: ``signed``): the gate math needs fewer elements per
thread than the plain recurrence's tiles. ``lookback_tile`` (where T is split): one warp per
16 × 32 tile. The long walk's tiles carry a fourth element, the tile loop's pipelining depth
(``loop_stages``): the next tile's loads are in flight while one is scanned."""

BWD_TILES: dict = dict(walk_tile=(32, 32, 2, 3), lookback_tile=(32, 32, 4))
"""The backward's tiles in float32: the long walk on 32 × 32 tiles, 2 warps, the tile loop
pipelined three deep; the look-back on a four-warp tile (the one-warp tiles are slower in
float32)."""

BWD_TILES_16BIT: dict = {
    False: dict(BWD_TILES, lookback_tile=(16, 64, 1)),
    True: dict(BWD_TILES, lookback_tile=(16, 32, 1)),
}
"""The backward's tiles per cell (key: ``signed``) for 16-bit pre-activations (bf16 under
autocast, fp16): one warp per look-back tile."""


def bwd_tiles(signed: bool, itemsize: int) -> dict:
    """The backward's tiles for a cell (``signed``) whose pre-activations have ``itemsize``
    bytes per element.

    Example:
        >>> bwd_tiles(True, 2)["lookback_tile"], bwd_tiles(True, 4)["lookback_tile"]
        ((16, 32, 1), (32, 32, 4))
    """
    return BWD_TILES_16BIT[bool(signed)] if itemsize == 2 else BWD_TILES


def gate_count(signed: bool) -> int:
    """Pre-activations per state channel: ``[k_z | k_h]`` (2) or ``[k_z | k_s | k_h]`` (3)."""
    return 3 if signed else 2
