"""Launch metadata of ``linear_recurrence`` (kernels in :mod:`mingru_kernels.linear_recurrence`), pure Python.

The elementwise scans share one planner (:mod:`mingru_kernels.launch._elementwise`); this
module names it for the op and adds the op's scratch counts.

Example:
    >>> from mingru_kernels.launch import linear_recurrence
    >>> linear_recurrence.plan(16, 16384, 128)["strategy"]
    'chunked'
"""

from mingru_kernels.launch._elementwise import (
    APPLY,
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
    "APPLY", "BWD_SCRATCH", "FWD_SCRATCH", "PLAN_KEYS", "SUMMARY", "WALK", "carry_grid",
    "carry_kwargs", "dims", "grid", "launch_kwargs", "plan",
]

FWD_SCRATCH = 4
"""fp32 ``(B, n_chunks, D)`` buffers the chunked forward needs (chunk maps and carries)."""
BWD_SCRATCH = 3
"""The same for the chunked backward."""

TILES: dict = dict(walk_tile=(32, 32, 1, 4), chunked_tile=(64, 64, 2), lookback_tile=(16, 128, 1))
"""The forward's measured tiles, passed to :func:`plan` (``scripts/plan_sweep.py`` on an NVIDIA
H200, forward times with ``triton.testing.do_bench``: at B8 T65536 D1536 (walk) 3.02 → 2.52 ms and at B16 T16384 D128 (chunked) 0.244 → 0.197 ms). ``lookback_tile`` (the single-pass
strategy, used where T is split): at B16 T16384 D128 forward 0.196 ms with (32, 32, 2) (chunked
0.200), fwd+bwd 0.760 ms (chunked 1.114); then 0.197 → 0.166 ms with one warp per 16 × 128
tile, its 32 lanes along D and each thread's 16 steps scanned in registers (ninth round,
``docs/results/gpu-h200/session9-lookback-sweep.log``). ``walk_tile`` (block_t, block_d, num_warps, loop_stages): at
B8 T65536 D1536 2.558 ms with (128, 32, 4) → 2.440 ms with one warp per program, the tile loop
pipelined four deep (ninth round, ``docs/results/gpu-h200/session9-walk-sweep.log``: a single
warp scans its tile without Triton's cross-warp exchange)."""

BWD_TILES: dict = dict(lookback_tile=(32, 32, 2))
"""The backward's tiles: the look-back tile measured with fwd+bwd above (the one-warp tiles were
no faster there: 0.72–1.56 ms against 0.75 in the ninth round's sweep)."""

BWD_TILES_16BIT: dict = dict(lookback_tile=(16, 128, 1))
"""The backward's tiles for 16-bit inputs (bf16, fp16): one warp per 16 × 128 tile. Measured with
``linear_recurrence``'s backward kernels alone (``plan_sweep.py --bwd-kernel``, bf16, an
NVIDIA H100, twenty-seventh round), at B8 T2048 D512, B16 T4096 D256 and B16 T16384 D128:
0.069 / 0.124 / 0.258 ms with (32, 32, 2) → 0.058 / 0.100 / 0.190 with (16, 128, 1). In float32
the same tile took 0.075 / 0.138 / 0.240 against 0.076 / 0.139 / 0.278, but on the H200 (ninth
round) it measured slower in fwd+bwd at 16k, so float32 keeps (32, 32, 2) until an H200 sweep."""


def bwd_tiles(itemsize: int) -> dict:
    """The backward's measured tiles for inputs of ``itemsize`` bytes per element.

    Example:
        >>> bwd_tiles(2)["lookback_tile"], bwd_tiles(4)["lookback_tile"]
        ((16, 128, 1), (32, 32, 2))
    """
    return BWD_TILES_16BIT if itemsize == 2 else BWD_TILES
