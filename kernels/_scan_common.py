"""Kernel pieces the elementwise scans share: combine functions, tile helpers, the carry pass.

Framework-free: imports ``triton`` only. Used by :mod:`mingru_kernels.linear_scan`,
:mod:`mingru_kernels.linear_recurrence`, :mod:`mingru_kernels.parallel_scan_log` and
:mod:`mingru_kernels.mingru_cell`.

Scan algebra. Step t of a recurrence ``h_t = a_t h_{t-1} + b_t`` is the map
``h ↦ a_t h + b_t``; ``combine(first, second)`` is "apply ``first``, then ``second``". An
inclusive scan of the maps along time gives, at step t, the map from the start to t: its ``a``
part is the running product, its ``b`` part the zero-start solution. The log-space scan holds
each map as ``(log₂ a, log₂ b)`` so products never underflow.

Tiles are ``[BLOCK_T, BLOCK_D]`` with D innermost (coalesced loads), scanned along axis 0.
Backward (adjoint) scans run in reverse time; the kernels load their tiles with reversed row
indices and scan forward, so ``associative_scan(reverse=True)`` is never needed.

The launch strategies (walk, look-back, chunked) and the planner are pure Python in
:mod:`mingru_kernels.launch._elementwise`.
"""

from __future__ import annotations

import triton
import triton.language as tl

from mingru_kernels import _constants as constants

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
def max_plus(A1, M1, A2, M2):
    """:func:`log_pair` in the max-plus (tropical) semiring: ``(A1 + A2, max(A2 + M1, M2))``.

    Scanned over ``(log₂ a, log₂ b)`` it gives the log of the LARGEST term of the zero-start
    solution, within ``log₂(t + 1)`` of ``log₂ h_t`` — a scale for exact linear-space scans,
    found with adds and compares only (no special functions)."""
    return A1 + A2, tl.maximum(A2 + M1, M2)


@triton.jit
def log_pair(A1, L1, A2, L2):
    """:func:`mul_add` on ``(log₂ a, log₂ b)`` pairs of positive maps."""
    return A1 + A2, logaddexp2(A2 + L1, L2)


@triton.jit
def take_row(x, rows, r):
    """Row ``r`` of a ``[BLOCK_T, BLOCK_D]`` tile as a ``[BLOCK_D]`` vector (exact: adds zeros)."""
    return tl.sum(tl.where(rows[:, None] == r, x, 0.0), axis=0)


# ----------------------------------------------------------------------------- look-back


@triton.jit
def lookback_ticket(status_ptr, n_chunks, REVERSE: tl.constexpr):
    """The (chunk, lane) this program scans in the single-pass strategy. A lane is one
    (batch row, D-block) pair, ``lane = b · n_dblk + d``, taken from ``program_id``; the chunk
    comes from the lane's ticket counter (``status_ptr[1 + lane]``) rather than from
    ``program_id``: tickets go out in the order programs start, so every chunk a program waits
    for belongs to a program that has already started — the look-back cannot deadlock whatever
    order the hardware runs the grid in. One counter per lane, not one for the grid: a single
    counter would serialise every program on one address and bound the whole kernel.
    ``REVERSE``: the first chunk in scan order is the last in time (adjoint scans)."""
    n_lanes = tl.num_programs(0) // n_chunks
    lane = tl.program_id(0) % n_lanes
    c = tl.atomic_add(status_ptr + 1 + lane, 1, sem="relaxed")
    if REVERSE:
        c = n_chunks - 1 - c
    return c, lane


@triton.jit
def program_coords(status_ptr, n_chunks, n_dblk, MODE: tl.constexpr, REVERSE: tl.constexpr):
    """``(chunk, batch row, D-block, lane)`` of this program in a scan kernel's grid
    ``B × chunks × D-blocks``: from ``program_id`` (the walk), or from the lane's ticket
    counter in the look-back strategy (:func:`lookback_ticket`)."""
    if MODE == constants.LOOKBACK:
        pid_c, lane = lookback_ticket(status_ptr, n_chunks, REVERSE)
        pid_d = lane % n_dblk
        pid_b = lane // n_dblk
    else:
        pid = tl.program_id(0)
        pid_d = pid % n_dblk
        rest = pid // n_dblk
        pid_c = rest % n_chunks
        pid_b = rest // n_chunks
        lane = pid_b * n_dblk + pid_d
    return pid_c, pid_b, pid_d, lane


