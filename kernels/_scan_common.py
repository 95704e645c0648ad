"""Pieces the elementwise scans share: combine functions, tile helpers, the carry pass, and the
pure-Python launch planner.

Framework-free: imports ``triton`` only. Used by :mod:`mingru_kernels.linear_scan` and
:mod:`mingru_kernels.log_scan`.

Scan algebra. Step t of a recurrence ``h_t = a_t h_{t-1} + b_t`` is the map
``h ↦ a_t h + b_t``; ``combine(first, second)`` is "apply ``first``, then ``second``". An
inclusive scan of the maps along time gives, at step t, the map from the start to t: its ``a``
part is the running product, its ``b`` part the zero-start solution. The log-space scan holds
each map as ``(log₂ a, log₂ b)`` so products never underflow.

Tiles are ``[BLOCK_T, BLOCK_D]`` with D innermost (coalesced loads), scanned along axis 0.
Backward (adjoint) scans run in reverse time; the kernels load their tiles with reversed row
indices and scan forward, so ``associative_scan(reverse=True)`` is never needed.

Two launch strategies (see :func:`plan`):

* ``walk``: grid ``B × D-blocks``; each program walks the whole sequence tile by tile,
  carrying the state in registers. Reads inputs once, writes outputs once.
* ``chunked``: for small ``B·D`` with long T. Phase 1 (grid ``B × chunks × D-blocks``) reduces
  each chunk to its map; phase 2 (:func:`linear_carry_kernel` or the log twin; grid
  ``B × D-blocks``) scans the chunk maps into each chunk's carry-in; phase 3 (same grid as
  phase 1) rescans each chunk from its carry-in and writes the outputs. Inputs are read twice.
"""

from __future__ import annotations

import triton
import triton.language as tl

# Kernel MODE values (pass as the MODE constexpr): which of three roles a scan kernel plays.
WALK = 0  # carry starts at the sequence's initial state; write outputs
SUMMARY = 1  # phase 1: reduce each chunk to its map; write the chunk summary only
APPLY = 2  # phase 3: carry starts at the chunk's carry-in (from phase 2); write outputs
# The same values as constexpr globals, the only globals a kernel body may read.
K_WALK = tl.constexpr(WALK)
K_SUMMARY = tl.constexpr(SUMMARY)
K_APPLY = tl.constexpr(APPLY)

# log₂ e: the log kernels work in base 2 (exp2 and log2 are single hardware ops).
LOG2E = tl.constexpr(1.4426950408889634)

# Default tile: 64 steps × 32 channels (128-byte fp32 rows), 4 warps.
BLOCK_T = 64
BLOCK_D = 32
BLOCK_N = 16  # chunk summaries per tile in the carry pass
NUM_WARPS = 4
# The walk keeps the reads at one pass; pick it when it alone yields this many programs per SM.
WALK_MIN_PROGRAMS_PER_SM = 2
# The chunked strategy aims at this many programs per SM.
CHUNKED_PROGRAMS_PER_SM = 4
# Sequences of at most this many tiles always walk. The chunked strategy costs two more kernel
# launches and four scratch buffers per direction: tens of microseconds of host time each on an
# H200 host (scripts/profile_overhead.py), more than a walk of a few short tiles takes on the
# GPU, so below this length more parallelism in T does not pay for itself.
WALK_MAX_TILES = 16


# ----------------------------------------------------------------------------- combines


