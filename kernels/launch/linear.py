"""Launch metadata of ``linear`` (kernels in :mod:`mingru_kernels.linear`), pure Python.

A decode step's GEMM has a few rows (the batch) and a weight of up to a few million entries.
Tiles of ``BLOCK_M`` rows (the rows padded to a power of two, 16 to 64) by :data:`BLOCK_N`
columns, and the reduction over ``K`` split into slices of at least :data:`MIN_K_PER_SPLIT`
until the grid holds about :data:`PROGRAMS_PER_SM` programs per SM.

Example:
    >>> from mingru_kernels.launch import linear
    >>> cfg = linear.config(64, 512, 2048, n_sm=132)  # an MLP's down projection at batch 64
    >>> cfg["SPLIT"], cfg["k_per_split"], linear.grid(cfg, 64, 512)
    (8, 256, (1, 16, 8))
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

__all__ = ["BLOCK_K", "BLOCK_N", "MAX_ROWS", "MIN_K_PER_SPLIT", "MIN_ROWS", "PLAN_KEYS",
           "PROGRAMS_PER_SM", "config", "grid", "prefer_fused"]

BLOCK_N = 32
"""Columns per program: with 64 rows a 64×32 float32 accumulator is 16 values a thread at
4 warps, and a d-512 model's narrowest GEMM (its 256-token head) still has 8 column blocks."""

BLOCK_K = 64
"""Reduction step: a 64×64 slice of ``x`` and a 64×32 slice of ``W`` per iteration."""

MIN_K_PER_SPLIT = 64
"""The shortest slice of the reduction a program takes: shorter ones spend more on storing
and re-reading their partial products than they save."""

PROGRAMS_PER_SM = 1
"""The grid the split aims at, per SM: one wave, since every slice past the first adds a
partial product to store and read back."""

MIN_ROWS = 16
"""Fewer rows than this stay on cuBLAS, whose GEMV kernels serve them well (batch-1 steps)."""

MAX_ROWS = 128
"""More rows than this stay on cuBLAS, whose float32 kernels then have tiles enough."""

PLAN_KEYS: tuple[str, ...] = ()
"""No forced plan choices."""


def config(M: int, N: int, K: int, *, n_sm: int) -> dict[str, int]:
    """``BLOCK_M``, ``BLOCK_N``, ``BLOCK_K``, ``SPLIT`` (slices of ``K``), ``k_per_split`` (a
    multiple of ``BLOCK_K``) and ``num_warps`` for ``(M, K) @ (N, K)ᵀ`` on ``n_sm`` SMs."""
    block_m = min(64, max(16, next_pow2(M)))
    tiles = -(-M // block_m) * -(-N // BLOCK_N)
    split = 1
    while (tiles * split * 2 <= PROGRAMS_PER_SM * n_sm
           and K // (split * 2) >= MIN_K_PER_SPLIT):
        split *= 2
    k_per_split = -(-K // split)
    k_per_split = -(-k_per_split // BLOCK_K) * BLOCK_K
    split = -(-K // k_per_split)
    return {"BLOCK_M": block_m, "BLOCK_N": BLOCK_N, "BLOCK_K": BLOCK_K, "SPLIT": split,
            "k_per_split": k_per_split, "num_warps": 4}


def grid(cfg: dict[str, int], M: int, N: int) -> tuple[int, int, int]:
    """The GEMM's grid: ``(row blocks, column blocks, K slices)``; with several slices, each
    ``(row block, column block)`` tile's last slice sums them (one counter per tile)."""
    return (-(-M // cfg["BLOCK_M"]), -(-N // cfg["BLOCK_N"]), cfg["SPLIT"])


def prefer_fused(rows: int, *, float32: bool) -> bool:
    """Whether ``auto`` takes the kernels inside a captured step: float32 GEMMs of
    :data:`MIN_ROWS` to :data:`MAX_ROWS` rows (16-bit ones stay on cuBLAS's tensor-core
    kernels, which serve them in a few microseconds)."""
    return float32 and MIN_ROWS <= rows <= MAX_ROWS
