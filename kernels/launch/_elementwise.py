"""Launch plan of the elementwise scans (``linear_scan``, ``linear_recurrence``,
``parallel_scan_log``, ``mingru_cell``), pure Python.

Three strategies (see :func:`plan`):

* ``walk``: grid ``B × D-blocks``; each program walks the whole sequence tile by tile,
  carrying the state in registers. Reads inputs once, writes outputs once.
* ``lookback`` (ops whose kernels have a LOOKBACK mode, i.e. whose ``TILES`` name a
  ``lookback_tile``): for small ``B·D`` with long T, one program per tile-sized chunk (grid
  ``B × chunks × D-blocks``), single pass — each program scans its tile, publishes the tile's
  map, looks back through its predecessors' published maps for its carry-in (decoupled
  look-back, as in single-pass GPU prefix sums) and writes the outputs. Reads inputs once;
  scratch: one int32 status word per program (zeroed) and three fp32 vectors per chunk.
* ``chunked`` (the other ops, i.e. ``linear_scan``): the same case in three phases. Phase 1
  (grid ``B × chunks × D-blocks``) reduces each chunk to its map; phase 2 (the carry kernel;
  grid ``B × D-blocks``) scans the chunk maps into each chunk's carry-in; phase 3 (same grid
  as phase 1) rescans each chunk from its carry-in and writes the outputs. Inputs are read
  twice.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Kernel MODE values (the MODE constexpr): which role a scan kernel plays.
WALK = 0  # carry starts at the sequence's initial state; write outputs
SUMMARY = 1  # chunked phase 1: reduce each chunk to its map; write the chunk summary only
APPLY = 2  # chunked phase 3: carry starts at the chunk's carry-in (from phase 2); write outputs
LOOKBACK = 3  # single pass: each program scans one tile-sized chunk, its carry-in looked back

# Default tile: 64 steps × 32 channels (128-byte fp32 rows), 4 warps.
BLOCK_T = 64
# Sequences of at most this many steps (a decode step's T = 1) walk one tile of this height:
# a 64-row tile would scan 64 times the rows there are.
SHORT_BLOCK_T = 16
BLOCK_D = 32
BLOCK_N = 16  # chunk summaries per tile in the carry pass
NUM_WARPS = 4
# The walk keeps the reads at one pass; pick it when it alone yields this many programs per SM.
WALK_MIN_PROGRAMS_PER_SM = 2
# The chunked strategy aims at this many programs per SM.
CHUNKED_PROGRAMS_PER_SM = 4
# Sequences of at most this many tiles always walk. The chunked strategy costs two more kernel
# launches and four scratch buffers per direction, more host time than a walk of a few short
# tiles takes on the GPU, so below this length more parallelism in T does not pay for itself.
WALK_MAX_TILES = 16
# Ops with the single-pass look-back pay one launch and one zeroed status buffer for it, not
# the chunked strategy's three launches and four buffers: they split T from this many tiles on
# (a walk of a few programs over a thousand steps is bound by its sequential chain, where the
# look-back's programs each scan one tile).
LOOKBACK_MIN_TILES = 4
# An op's narrow_walk_tile (few channels per program) walks instead of splitting T when it alone
# gives this many programs per SM (a little under two: the log-space scan's forward at B16
# D128 on 8-channel tiles).
NARROW_WALK_MIN_PROGRAMS_PER_SM = 1.9
# What the planner assumes when the caller cannot ask the device for its SM count.
DEFAULT_SM_COUNT = 132

STRATEGIES = ("walk", "chunked", "lookback")
"""The launch strategies: ``lookback`` for ops whose kernels have a LOOKBACK mode,
``chunked`` for the others."""

PLAN_KEYS = ("strategy", "block_t", "block_d", "chunk_len", "num_warps", "loop_stages",
             "lookback_stride")
"""The choices a test may force (see :mod:`mingru_kernels.launch.switches`)."""


def cdiv(a: int, b: int) -> int:
    """``ceil(a / b)`` for positive ints."""
    return -(-int(a) // int(b))


def next_pow2(n: int) -> int:
    """The smallest power of two ``≥ n`` (1 for ``n ≤ 1``)."""
    return 1 << max(0, (int(n) - 1).bit_length())


def pow2_floor(n: int) -> int:
    """The largest power of two ``≤ max(1, n)``."""
    return 1 << (max(1, int(n)).bit_length() - 1)


def plan(
    B: int,
    T: int,
    D: int,
    *,
    n_sm: int = DEFAULT_SM_COUNT,
    strategy: str | None = None,
    block_t: int | None = None,
    block_d: int | None = None,
    chunk_len: int | None = None,
    num_warps: int | None = None,
    loop_stages: int | None = None,
    walk_tile: tuple[int, ...] | None = None,
    lookback_tile: tuple[int, int, int] | None = None,
    narrow_walk_tile: tuple[int, ...] | None = None,
    lookback_stride: int | None = None,
) -> dict[str, int | str]:
    """Choose tile sizes and the strategy for a ``(B, T, D)`` elementwise scan.

    ``T`` only sets runtime values (chunk length and count), never a compile-time constant, so
    every T of a shape class reuses one compiled kernel; sequences of at most
    ``SHORT_BLOCK_T`` steps (a decode step) are the one exception: they walk a short tile.
    An op's tuned tiles (the ``TILES`` of its launch module) come as keywords: ``walk_tile``, ``(block_t, block_d, num_warps[,
    loop_stages])`` for a long walk (more than ``WALK_MAX_TILES`` default tiles);
    ``lookback_tile``, the tile of the single-pass ``lookback`` strategy, given only by ops
    whose kernels have that mode, which then replaces ``chunked``; ``narrow_walk_tile``, a walk
    tile over few channels: where the default tile's walk has too few programs and T is long,
    the op walks anyway if this tile alone gives ``NARROW_WALK_MIN_PROGRAMS_PER_SM`` programs
    per SM. The strategy itself is chosen with the default tile.

    The other keywords force a choice (tests reach every code path on tiny shapes with them;
    a forced choice wins over the tuned tiles): ``strategy``, ``block_t``, ``block_d``,
    ``num_warps``, ``loop_stages``, ``chunk_len`` (chunked), and ``lookback_stride > 1``, which
    lets only every stride-th chunk publish its inclusive state, so that look-backs compose
    aggregates even where programs run in order.

    Returns a dict with ``strategy`` (``"walk"``, ``"chunked"`` or ``"lookback"``),
    ``block_t``, ``block_d``, ``num_warps``, ``loop_stages`` (the software pipelining depth of
    the kernels' tile loop: tile ``i + 1``'s loads are in flight while tile ``i`` is scanned;
    1: none), ``n_dblk`` (D-blocks), ``chunk_len`` (steps per chunk; ``T`` for the walk),
    ``n_chunks`` (1 for the walk) and, for the look-back, ``lookback_stride``.

    Example:
        >>> plan(16, 16384, 128)["strategy"]
        'chunked'
        >>> plan(16, 16384, 128, lookback_tile=(16, 128, 1))["strategy"]
        'lookback'
        >>> plan(8, 65536, 1536)["strategy"]
        'walk'
        >>> plan(16, 1024, 64)["strategy"]   # 16 tiles: short enough to walk
        'walk'
        >>> plan(64, 1, 512)["block_t"]   # a decode step: one short tile
        16
    """
    if min(B, T, D) < 1:
        raise ValueError(f"plan needs B, T, D >= 1; got {(B, T, D)}")
    bt = int(block_t or (SHORT_BLOCK_T if T <= SHORT_BLOCK_T else BLOCK_T))
    bd = int(block_d or min(BLOCK_D, max(4, next_pow2(D))))
    if bt & (bt - 1) or bd & (bd - 1):
        raise ValueError(f"block sizes must be powers of two; got block_t={bt}, block_d={bd}")
    nw = int(num_warps or NUM_WARPS)
    ls = int(loop_stages or 1)
    n_dblk = cdiv(D, bd)
    walk_programs = B * n_dblk
    if strategy is None:
        split_from = LOOKBACK_MIN_TILES if lookback_tile is not None else WALK_MAX_TILES
        long_enough = T > split_from * bt
        strategy = "walk"
        if long_enough and walk_programs < WALK_MIN_PROGRAMS_PER_SM * n_sm:
            # Where T must be split, the single pass reads the inputs once instead of twice;
            # the long walk stays ahead where it alone fills the GPU.
            strategy = "chunked" if lookback_tile is None else "lookback"
        if (strategy != "walk" and narrow_walk_tile is not None and T > WALK_MAX_TILES * BLOCK_T
                and B * cdiv(D, narrow_walk_tile[1]) >= NARROW_WALK_MIN_PROGRAMS_PER_SM * n_sm):
            strategy, walk_tile = "walk", narrow_walk_tile
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}; got {strategy!r}")
    if strategy == "lookback" and lookback_tile is None:
        raise ValueError("strategy 'lookback' needs kernels with a LOOKBACK mode: the op's "
                         "TILES name a lookback_tile when they have one")
    if strategy == "chunked" and lookback_tile is not None:
        raise ValueError("strategy 'chunked' needs kernels with SUMMARY and APPLY modes: ops "
                         "whose TILES name a lookback_tile split T with the look-back instead")
    if strategy == "lookback":
        tuned = lookback_tile
    elif strategy == "walk" and T > WALK_MAX_TILES * BLOCK_T:
        tuned = walk_tile
    else:
        tuned = None
    if tuned is not None:
        bt = int(block_t or tuned[0])
        bd = int(block_d or tuned[1])
        nw = int(num_warps or tuned[2])
        ls = int(loop_stages or (tuned[3] if len(tuned) > 3 else 1))
        n_dblk = cdiv(D, bd)
        walk_programs = B * n_dblk
    if ls < 1:
        raise ValueError(f"loop_stages must be >= 1; got {ls}")
    common = dict(block_t=bt, block_d=bd, num_warps=nw, loop_stages=ls, n_dblk=n_dblk)
    if strategy == "walk":
        return dict(strategy="walk", **common, chunk_len=T, n_chunks=1)
    if strategy == "lookback":
        if chunk_len is not None and int(chunk_len) != bt:
            raise ValueError(f"the lookback strategy scans one tile per chunk: chunk_len must "
                             f"equal block_t={bt}; got {chunk_len}")
        stride = int(lookback_stride or 1)
        if stride < 1:
            raise ValueError(f"lookback_stride must be >= 1; got {lookback_stride}")
        return dict(strategy="lookback", **common, chunk_len=bt, n_chunks=cdiv(T, bt),
                    lookback_stride=stride)
    if chunk_len is None:
        want = cdiv(CHUNKED_PROGRAMS_PER_SM * n_sm, walk_programs)
        chunk_len = cdiv(cdiv(T, want), bt) * bt
    chunk_len = int(chunk_len)
    if chunk_len < 1 or chunk_len % bt:
        raise ValueError(f"chunk_len must be a positive multiple of block_t={bt}; got {chunk_len}")
    return dict(strategy="chunked", **common, chunk_len=chunk_len, n_chunks=cdiv(T, chunk_len))


def grid(cfg: Mapping[str, Any], B: int) -> tuple[int]:
    """Grid of the scan kernels (walk, look-back, chunked phases 1 and 3): one program per
    (b, chunk, D-block)."""
    return (B * int(cfg["n_chunks"]) * int(cfg["n_dblk"]),)


def carry_grid(cfg: Mapping[str, Any], B: int) -> tuple[int]:
    """Grid of the carry pass (phase 2): one program per (b, D-block)."""
    return (B * int(cfg["n_dblk"]),)


def size_kwargs(cfg: Mapping[str, Any], T: int, D: int) -> dict[str, int]:
    """The runtime size arguments of the scan kernels by parameter name: ``T``, ``D``,
    ``chunk_len``, ``n_chunks`` and ``n_dblk``, in the kernels' order.

    Example:
        >>> size_kwargs(plan(2, 100, 8), 100, 8)
        {'T': 100, 'D': 8, 'chunk_len': 100, 'n_chunks': 1, 'n_dblk': 1}
    """
    return dict(T=T, D=D, chunk_len=int(cfg["chunk_len"]), n_chunks=int(cfg["n_chunks"]),
                n_dblk=int(cfg["n_dblk"]))


def dims(cfg: Mapping[str, Any], T: int, D: int) -> tuple[int, int, int, int, int]:
    """The runtime size arguments of the scan kernels in order, ``(T, D, chunk_len, n_chunks,
    n_dblk)`` (for launchers that pass them by position): :func:`size_kwargs`' values."""
    return tuple(size_kwargs(cfg, T, D).values())


