"""Launch metadata of ``layer_norm`` (kernels in :mod:`mingru_kernels.layer_norm`), pure Python.

A row is one program's tile (``BLOCK = next_pow2(D)``, at most :data:`MAX_D`), with warps
grown with it so that each thread holds at most 16 values per tensor. The backward gives each
program a group of rows and sums the groups' partial weight gradients afterwards.

Example:
    >>> from mingru_kernels.launch import layer_norm
    >>> layer_norm.config(512)
    {'BLOCK': 512, 'num_warps': 1, 'bwd_warps': 2}
    >>> layer_norm.bwd_groups(16384, n_sm=132)
    (1024, 16)
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["AUTO_MIN_ELEMENTS", "GROUPS_PER_SM", "MAX_D", "PLAN_KEYS", "SUM_BLOCK_D",
           "SUM_BLOCK_G", "bwd_groups", "config", "prefer_fused", "sum_grid", "unsupported_size"]

MAX_D = 16384
"""Widest row served: one row lives in registers (see :func:`config` for what spills)."""

GROUPS_PER_SM = 8
"""Backward programs per SM: each sums its rows' weight gradients in registers, so fewer
groups mean a smaller final reduction, more mean more loads in flight. At 16384 rows of 512
(the training step's norms) that is 1024 groups of 16 rows, about 16 warps per SM, and partial
sums of 4.2 MB against the 84 MB the rows move. The row loop keeps its bounds check: without
it the compiler prefetches the next row, and the backward needs more registers (fewer
resident warps)."""

AUTO_MIN_ELEMENTS = 1 << 24
"""The smallest input (rows × features) for which ``auto`` takes the fused LayerNorm over
PyTorch's. Its GPU time is below PyTorch's norm and cast, but its forward and backward are
Python (an ``autograd.Function``, the backward on the autograd engine's device thread) where
PyTorch's are C++: more host time per norm. A training step whose norms are smaller is bound
by host time and runs slower with it; from this size on the step is bound by the GPU and
runs faster."""

SUM_BLOCK_D = 32
"""Columns per program of the partial-gradient sum: D = 512 gives 16 programs, each reading
its columns of the 1024 partial rows (128 KB per gradient) in float32."""

SUM_BLOCK_G = 64
"""Partial rows per step of the sum: a 64×32 float32 tile is 16 values per thread at 4 warps."""

PLAN_KEYS: tuple[str, ...] = ()
"""No forced plan choices (the layout has nothing to choose between)."""


def unsupported_size(D: int) -> str | None:
    """Why the kernels cannot normalise rows of ``D`` features, or ``None``."""
    if D > MAX_D:
        return f"rows of {D} features are wider than the {MAX_D} the kernels hold in registers"
    return None


def config(D: int) -> dict[str, int]:
    """``BLOCK`` (the padded row), the forward's ``num_warps`` and the backward's
    ``bwd_warps`` for rows of ``D`` features.

    The backward holds seven row-sized values per thread (``x``, ``dy``, ``x̂``, ``g``, ``dx``
    and the two gradient sums), so it gets twice the forward's warps: with the forward's it
    would take about twice the registers at narrow rows and spill at the widest. With these
    warps the forward does not spill and the backward spills little only at the widest rows.
    """
    block = max(16, next_pow2(D))
    return {"BLOCK": block, "num_warps": min(16, max(1, block // 512)),
            "bwd_warps": min(32, max(2, block // 256))}


def prefer_fused(n_elements: int) -> bool:
    """Whether ``auto`` takes the fused norm for an input of ``n_elements`` (see
    :data:`AUTO_MIN_ELEMENTS`)."""
    return n_elements >= AUTO_MIN_ELEMENTS


def sum_grid(D: int) -> int:
    """Programs of the partial-gradient sum for rows of ``D`` features."""
    return max(1, -(-D // SUM_BLOCK_D))


def bwd_groups(N: int, n_sm: int) -> tuple[int, int]:
    """``(groups, rows_per_group)`` of the backward for ``N`` rows on ``n_sm`` SMs."""
    rows = max(1, -(-N // (GROUPS_PER_SM * n_sm)))
    return -(-N // rows), rows
