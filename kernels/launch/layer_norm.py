"""Launch metadata of ``layer_norm`` (kernels in :mod:`mingru_kernels.layer_norm`), pure Python.

A row is one program's tile (``BLOCK = next_pow2(D)``, at most :data:`MAX_D`), with warps
grown with it so that each thread holds at most 16 values per tensor. The backward gives each
program a group of rows and sums the groups' partial weight gradients afterwards.

Example:
    >>> from mingru_kernels.launch import layer_norm
    >>> layer_norm.config(512)
    {'BLOCK': 512, 'num_warps': 1}
    >>> layer_norm.bwd_groups(16384, n_sm=132)
    (512, 32)
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["GROUPS_PER_SM", "MAX_D", "PLAN_KEYS", "bwd_groups", "config", "unsupported_size"]

MAX_D = 16384
"""Widest row served: one row lives in registers (16 values per thread at 32 warps' worth of
threads would spill; 16384 floats over 16 warps is 32 per thread)."""

GROUPS_PER_SM = 4
"""Backward programs per SM: each sums its rows' weight gradients in registers, so fewer
groups mean a smaller final reduction, more mean more parallelism."""

PLAN_KEYS: tuple[str, ...] = ()
"""No forced plan choices (the layout has nothing to choose between)."""


def unsupported_size(D: int) -> str | None:
    """Why the kernels cannot normalise rows of ``D`` features, or ``None``."""
    if D > MAX_D:
        return f"rows of {D} features are wider than the {MAX_D} the kernels hold in registers"
    return None


def config(D: int) -> dict[str, int]:
    """``BLOCK`` (the padded row) and ``num_warps`` for rows of ``D`` features."""
    block = max(16, next_pow2(D))
    return {"BLOCK": block, "num_warps": min(16, max(1, block // 512))}


def bwd_groups(N: int, n_sm: int) -> tuple[int, int]:
    """``(groups, rows_per_group)`` of the backward for ``N`` rows on ``n_sm`` SMs."""
    rows = max(1, -(-N // (GROUPS_PER_SM * n_sm)))
    return -(-N // rows), rows
