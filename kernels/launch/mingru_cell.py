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
    "TILES",
    "APPLY", "BWD_SCRATCH", "FWD_SCRATCH", "PLAN_KEYS", "SUMMARY", "WALK", "carry_grid",
    "carry_kwargs", "dims", "gate_count", "grid", "launch_kwargs", "plan",
]

FWD_SCRATCH = 4
"""fp32 ``(B, n_chunks, D)`` buffers the chunked forward needs (chunk maps and carries)."""
BWD_SCRATCH = 3
"""The same for the chunked backward."""

TILES: dict = dict(walk_tile=(128, 32, 4), chunked_tile=(64, 64, 2))
"""The forward's tiles: those measured for ``linear_recurrence``, whose loop this is (the cell
adds gate math per element, not traffic per step)."""


def gate_count(signed: bool) -> int:
    """Pre-activations per state channel: ``[k_z | k_h]`` (2) or ``[k_z | k_s | k_h]`` (3)."""
    return 3 if signed else 2
