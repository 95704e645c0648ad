"""Launch metadata of the fused rotation/Givens recurrence (op ``givens_recurrence``; kernels in
:mod:`mingru_kernels.givens_recurrence`), pure Python.

Example:
    >>> from mingru_kernels.launch.givens_recurrence import givens_config
    >>> givens_config(8, 3)["LP"], givens_config(8, 3)["RP"]
    (32, 4)
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2, pow2_floor
from mingru_kernels.launch.matrix_affine_scan import segment_plan

__all__ = ["PLAN_KEYS", "SUPPORTED_K", "givens_config", "segment_plan"]

PLAN_KEYS = ("seg_len",)
"""The choices a test may force (see :mod:`mingru_kernels.launch.switches`)."""

SUPPORTED_K = (2, 4, 8, 16)
"""Block sizes ``k`` the kernels compile for."""

_THREADS = 128  # one state element (a row pair of one column of one pair) per thread
_MAX_PAIRS = 64


def _lp_warps(state_per_pair: int, temp_per_pair: int) -> tuple[int, int]:
    lp = min(_MAX_PAIRS, pow2_floor(max(1, _THREADS // state_per_pair)))
    # enough warps that the largest temporary holds ≤ 4 elements per thread
    return lp, max(1, min(8, pow2_floor(lp * temp_per_pair // 128)))


def givens_config(k: int, rounds: int) -> dict[str, int]:
    """Launch constants: ``RP`` (rounds padded to a power of two), and pairs per program /
    warps for the output walks (``LP``, ``num_warps``; one state column of ``k/2`` row pairs
    per pair) and for the composite walks (``LP_COMP``, ``num_warps_comp``; ``k`` columns).
    About one row pair per thread keeps registers low and many programs resident, which is
    what a latency-bound sequential walk needs.

    Example:
        >>> givens_config(8, 3)["LP"], givens_config(8, 3)["RP"]
        (32, 4)
    """
    k2 = k // 2
    rp = next_pow2(rounds)
    lp, warps = _lp_warps(k2, max(k2 * k2, rp * k2))  # roll select / angle tile
    lpc, warpsc = _lp_warps(k * k2, k * k2 * k2)
    return {"RP": rp, "LP": lp, "num_warps": warps, "LP_COMP": lpc, "num_warps_comp": warpsc}
