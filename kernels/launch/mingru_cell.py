"""Launch metadata of ``mingru_cell`` (kernels in :mod:`mingru_kernels.mingru_cell`), pure Python.

The fused cells launch like ``linear_recurrence`` (walk, or chunk summaries + carry pass +
apply), with the shared planner of :mod:`mingru_kernels.launch._elementwise`, planned on the
state shape ``(B, T, D)``.

Example:
    >>> from mingru_kernels.launch import mingru_cell
    >>> mingru_cell.gate_count(signed=True), mingru_cell.plan(8, 65536, 1536)["strategy"]
    (3, 'walk')
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
    "BWD_TILES", "BWD_TILES_16BIT", "TILES",
    "APPLY", "BWD_SCRATCH", "FWD_SCRATCH", "PLAN_KEYS", "SUMMARY", "WALK", "bwd_tiles",
    "carry_grid", "carry_kwargs", "dims", "gate_count", "grid", "launch_kwargs", "plan",
]

FWD_SCRATCH = 4
"""fp32 ``(B, n_chunks, D)`` buffers the chunked forward needs (chunk maps and carries)."""
BWD_SCRATCH = 3
"""The same for the chunked backward."""

TILES: dict = {
    False: dict(walk_tile=(64, 32, 4, 3), chunked_tile=(32, 64, 4), lookback_tile=(16, 32, 1)),
    True: dict(walk_tile=(128, 32, 4, 2), chunked_tile=(32, 32, 4), lookback_tile=(16, 32, 1)),
}
"""The forward's tiles per cell (key: ``signed``), from ``scripts/plan_sweep.py`` on an NVIDIA
H200 (``triton.testing.do_bench``): the gate math needs fewer elements per thread than the plain
recurrence's tiles. MinGRU cell at B8 T65536 D1536 (walk) 12.76 → 4.90 ms, at B16 T16384 D128
(chunked) 0.681 → 0.414 ms; signed cell 14.32 → 5.65 ms and 0.891 → 0.525 ms. The single-pass
``lookback_tile``, used where T is split: at B16 T16384 D128 0.461 → 0.261 ms (MinGRU cell)
and 0.498 → 0.285 ms (signed), against the chunked strategy in the same run, with (16, 128, 4);
then one warp per 16 × 32 tile: 0.254 → 0.239 ms and 0.295 → 0.253 ms (ninth round,
``docs/results/gpu-h200/session9-lookback-sweep.log``). The long walk's
tiles carry a fourth element, the tile loop's pipelining depth (``loop_stages``): with the
next tile's loads in flight while one is scanned, and the gate math on single ``MUFU``
instructions (:mod:`mingru_kernels._fast_math`), the big shape went 5.04 → 3.08 ms (MinGRU
cell, (64, 32, 4, 3)) and 5.72 → 3.25 ms (signed, (128, 32, 4, 2)), eighth round."""

BWD_TILES: dict = dict(walk_tile=(32, 32, 2, 3), chunked_tile=(32, 16, 4),
                       lookback_tile=(32, 32, 4))
"""The backward's tiles (the MinGRU cell's fwd+bwd at B16 T16384 D128: 2.06 → 1.24 ms; with the
look-back forward and backward 1.05 ms, the signed cell's 1.41 → 1.17 ms). The long walk's
(32 × 32, 2 warps, the tile loop pipelined 3 deep) from ``plan_sweep.py --strategy walk --bwd``
at B8 T65536 D1536 on an NVIDIA H100, the backward's own time against (32, 16, 4) unpipelined:
MinGRU cell 16.90 → 15.82 ms, signed cell 22.19 → 19.62 ms (twenty-fourth round)."""

BWD_TILES_16BIT: dict = {
    False: dict(BWD_TILES, lookback_tile=(16, 64, 1)),
    True: dict(BWD_TILES, lookback_tile=(16, 32, 1)),
}
"""The backward's tiles per cell (key: ``signed``) for 16-bit pre-activations (bf16 under
autocast, fp16): one warp per look-back tile. The backward kernels alone (``plan_sweep.py
--bwd-kernel``, bf16, NVIDIA H100, twenty-seventh round) at B8 T2048 D512, B16 T4096 D256 and
B8 T2048 D1024, a sum's gradient / a dense one, ms: MinGRU cell (32, 32, 4) 0.126 / 0.240 / 0.235
and 0.117 / 0.222 / 0.214 → (16, 64, 1) 0.102 / 0.186 / 0.178 and 0.106 / 0.193 / 0.186; signed
cell 0.131 / 0.249 / 0.245 and 0.123 / 0.233 / 0.226 → (16, 32, 1) 0.092 / 0.169 / 0.161 and
0.098 / 0.181 / 0.172. In float32 the four-warp tile stays the fastest (the one-warp tiles took
1.2–2.2× its time there)."""


def bwd_tiles(signed: bool, itemsize: int) -> dict:
    """The backward's measured tiles for a cell (``signed``) whose pre-activations have
    ``itemsize`` bytes per element.

    Example:
        >>> bwd_tiles(True, 2)["lookback_tile"], bwd_tiles(True, 4)["lookback_tile"]
        ((16, 32, 1), (32, 32, 4))
    """
    return BWD_TILES_16BIT[bool(signed)] if itemsize == 2 else BWD_TILES


def gate_count(signed: bool) -> int:
    """Pre-activations per state channel: ``[k_z | k_h]`` (2) or ``[k_z | k_s | k_h]`` (3)."""
    return 3 if signed else 2