def lookback_shapes(cfg: Mapping[str, Any], B: int, D: int) -> tuple[tuple[int, ...], int]:
    """The look-back strategy's scratch sizes: the fp32 chunk values ``(B, n_chunks, 3, D)``
    and the number of int32 status words (the stride word, one ticket counter per lane, one
    status word per program; layout in :func:`mingru_kernels._scan_common.lookback_carry`)."""
    n_chunks, n_lanes = int(cfg["n_chunks"]), B * int(cfg["n_dblk"])
    return (B, n_chunks, 3, D), 1 + n_lanes * (1 + n_chunks)


def launch_kwargs(cfg: Mapping[str, Any]) -> dict[str, int]:
    """Compile-time block sizes, the tile loop's pipelining depth and warps for the scan
    kernels."""
    return dict(BLOCK_T=int(cfg["block_t"]), BLOCK_D=int(cfg["block_d"]),
                LOOP_STAGES=int(cfg.get("loop_stages", 1)), num_warps=int(cfg["num_warps"]))


def carry_kwargs(cfg: Mapping[str, Any]) -> dict[str, int]:
    """Compile-time sizes for the carry pass (phase 2)."""
    return dict(BLOCK_N=BLOCK_N, BLOCK_D=int(cfg["block_d"]), num_warps=int(cfg["num_warps"]))
