"""Launch metadata of ``linear_scan`` (kernels in :mod:`mingru_kernels.linear_scan`), pure Python.

The elementwise scans share one planner (:mod:`mingru_kernels.launch._elementwise`); this
module names it for the op and adds the chunked strategy's scratch counts (the op's kernels
have no look-back mode, so long sequences at small ``B·D`` run chunked, on the default tile).

Example:
    >>> from mingru_kernels.launch import linear_scan
    >>> linear_scan.plan(16, 16384, 128)["strategy"]
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
    size_kwargs,
)

__all__ = [
    "APPLY", "BWD_SCRATCH", "FWD_SCRATCH", "PLAN_KEYS", "SUMMARY", "WALK", "carry_grid",
    "carry_kwargs", "dims", "grid", "launch_kwargs", "plan", "size_kwargs",
]

FWD_SCRATCH = 4
"""fp32 ``(B, n_chunks, D)`` buffers the chunked forward needs (chunk maps and carries)."""
BWD_SCRATCH = 5
"""The same for the chunked backward."""
