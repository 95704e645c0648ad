"""What every ``mingru bench`` group shares: the timers, peak memory, the fwd / fwd+bwd
callables, backend selection for the model-level groups, speed-up ratios and the markdown
pivot tables.

:mod:`mingru_cli.bench` (the harness of the kernel groups) and the model-level groups
(:mod:`mingru_cli.bench_mixers`, :mod:`mingru_cli.bench_train`, :mod:`mingru_cli.bench_host`)
import from here, never from each other, so the import graph stays acyclic.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import torch

__all__ = [
    "add_speedups", "backend_status", "error_text", "fmt_ms", "fmt_ratio", "fmt_s",
    "free_memory", "fwd", "fwd_bwd", "log", "max_abs_diff", "notes_lines", "paired_ratio",
    "paired_rounds", "peak_mb", "pivot_table", "select_shapes", "sync", "time_call", "time_loop",
]


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


LOOP_CALLS = 20
"""Calls per round of the ``loop`` timer (issued back to back, then one sync)."""


T = TypeVar("T")


def time_loop(fn: Callable[[], Any], finish: Callable[[Any], None], warmup: int,
              repeats: int, calls: int = LOOP_CALLS) -> float:
    """Median over ``repeats`` rounds of the wall-clock milliseconds per call of ``calls``
    calls of ``fn()`` issued back to back, ``finish(last result)`` waiting for all of them
    (a device sync; JAX's ``block_until_ready``, since its calls run in order)."""
    for _ in range(max(1, warmup)):
        out = fn()
    finish(out)
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = fn()
        finish(out)
        times.append((time.perf_counter() - t0) * 1e3 / calls)
    return statistics.median(times)


def time_call(fn: Callable[[], Any], device: str, warmup: int, repeats: int,
              wall: bool = False, loop: bool = False) -> float:
    """Median milliseconds of ``fn()`` after ``warmup`` calls.

    On CUDA this uses ``triton.testing.do_bench`` (median mode; it also clears the L2 cache
    between calls) or CUDA events; ``wall=True`` forces ``perf_counter`` with a device sync
    (used for JAX, whose calls ``fn`` itself blocks on). ``loop=True``: :func:`time_loop`
    with a device sync per round.
    """
    if loop:
        return time_loop(fn, lambda _out: sync(device), warmup, repeats)
    if device == "cuda" and not wall:
        try:
            from triton.testing import do_bench
        except ImportError:
            do_bench = None
        if do_bench is not None:
            return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))
        for _ in range(max(1, warmup)):
            fn()
        times = []
        for _ in range(max(1, repeats)):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        return statistics.median(times)
    for _ in range(max(1, warmup)):
        fn()
    sync(device)
    times = []
    for _ in range(max(1, repeats)):
        t0 = time.perf_counter()
        fn()
        sync(device)
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def paired_rounds(cases: Mapping[str, T], rounds: int,
                  measure: Callable[[T], float]) -> dict[str, list[float]]:
    """``measure(case)`` of every case, ``rounds`` times, the order reversed every other
    round, so that drift inside one process falls on all of them alike: ``{name: one value
    per round}``. Hosts drift by a third between processes; A/B comparisons pair within one.

    Example:
        >>> paired_rounds({"a": 1, "b": 2}, 2, lambda case: 10 * case)
        {'a': [10, 10], 'b': [20, 20]}
    """
    order = list(cases)
    times: dict[str, list[float]] = {name: [] for name in order}
    for r in range(rounds):
        for name in order if r % 2 == 0 else order[::-1]:
            times[name].append(measure(cases[name]))
    return times


def paired_ratio(times: Sequence[float], base: Sequence[float]) -> float:
    """The median of per-round ratios ``times[r] / base[r]`` (rounds of :func:`paired_rounds`)."""
    return statistics.median(t / b for t, b in zip(times, base, strict=True))


def peak_mb(call: Callable[[], Any]) -> float | None:
    """Peak CUDA memory of one call above what was allocated before it, in MB (``None``
    without CUDA)."""
    if not torch.cuda.is_available():
        return None
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    call()
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 1e6