@triton.jit
def _publish(status_ptr, word, slot, x, y, cols, col_ok, D, WHICH: tl.constexpr):
    """Write a chunk's aggregate map ``(x, y)`` or its inclusive state ``x``, then its status
    word: the barrier orders every thread's stores before the one release that makes them
    visible to the programs looking back."""
    if WHICH == constants.AGGREGATE:
        tl.store(slot + cols, x, mask=col_ok)
        tl.store(slot + D + cols, y, mask=col_ok)
    else:
        tl.store(slot + 2 * D + cols, x, mask=col_ok)
    tl.debug_barrier()
    tl.atomic_xchg(status_ptr + word, WHICH, sem="release", scope="gpu")


@triton.jit
def _then(first_a, first_z, then_a, then_z, LOG: tl.constexpr):
    """Compose two chunk maps (``first``, then ``then``): :func:`mul_add`, or
    :func:`log_pair` on ``(log₂ a, log₂ z)`` maps (``LOG``)."""
    if LOG:
        return log_pair(first_a, first_z, then_a, then_z)
    else:
        return mul_add(first_a, first_z, then_a, then_z)


@triton.jit
def _apply(a, z, state, LOG: tl.constexpr):
    """A chunk map applied to a state: ``a·state + z``, or its log₂ form (``LOG``)."""
    if LOG:
        return logaddexp2(a + state, z)
    else:
        return a * state + z


@triton.jit
def lookback_carry(status_ptr, vals_ptr, c, lane, row, n_chunks, A, Z, init, cols, col_ok, D,
                   REVERSE: tl.constexpr, LOG: tl.constexpr = False):
    """The single-pass (decoupled look-back) scan across chunks: the state entering chunk
    ``c`` of ``lane``, given the chunk's own map ``h ↦ A h + Z`` (``[BLOCK_D]`` fp32, the last
    row of its tile scan) and ``init``, the state before the first chunk in scan order.
    ``LOG``: maps, states and ``init`` are base-2 logs (``(log₂ A, log₂ Z)``, ``log₂ h``), as
    in the log-space scan; they compose with :func:`log_pair`.

    Buffers, zeroed before the launch: ``status_ptr`` int32 ``(1 + n_lanes + n_chunks ·
    n_lanes,)``: the stride of chunks that publish their inclusive state (0 means every
    chunk; tests set it larger, so that look-backs compose aggregates even in the
    interpreter, which runs programs one by one), the lanes' ticket counters, then one status
    word per chunk and lane, chunk-major; ``vals_ptr`` fp32 ``(B, n_chunks, 3, D)``: per
    batch ``row`` and chunk the aggregate ``(A, Z)`` and the inclusive state (each D-block
    writes its own ``cols``).

    The chunk publishes its aggregate, then walks back through its predecessors in scan
    order, composing their aggregates until it meets one that has published its inclusive
    state (the first chunk in scan order does so at once, from ``init``); then it publishes
    its own. No program waits on a chunk after it, so the ticket order of
    :func:`lookback_ticket` is all it needs to progress; most look-backs stop at the nearest
    predecessor, whose inclusive state is usually there already, so it reads one predecessor
    at a time (a window of several would cost registers and resident programs)."""
    n_lanes = tl.num_programs(0) // n_chunks
    if REVERSE:
        step = -1
        is_first = c == n_chunks - 1
        order = n_chunks - 1 - c
    else:
        step = 1
        is_first = c == 0
        order = c
    if LOG:
        one = 0.0
        zero = float("-inf")
    else:
        one = 1.0
        zero = 0.0
    base = vals_ptr + row.to(tl.int64) * n_chunks * 3 * D
    words = status_ptr + 1 + n_lanes  # after the header
    word = c * n_lanes + lane
    carry = init
    if not is_first:
        _publish(words, word, base + c * 3 * D, A, Z, cols, col_ok, D, constants.AGGREGATE)
        # acc: the map from the state after chunk j to the state entering c.
        acc_a = tl.full(A.shape, one, tl.float32)
        acc_z = tl.full(A.shape, zero, tl.float32)
        j = c - step
        searching = True
        while searching:
            w = words + j * n_lanes + lane
            status = tl.atomic_add(w, 0, sem="acquire", scope="gpu")
            while status == constants.NOTHING:
                status = tl.atomic_add(w, 0, sem="acquire", scope="gpu")
            prev = base + j * 3 * D
            if status == constants.INCLUSIVE:
                s = tl.load(prev + 2 * D + cols, mask=col_ok, other=zero, cache_modifier=".cg")
                carry = _apply(acc_a, acc_z, s, LOG)
                searching = False
            else:
                pa = tl.load(prev + cols, mask=col_ok, other=one, cache_modifier=".cg")
                pz = tl.load(prev + D + cols, mask=col_ok, other=zero, cache_modifier=".cg")
                acc_a, acc_z = _then(pa, pz, acc_a, acc_z, LOG)
                j = j - step
    every = tl.maximum(tl.load(status_ptr), 1)
    if order % every == 0:
        _publish(words, word, base + c * 3 * D, _apply(A, Z, carry, LOG), Z, cols, col_ok, D,
                 constants.INCLUSIVE)
    return carry


