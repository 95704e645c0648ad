"""Launch metadata of ``delta_rule_step`` (kernel in :mod:`mingru_kernels.delta_rule_step`),
pure Python.

One program per (sequence, head, block of ``BV`` state columns): the program holds a
``BK × BV`` float32 tile of the state in registers, ``BK`` the head's ``d_k`` padded to a
power of two (at most :data:`MAX_HEAD_DIM`), ``BV`` at most :data:`COLS` and small enough that
the tile stays within :data:`MAX_TILE` values.

Example:
    >>> from mingru_kernels.launch import delta_rule_step
    >>> delta_rule_step.config(64, 64)
    {'BK': 64, 'BV': 32, 'num_warps': 4}
    >>> delta_rule_step.grid(2, 4, d_v=64, cfg=delta_rule_step.config(64, 64))
    (8, 2)
    >>> delta_rule_step.config(24, 40)
    {'BK': 32, 'BV': 32, 'num_warps': 2}
"""

from __future__ import annotations

from collections.abc import Mapping

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["COLS", "MAX_HEAD_DIM", "MAX_TILE", "PLAN_KEYS", "config", "grid", "unsupported_size"]

MAX_HEAD_DIM = 256
"""Widest ``d_k`` held in one tile (the rows of a column block stay in registers through all
``nh`` micro-steps)."""

MAX_TILE = 4096
"""Most float32 state values per program: 32 registers a thread on four warps."""

COLS = 32
"""Widest column block: narrower blocks give a short decode (few sequences and heads) more
programs to spread over the GPU, each with a shorter serial chain of micro-steps."""

PLAN_KEYS: tuple[str, ...] = ()
"""No forced plan choices (one plan serves every shape)."""


def unsupported_size(d_k: int) -> str | None:
    """Why the kernel cannot serve heads with ``d_k`` key rows, or ``None`` (``d_v`` is split
    into column blocks, so any width serves)."""
    if d_k > MAX_HEAD_DIM:
        return f"d_k = {d_k} is wider than the {MAX_HEAD_DIM} rows one tile holds"
    return None


def config(d_k: int, d_v: int) -> dict[str, int]:
    """Tile sizes and warps, keyed as the kernel's launch keywords (``BK``, ``BV``,
    ``num_warps``): one warp per 512 tile values, one to four."""
    block_k = max(16, next_pow2(d_k))
    block_v = max(1, min(next_pow2(d_v), COLS, MAX_TILE // block_k))
    return {"BK": block_k, "BV": block_v, "num_warps": max(1, min(4, block_k * block_v // 512))}


def grid(batch: int, n_heads: int, *, d_v: int, cfg: Mapping[str, int]) -> tuple[int, int]:
    """Programs for ``batch`` sequences of ``n_heads`` heads with ``d_v`` state columns."""
    return (batch * n_heads, -(-d_v // cfg["BV"]))
