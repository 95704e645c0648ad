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
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["COLS", "MAX_GROUPS", "MAX_HEAD_DIM", "PLAN_KEYS", "ROWS", "config", "grid",
           "unsupported_size"]

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


def unsupported_size(dk: int, dv: int, groups: int) -> str | None:
    """Why the kernels cannot serve key groups of ``dk``, values of ``dv`` and ``groups``
    (``nh · n_heads``) β-logits per row, or ``None``."""
    if dk > MAX_HEAD_DIM:
        return f"d_k = {dk} is wider than the {MAX_HEAD_DIM} one tile holds"
    if groups > MAX_GROUPS:
        return f"nh · n_heads = {groups} is more than the {MAX_GROUPS} one tile holds"
    return None


def config(dk: int, dv: int, groups: int) -> dict[str, int]:
    """Tile sizes and warps (``dv`` only moves in column blocks, so it sets nothing)."""
    return {"BR": ROWS, "BC": COLS, "BK": max(16, next_pow2(dk)),
            "BG": max(16, next_pow2(groups)), "num_warps": 4}


def grid(n_rows: int) -> tuple[int]:
    """Programs for ``n_rows`` projection rows."""
    return (max(1, -(-n_rows // ROWS)),)