@triton.jit
def carried_scan(a, b, carry, status_ptr, vals_ptr, c, lane, row, n_chunks, cols, col_ok, D,
                 MODE: tl.constexpr, REVERSE: tl.constexpr, BLOCK_T: tl.constexpr):
    """``(H, carry-in)``: the tile scan of ``h ↦ a h + b`` (``[BLOCK_T, BLOCK_D]``, along
    rows) from the state carried into the tile. Walk: ``carry`` enters the first row's
    input, so the scan yields the states directly. LOOKBACK (one tile per chunk): the
    tile is scanned from zero, its carry-in comes from :func:`lookback_carry` (``carry`` is
    then the state before the first chunk) and enters through the running product,
    ``H = P·carry + H``."""
    rows = tl.arange(0, BLOCK_T)
    if MODE == constants.LOOKBACK:
        P, H = tl.associative_scan((a, b), 0, mul_add)
        carry = lookback_carry(status_ptr, vals_ptr, c, lane, row, n_chunks,
                               take_row(P, rows, BLOCK_T - 1), take_row(H, rows, BLOCK_T - 1),
                               carry, cols, col_ok, D, REVERSE)
        H = P * carry[None, :] + H
    else:
        b = tl.where((rows == 0)[:, None], a * carry[None, :] + b, b)
        _, H = tl.associative_scan((a, b), 0, mul_add)
    return H, carry


# ----------------------------------------------------------------------------- carry pass


@triton.jit
def packed_rows(seq_ptr, t, valid):
    """Packed sequences: the sequence index (int32) of each step ``t`` of a tile and whether
    it is its sequence's first step, from the per-step index ``seq_ptr (T,)`` (rows outside
    ``valid`` are never first)."""
    sid = tl.load(seq_ptr + t, mask=valid, other=0)
    prev = tl.load(seq_ptr + t - 1, mask=valid & (t >= 1), other=-1)
    return sid, valid & (sid != prev)


@triton.jit
def restart_rows(a, b, h0_ptr, sid, start, cols, col_ok, D, HAS_H0: tl.constexpr):
    """Restart each sequence at its first step: the map ``h ↦ a h_0[sid] + b`` (transition 0,
    input ``b + a h_0[sid]``; ``h_0 = 0`` without ``HAS_H0``), so one scan over the packed row
    solves every sequence."""
    opens = start[:, None]
    if HAS_H0:
        h0 = tl.load(h0_ptr + sid[:, None] * D + cols[None, :], mask=opens & col_ok[None, :],
                     other=0.0).to(tl.float32)
        b = tl.where(opens, a * h0 + b, b)
    return tl.where(opens, 0.0, a), b


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
    """Phase 2 of the chunked linear scan: exclusive scan of the chunk maps.

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
