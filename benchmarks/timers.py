"""One timer per framework, the host-time timer and the paired A/B rounds.

* PyTorch: on CUDA ``triton.testing.do_bench`` (CUDA events, L2 flushed between calls, median);
  on CPU ``time.perf_counter`` around each call (median of ``repeats`` after ``warmup``).
* JAX: wall clock around ``jax.block_until_ready`` (median), the only timer JAX offers that
  every backend shares; PyTorch rows compared with JAX rows use :func:`wall` with a device sync.
* Host time: a batch of calls issued back to back, one sync at the end (µs per call, with the
  time to issue them before the sync).
* :func:`paired`: A/B comparisons inside one process, the order alternated every round, the
  ratio the median of per-round ratios (hosts drift by a third between processes).

Imports no framework at module import.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["host", "jax_time", "paired", "paired_ratio", "torch_time", "wall"]


def wall(call: Callable[[], Any], finish: Callable[[Any], Any], warmup: int,
         repeats: int) -> float:
    """Median milliseconds of ``finish(call())`` after ``warmup`` untimed calls."""
    for _ in range(max(1, warmup)):
        finish(call())
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        finish(call())
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def torch_sync(device: str) -> Callable[[Any], None]:
    """What waits for a PyTorch call's device work: ``torch.cuda.synchronize`` on CUDA."""
    if device != "cuda":
        return lambda _out: None
    import torch

    return lambda _out: torch.cuda.synchronize()


def torch_time(call: Callable[[], Any], device: str, warmup: int, repeats: int,
               rep_ms: int = 100) -> float:
    """Median milliseconds of a PyTorch call: CUDA events (``do_bench``) or wall clock."""
    if device == "cuda":
        from triton.testing import do_bench

        return float(do_bench(call, warmup=25, rep=rep_ms, return_mode="median"))
    return wall(call, torch_sync(device), warmup, repeats)


def jax_time(call: Callable[[], Any], warmup: int, repeats: int) -> float:
    """Median wall-clock milliseconds of a JAX call, each waited for with ``block_until_ready``."""
    import jax

    return wall(call, jax.block_until_ready, warmup, repeats)


def host(call: Callable[[], Any], finish: Callable[[Any], Any], calls: int,
         batches: int) -> tuple[float, float]:
    """``(wall, enqueue)`` milliseconds per call, medians over ``batches`` of ``calls``
    back-to-back calls: wall includes the one ``finish`` (device sync) at the end of each batch,
    enqueue stops before it."""
    finish(call())
    walls, issued = [], []
    for _ in range(max(1, batches)):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = call()
        t1 = time.perf_counter()
        finish(out)
        walls.append((time.perf_counter() - t0) * 1e3 / calls)
        issued.append((t1 - t0) * 1e3 / calls)
    return statistics.median(walls), statistics.median(issued)


def paired(measures: Mapping[str, Callable[[], float]], rounds: int) -> dict[str, list[float]]:
    """Every measure once per round, ``rounds`` times, the order reversed every other round so
    drift inside the process falls on all alike: ``{name: one value per round}``.

    Example:
        >>> seen = []
        >>> paired({"a": lambda: seen.append("a") or 1.0, "b": lambda: seen.append("b") or 2.0}, 2)
        {'a': [1.0, 1.0], 'b': [2.0, 2.0]}
        >>> seen
        ['a', 'b', 'b', 'a']
    """
    order = list(measures)
    times: dict[str, list[float]] = {name: [] for name in order}
    for r in range(max(1, rounds)):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(measures[name]())
    return times


def paired_ratio(times: list[float], base: list[float]) -> float:
    """The median of per-round ratios ``times[r] / base[r]`` (rounds of :func:`paired`)."""
    return statistics.median(t / b for t, b in zip(times, base, strict=True))
