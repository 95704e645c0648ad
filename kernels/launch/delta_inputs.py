"""Launch metadata of ``delta_inputs`` (kernels in :mod:`mingru_kernels.delta_inputs`), pure
Python.

One program per :data:`ROWS` rows of the projection; ``q`` and ``v`` move in
:data:`COLS`-wide column blocks, each key group in one ``BK``-wide tile (``d_k`` padded to a
power of two) and the β-logits in one ``BG``-wide tile.

Example:
    >>> from mingru_kernels.launch import delta_inputs
    >>> delta_inputs.config(64, 64, 4)
    {'BR': 16, 'BC': 128, 'BK': 64, 'BG': 16, 'num_warps': 4}
    >>> delta_inputs.grid(65536)
    (4096,)
    >>> delta_inputs.width(4, 1, 64, 64)
    772
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["COLS", "MAX_GROUPS", "MAX_HEAD_DIM", "PLAN_KEYS", "ROWS", "config", "grid",
           "unsupported_size", "width"]

ROWS = 16
"""Rows per program: a ``ROWS × COLS`` float32 tile is 16 values per thread on four warps."""

COLS = 128
"""Column block of the ``q`` and ``v`` copies."""

MAX_HEAD_DIM = 256
"""Widest key group held in one tile (the delta rule's kernels serve 128)."""

MAX_GROUPS = 4096
"""Most β-logits per row (``nh · n_heads``) held in one tile."""

PLAN_KEYS: tuple[str, ...] = ()
"""No forced plan choices (the layout has nothing to choose between)."""


def width(n_heads: int, nh: int, d_k: int, d_v: int) -> int:
    """Columns of the projection: ``H·d_k`` for ``q``, then ``nh·H`` groups of ``d_k`` (keys),
    of ``d_v`` (values) and of one (β-logits)."""
    return n_heads * d_k + nh * n_heads * (d_k + d_v + 1)


def unsupported_size(dk: int, dv: int, groups: int) -> str | None:
    """Why the kernels cannot serve key groups of ``dk``, values of ``dv`` and ``groups``
    (``nh · n_heads``) β-logits per row, or ``None``."""
    if dk > MAX_HEAD_DIM:
        return f"d_k = {dk} is wider than the {MAX_HEAD_DIM} one tile holds"
    if groups > MAX_GROUPS:
        return f"nh · n_heads = {groups} is more than the {MAX_GROUPS} one tile holds"
    return None


def config(dk: int, dv: int, groups: int) -> dict[str, int]:
    """Tile sizes and warps, keyed as the kernels' launch keywords (``BR``, ``BC``, ``BK``,
    ``BG``, ``num_warps``; ``dv`` only moves in column blocks, so it sets nothing)."""
    return {"BR": ROWS, "BC": COLS, "BK": max(16, next_pow2(dk)),
            "BG": max(16, next_pow2(groups)), "num_warps": 4}


def grid(n_rows: int) -> tuple[int]:
    """Programs for ``n_rows`` projection rows."""
    return (max(1, -(-n_rows // ROWS)),)
