"""Launch metadata of ``matrix_affine_scan`` (kernels in :mod:`mingru_kernels.matrix_affine_scan`),
pure Python: supported block sizes, the segment plan and pairs per program.

Example:
    >>> from mingru_kernels.launch.matrix_affine_scan import affine_config, segment_plan
    >>> segment_plan(1024), affine_config(2, 1)
    ((32, 32), {'LP': 64, 'num_warps': 4})
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from mingru_kernels.launch._elementwise import cdiv, pow2_floor

__all__ = [
    "PLAN_KEYS", "SINGLE_PASS_MAX_T", "SUPPORTED_SIZES", "WalkPlan", "affine_config",
    "segment_plan", "walk_plan",
]

PLAN_KEYS = ("seg_len",)
"""The choices a test may force (see :mod:`mingru_kernels.launch.switches`)."""

SUPPORTED_SIZES = (1, 2, 4, 8, 16)
"""Block sizes ``k`` and state widths ``v`` the kernels compile for."""

SINGLE_PASS_MAX_T = 32
"""Up to this length one walk per pair is cheaper than two launches (composites, then
outputs)."""

_ELEMENT_BUDGET = 1024  # elements of the largest per-step temporary in one program
_MAX_PAIRS = 64
_MAX_GRID_Y = 65535  # CUDA's limit on grid dim 1, which counts segments


def segment_plan(T: int, seg_len: int | None = None) -> tuple[int, int]:
    """``(seg_len, nseg)`` for a length-``T`` walk.

    Short sequences run as one segment; longer ones use ``seg_len ≈ sqrt(T/2)`` (a power of
    two ≥ 8), which minimises the dependent chain ``2·seg_len + nseg``. ``seg_len`` forces a
    length (tests use it to exercise the carry path on tiny ``T``). Only the grid depends on
    ``T``; no kernel is compiled per ``T``.

    Example:
        >>> segment_plan(20), segment_plan(1024), segment_plan(23, seg_len=4)
        ((20, 1), (32, 32), (4, 6))
    """
    if T < 1:
        raise ValueError(f"T must be ≥ 1; got {T}")
    if seg_len is None:
        if T <= SINGLE_PASS_MAX_T:
            return T, 1
        seg_len = 8
        while 2 * seg_len * seg_len < T:
            seg_len *= 2
    seg_len = max(1, min(int(seg_len), T), -(-T // _MAX_GRID_Y))
    return seg_len, -(-T // seg_len)


def affine_config(k: int, v: int) -> dict[str, int]:
    """Launch constants for the walk kernels: pairs per program ``LP`` and ``num_warps``.

    ``LP`` keeps the largest per-step temporary (the ``[LP, k, k, max(k, v)]`` product) near
    1024 fp32 elements, so registers stay low and many programs are resident.

    Example:
        >>> affine_config(2, 1), affine_config(16, 1)
        ({'LP': 64, 'num_warps': 4}, {'LP': 1, 'num_warps': 8})
    """
    per_pair = k * k * max(k, v)  # the [LP, k, k, max(k, v)] broadcast product
    lp = min(_MAX_PAIRS, pow2_floor(_ELEMENT_BUDGET // per_pair))
    warps = 8 if lp * per_pair > _ELEMENT_BUDGET else 4
    return {"LP": lp, "num_warps": warps}


class WalkPlan(NamedTuple):
    """One launch of the walk kernels (forward or backward), from :func:`walk_plan`."""

    grid: tuple[int, int]  # (programs over the block pairs, segments)
    constants: dict[str, int]  # the kernels' K, V, LP and num_warps
    scalars: tuple[int, int, int, int, int]  # the kernels' (npair, n, T, seg_len, nseg)
    sizes: dict[str, int]  # the same by parameter name, for launches by keyword
    npair: int  # B·n block pairs
    nseg: int  # segments along T; more than one: a composites pass runs first


def walk_plan(a_shape: Sequence[int], v: int, seg_len: int | None = None) -> WalkPlan:
    """The launch over transitions of shape ``a_shape = (B, T, n, k, k)`` and ``k×v`` states
    (``seg_len``: a forced segment length, see :func:`segment_plan`); both frontends launch
    from it.

    Example:
        >>> plan = walk_plan((2, 1024, 3, 2, 2), 1)
        >>> plan.grid, plan.scalars
        ((1, 32), (6, 3, 1024, 32, 32))
    """
    B, T, n, k, _ = a_shape
    npair = B * n
    config = affine_config(k, v)
    seg_len, nseg = segment_plan(T, seg_len)
    sizes = dict(npair=npair, n=n, T=T, seg_len=seg_len, nseg=nseg)
    return WalkPlan(grid=(cdiv(npair, config["LP"]), nseg),
                    constants=dict(K=k, V=v, LP=config["LP"], num_warps=config["num_warps"]),
                    scalars=tuple(sizes.values()), sizes=sizes, npair=npair, nseg=nseg)