def _outputs(out: Any) -> Sequence[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(o for o in out if isinstance(o, torch.Tensor))


def fwd_bwd(run: Callable[..., Any], xs: Sequence[torch.Tensor],
            module: torch.nn.Module | None) -> Callable[[], None]:
    """Forward, then ``.float().sum().backward()`` over every output; the gradients of the
    inputs and of ``module``'s parameters are cleared before each call."""
    params = list(module.parameters()) if module is not None else []

    def call() -> None:
        for t in (*xs, *params):
            t.grad = None
        outs = _outputs(run(*xs))
        loss = outs[0].float().sum()
        for o in outs[1:]:
            loss = loss + o.float().sum()
        loss.backward()

    return call


def fwd(run: Callable[..., Any], xs: Sequence[torch.Tensor]) -> Callable[[], Any]:
    """The forward under ``torch.no_grad``."""

    def call() -> Any:
        with torch.no_grad():
            return run(*xs)

    return call


def max_abs_diff(a: Any, b: Any) -> float | None:
    try:
        pairs = zip(_outputs(a), _outputs(b), strict=True)
        return max(float((x.float() - y.float()).abs().max().cpu()) for x, y in pairs)
    except Exception:
        return None


# --------------------------------------------------------------------------- selection


def backend_status(plan: Any, backend: str) -> str | None:
    """``"run"`` when the model-level groups should time ``backend``, the reason it cannot
    run here, or ``None`` when it was not asked for (no row at all).

    ``--backends compile`` asks for every ``compile(...)`` variant but the train-step group's
    ``compile(X, reduce-overhead)`` (only when named); ``compile(triton...)`` also needs the
    Triton backend.
    """
    base = "compile" if backend.startswith("compile") else backend
    if backend not in plan.backends and (base not in plan.backends or ", " in backend):
        return None  # the CUDA-graph variants of the train-step group run only when named
    for name in (backend, base) + (("triton",) if backend.startswith("compile(triton") else ()):
        if name in plan.skip:
            return plan.skip[name]
    return "run"


def select_shapes(plan: Any, shapes: Iterable[tuple[str, str, Any]]) -> list[tuple[str, str, Any]]:
    """``(size, label, dims)`` entries kept by ``--shapes`` (a substring of the size name or of
    the label)."""
    wanted = getattr(plan, "shapes", None)
    return [s for s in shapes
            if not wanted or any(w in s[0] or w in s[1] for w in wanted)]


def add_speedups(rows: list[dict[str, Any]], key: Sequence[str], value: str,
                 refs: dict[str, Callable[[dict[str, Any]], str | None]]) -> None:
    """Add ``speedup_vs_<name> = ref[value] / row[value]`` (> 1: the row is faster) to every
    row with a ``value``, where the reference row has the same ``key`` fields and the backend
    ``refs[name](row)`` (``None``: no reference for that row)."""
    index: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        if value in r:
            index.setdefault(tuple(r.get(k) for k in key), {})[r["backend"]] = r
    for cell in index.values():
        for r in cell.values():
            for name, pick in refs.items():
                ref_backend = pick(r)
                ref = cell.get(ref_backend) if ref_backend else None
                if ref is not None and ref[value] and r[value]:
                    r[f"speedup_vs_{name}"] = ref[value] / r[value]


# --------------------------------------------------------------------------- markdown


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def fmt_ratio(num: float | None, den: float | None) -> str:
    if not num or not den:
        return "—"
    r = num / den
    return f"{r:.2f}×" if r >= 0.1 else f"{r:.2g}×"


def fmt_s(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    return f"{seconds:.0f}" if seconds >= 10 else f"{seconds:.1f}"


def pivot_table(rows: list[dict[str, Any]], key: Sequence[str], order: Sequence[str],
                value: str, unit: str, ratios: Sequence[tuple[str, str, str]] = (),
                extra: Sequence[tuple[str, Callable[[dict[str, dict[str, Any]]], str]]] = (),
                ) -> list[str]:
    """A markdown table: one line per distinct ``key``, one ``value`` column per backend of
    ``order`` that has a value somewhere, then ``ratios`` (``(title, num backend, den
    backend)``: ``num / den``) that have a value somewhere, then ``extra`` columns computed
    from the line's ``{backend: row}``."""
    backends = [b for b in order if any(r["backend"] == b and value in r for r in rows)]
    keys: list[tuple] = []
    cells: dict[tuple, dict[str, dict[str, Any]]] = {}
    for r in rows:
        k = tuple(r.get(f) for f in key)
        if k not in cells:
            keys.append(k)
            cells[k] = {}
        cells[k][r["backend"]] = r

    def val(cell: dict[str, dict[str, Any]], b: str) -> float | None:
        return cell.get(b, {}).get(value)

    used = [(t, n, d) for t, n, d in ratios
            if any(val(c, n) and val(c, d) for c in cells.values())]
    header = [*key, *[f"{b} {unit}" for b in backends], *[t for t, _, _ in used],
              *[t for t, _ in extra]]
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for k in keys:
        cell = cells[k]
        line = [str(x) for x in k]
        line += [fmt_ms(val(cell, b)) for b in backends]
        line += [fmt_ratio(val(cell, n), val(cell, d)) for _, n, d in used]
        line += [f(cell) for _, f in extra]
        out.append("| " + " | ".join(line) + " |")
    return out


def notes_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The errors and skipped backends of a group, as markdown lines."""
    out: list[str] = []
    errors = [f"{r.get('op', '')} {r.get('shape', '')} {r.get('precision', '')} "
              f"{r.get('mode', '')} {r['backend']}: {r['error']}".replace("  ", " ")
              for r in rows if "error" in r]
    if errors:
        out += ["Errors (backend could not run the case):", ""]
        out += [f"- {e}" for e in errors] + [""]
    skipped = sorted({f"{r['backend']}: {r['skipped']}" for r in rows if "skipped" in r})
    if skipped:
        out += ["Not run here: " + "; ".join(skipped) + ".", ""]
    return out


def error_text(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:400] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"


def free_memory(device: str) -> None:
    """Drop cached blocks (after an out-of-memory error or between large cases)."""
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