@triton.jit
def mul_add(a1, b1, a2, b2):
    """Compose ``h ↦ a1 h + b1`` then ``h ↦ a2 h + b2``."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def mul_add2(a1, x1, y1, a2, x2, y2):
    """:func:`mul_add` for two states sharing one coefficient."""
    return a1 * a2, a2 * x1 + x2, a2 * y1 + y2


@triton.jit
def logaddexp2(x, y):
    """``log₂(2^x + 2^y)``, with ``(-inf, -inf) → -inf`` (``h_0 = 0`` is a normal input)."""
    hi = tl.maximum(x, y)
    lo = tl.minimum(x, y)
    # Shifting by -inf would give -inf - (-inf) = NaN; shifting by 0 keeps 2^lo = 0.
    hi_safe = tl.where(hi == float("-inf"), 0.0, hi)
    return hi + tl.log2(1.0 + tl.exp2(lo - hi_safe))


@triton.jit
def log_pair(A1, L1, A2, L2):
    """:func:`mul_add` on ``(log₂ a, log₂ b)`` pairs of positive maps."""
    return A1 + A2, logaddexp2(A2 + L1, L2)


@triton.jit
def take_row(x, rows, r):
    """Row ``r`` of a ``[BLOCK_T, BLOCK_D]`` tile as a ``[BLOCK_D]`` vector (exact: adds zeros)."""
    return tl.sum(tl.where(rows[:, None] == r, x, 0.0), axis=0)


# ----------------------------------------------------------------------------- carry pass


@triton.jit(do_not_specialize=["n_chunks"])
def linear_carry_kernel(
    sa_ptr, sx_ptr, sy_ptr,  # (B, N, D) fp32 chunk maps: coefficient, state(s)
    ca_ptr, cx_ptr, cy_ptr,  # (B, N, D) fp32 out: the carry-in of each chunk
    n_chunks, D, n_dblk,
    REVERSE: tl.constexpr,  # chunks compose from the last to the first (adjoint scans)
    STORE_A: tl.constexpr,  # also write the coefficient carry (the forward product P)
    HAS_Y: tl.constexpr,  # a second state shares the coefficient
    BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr,
):
    """Phase 2 of the chunked linear scans: exclusive scan of the chunk maps.

    Chunk c's carry-in is the composition of all chunks before it in scan order (identity for
    the first). One program per (batch, D-block) walks the chunk axis in tiles of
    ``BLOCK_N``.
    """
    pid = tl.program_id(0)
    pid_d = pid % n_dblk
    pid_b = pid // n_dblk
    cols = pid_d * BLOCK_D + tl.arange(0, BLOCK_D)
    col_ok = cols < D
    rows = tl.arange(0, BLOCK_N)
    base = pid_b.to(tl.int64) * n_chunks * D

    # The first chunk in scan order starts from the identity map.
    if REVERSE:
        first = n_chunks - 1
    else:
        first = 0
    ones = tl.full([BLOCK_D], 1.0, tl.float32)
    zeros = tl.zeros([BLOCK_D], tl.float32)
    tl.store(cx_ptr + base + first * D + cols, zeros, mask=col_ok)
    if HAS_Y:
        tl.store(cy_ptr + base + first * D + cols, zeros, mask=col_ok)
    if STORE_A:
        tl.store(ca_ptr + base + first * D + cols, ones, mask=col_ok)

    ca = ones
    cx = zeros
    cy = zeros
    for k in range(0, tl.cdiv(n_chunks, BLOCK_N)):
        if REVERSE:
            c = n_chunks - 1 - k * BLOCK_N - rows
            dst = c - 1
        else:
            c = k * BLOCK_N + rows
            dst = c + 1
        ok = (c >= 0) & (c < n_chunks)
        m = ok[:, None] & col_ok[None, :]
        off = base + c[:, None] * D + cols[None, :]
        a = tl.load(sa_ptr + off, mask=m, other=1.0)
        x = tl.load(sx_ptr + off, mask=m, other=0.0)
        first_row = rows[:, None] == 0
        x = tl.where(first_row, a * cx[None, :] + x, x)
        if HAS_Y:
            y = tl.load(sy_ptr + off, mask=m, other=0.0)
            y = tl.where(first_row, a * cy[None, :] + y, y)
        if STORE_A:
            a = tl.where(first_row, a * ca[None, :], a)
        if HAS_Y:
            a, x, y = tl.associative_scan((a, x, y), 0, mul_add2)
        else:
            a, x = tl.associative_scan((a, x), 0, mul_add)
        # The inclusive result at chunk c is the carry-in of the next chunk in scan order.
        dst_m = (ok & (dst >= 0) & (dst < n_chunks))[:, None] & col_ok[None, :]
        dst_off = base + dst[:, None] * D + cols[None, :]
        tl.store(cx_ptr + dst_off, x, mask=dst_m)
        if HAS_Y:
            tl.store(cy_ptr + dst_off, y, mask=dst_m)
            cy = take_row(y, rows, BLOCK_N - 1)
        if STORE_A:
            tl.store(ca_ptr + dst_off, a, mask=dst_m)
            ca = take_row(a, rows, BLOCK_N - 1)
        cx = take_row(x, rows, BLOCK_N - 1)


# ----------------------------------------------------------------------------- launch plan


def _next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def plan(
    B: int,
    T: int,
    D: int,
    *,
    n_sm: int = 132,
    strategy: str | None = None,
    block_t: int | None = None,
    block_d: int | None = None,
    chunk_len: int | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> dict[str, int | str]:
    """Choose tile sizes and the strategy for a ``(B, T, D)`` elementwise scan.

    Pure Python, shared by the PyTorch and JAX launchers. Keyword overrides exist for tests
    and tuning sweeps. ``T`` only sets runtime values (chunk length and count), never a
    compile-time constant, so every T of a shape class reuses one compiled kernel.

    Returns a dict with ``strategy`` (``"walk"`` or ``"chunked"``), ``block_t``, ``block_d``,
    ``num_warps``, ``num_stages`` (0: Triton's default), ``n_dblk`` (D-blocks), ``chunk_len``
    (steps per chunk; ``T`` for the walk) and ``n_chunks`` (1 for the walk).

    Example:
        >>> plan(16, 16384, 128)["strategy"]
        'chunked'
        >>> plan(8, 65536, 1536)["strategy"]
        'walk'
        >>> plan(16, 1024, 64)["strategy"]   # 16 tiles: short enough to walk
        'walk'
    """
    if min(B, T, D) < 1:
        raise ValueError(f"plan needs B, T, D >= 1; got {(B, T, D)}")
    bt = int(block_t or BLOCK_T)
    bd = int(block_d or min(BLOCK_D, max(4, _next_pow2(D))))
    if bt & (bt - 1) or bd & (bd - 1):
        raise ValueError(f"block sizes must be powers of two; got block_t={bt}, block_d={bd}")
    nw = int(num_warps or NUM_WARPS)
    ns = int(num_stages or 0)
    n_dblk = triton.cdiv(D, bd)
    walk_programs = B * n_dblk
    if strategy is None:
        long_enough = T > WALK_MAX_TILES * bt
        strategy = (
            "chunked"
            if long_enough and walk_programs < WALK_MIN_PROGRAMS_PER_SM * n_sm
            else "walk"
        )
    if strategy not in ("walk", "chunked"):
        raise ValueError(f"strategy must be 'walk' or 'chunked'; got {strategy!r}")
    if strategy == "walk":
        return dict(strategy="walk", block_t=bt, block_d=bd, num_warps=nw, num_stages=ns,
                    n_dblk=n_dblk, chunk_len=T, n_chunks=1)
    if chunk_len is None:
        want = triton.cdiv(CHUNKED_PROGRAMS_PER_SM * n_sm, walk_programs)
        chunk_len = triton.cdiv(triton.cdiv(T, want), bt) * bt
    chunk_len = int(chunk_len)
    if chunk_len < 1 or chunk_len % bt:
        raise ValueError(f"chunk_len must be a positive multiple of block_t={bt}; got {chunk_len}")
    return dict(strategy="chunked", block_t=bt, block_d=bd, num_warps=nw, num_stages=ns,
                n_dblk=n_dblk, chunk_len=chunk_len, n_chunks=triton.cdiv(T, chunk_len))


def grid(cfg: dict[str, int | str], B: int) -> tuple[int]:
    """Grid of the scan kernels (walk, phase 1, phase 3): one program per (b, chunk, D-block)."""
    return (B * int(cfg["n_chunks"]) * int(cfg["n_dblk"]),)


def carry_grid(cfg: dict[str, int | str], B: int) -> tuple[int]:
    """Grid of the carry pass (phase 2): one program per (b, D-block)."""
    return (B * int(cfg["n_dblk"]),)
