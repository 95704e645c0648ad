"""The kernels' compile-time constants, read in kernel bodies as attributes of this module
(``constants.APPLY``), never imported by name.

Why a module of their own. Triton records every global a ``@triton.jit`` function (or any jit
function it calls) reads by name, and on every launch through ``JITFunction.run`` compares each
recorded value with the global's current value — one ``tl.constexpr`` comparison per global
per launch, host time on every launch of a kernel that reads several. Attributes of a module
are not recorded (Triton treats modules as namespaces), so these constants cost nothing per
launch. They never change at run time.

Framework-free: imports ``triton`` only (the plain-int modes come from
:mod:`mingru_kernels.launch._elementwise`, the launchers' side).
"""

from __future__ import annotations

import triton.language as tl

from mingru_kernels.launch import _elementwise

__all__ = ["AGGREGATE", "APPLY", "FAST_GROWTH", "FAST_RANGE", "FAST_TOP", "INCLUSIVE", "LOG2E",
           "LOOKBACK", "NOTHING", "SUMMARY", "WALK"]

# The elementwise scans' kernel MODE values (see mingru_kernels.launch._elementwise).
WALK = tl.constexpr(_elementwise.WALK)
SUMMARY = tl.constexpr(_elementwise.SUMMARY)
APPLY = tl.constexpr(_elementwise.APPLY)
LOOKBACK = tl.constexpr(_elementwise.LOOKBACK)

# Chunk status words of the single-pass (look-back) strategy: nothing yet, the chunk's own map
# (its aggregate), or the state after it (its inclusive prefix).
NOTHING = tl.constexpr(0)
AGGREGATE = tl.constexpr(1)
INCLUSIVE = tl.constexpr(2)

LOG2E = tl.constexpr(1.4426950408889634)
"""``log₂ e``: ``e^x = 2^{x log₂ e}`` (the log-space kernels work in base 2)."""

# The log-space scan's one-scale fast path (mingru_kernels.parallel_scan_log): a tile may take
# one scale per column when its states stay within FAST_RANGE octaves below the scale (the
# fp32 exponent reaches 2^-126; 2^-90 leaves every flushed term < 2^-36 of a state, summed over
# at most 2^7 rows < fp32 rounding) and its coefficients grow the states by at most
# 2^FAST_GROWTH (no overflow); the scale itself stays below 2^FAST_TOP so 2^S is finite.
FAST_RANGE = tl.constexpr(90.0)
FAST_GROWTH = tl.constexpr(60.0)
FAST_TOP = tl.constexpr(120.0)
