"""Where a training step's time goes: ``torch.profiler`` over a few steps, device (or CPU op)
time grouped by op family, and device-busy time against wall time.

Families, matched on the kernel (CUDA) or op (CPU) name, first match wins:

* ``mingru kernels`` — the Triton kernels of ``mingru_kernels`` (names read from its sources:
  every ``def *_kernel``, e.g. ``linear_recurrence_fwd_kernel``, ``parallel_scan_log_*``,
  ``mingru_cell_*``);
* ``inductor triton`` — kernels ``torch.compile`` generated (``triton_`` prefix);
* ``gemm`` — cuBLAS / CUTLASS / nvjet matmuls (``aten::mm`` and friends on CPU);
* ``norm`` — layer / RMS norms;
* ``optimizer`` — ``multi_tensor_apply`` / foreach / fused Adam kernels;
* ``elementwise/reduction`` — the remaining ATen kernels (``at::native``, elementwise,
  reductions, softmax, loss, copies inside ATen);
* ``memcpy/memset`` and ``other``.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

__all__ = ["FAMILIES", "breakdown", "classify", "cuda_kernel_times", "mingru_kernel_names",
           "profile_steps"]

FAMILIES = ("mingru kernels", "inductor triton", "gemm", "norm", "optimizer",
            "elementwise/reduction", "memcpy/memset", "other")
_OUR_PREFIXES = ("parallel_scan_log", "linear_scan", "linear_recurrence", "linear_carry",
                 "matrix_affine_scan", "givens_recurrence", "delta_rule", "mingru_cell")
_GEMM = ("gemm", "gemv", "cutlass", "cublas", "xmma", "nvjet", "matmul", "splitkreduce",
         "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_scaled_mm")
_NORM = ("layer_norm", "layernorm", "rms_norm", "rmsnorm", "group_norm", "batch_norm")
_OPTIM = ("multi_tensor_apply", "foreach", "adam", "optimizer.", "fused_sgd")
_ELEMENTWISE = ("at::native", "aten::", "elementwise", "reduce_kernel", "reduction", "softmax",
                "cross_entropy", "nll_loss", "vectorized", "unrolled", "at_cuda_detail",
                "cunn_", "index", "scatter", "gather", "cat", "fill", "copy")
_MEM = ("memcpy", "memset")


@functools.cache
def mingru_kernel_names() -> frozenset[str]:
    """Every ``def <name>_kernel`` in the ``mingru_kernels`` sources (read, not imported, so
    Triton is not loaded)."""
    try:
        spec = importlib.util.find_spec("mingru_kernels")
    except (ImportError, ValueError):
        return frozenset()
    names: set[str] = set()
    for folder in (spec.submodule_search_locations or []) if spec else []:
        for path in Path(folder).rglob("*.py"):
            try:
                names.update(re.findall(r"^def (\w+_kernel\w*)\s*\(", path.read_text(), re.M))
            except OSError:
                continue
    return frozenset(names)


@functools.lru_cache(maxsize=1 << 16)
def classify(name: str) -> str:
    """The family of a kernel or op name (see the module docstring)."""
    low = name.lower()
    ours = mingru_kernel_names()
    base = re.split(r"[\s(<]", name.strip(), maxsplit=1)[0]
    if base in ours or (low.startswith(_OUR_PREFIXES) and "_kernel" in low):
        return "mingru kernels"
    if low.startswith("triton_"):
        return "inductor triton"
    if any(k in low for k in _MEM):
        return "memcpy/memset"
    for family, keys in (("gemm", _GEMM), ("norm", _NORM), ("optimizer", _OPTIM),
                         ("elementwise/reduction", _ELEMENTWISE)):
        if any(k in low for k in keys):
            return family
    return "other"


def _union_us(intervals: Iterable[tuple[float, float]]) -> float:
    """Total length of the union of ``(start, end)`` intervals."""
    total, end = 0.0, None
    for s, e in sorted(intervals):
        if end is None or s > end:
            total += e - s
            end = e
        elif e > end:
            total += e - end
            end = e
    return total


_DEVICE_ACTIVITIES = ("kernel", "gpu_memcpy", "gpu_memset")


def _events(prof: Any) -> list[tuple[str, str, str, float, float, int]]:
    """``(name, device, activity, start_us, duration_us, thread)`` of every event, read from
    the raw Kineto results (building the profiler's ``FunctionEvent`` tree costs seconds per
    100k events); the ``FunctionEvent`` list is the fallback."""
    try:
        raw = prof.profiler.kineto_results.events()
        return [(e.name(), str(e.device_type()).rsplit(".", 1)[-1], str(e.activity_type()),
                 e.start_ns() / 1e3, e.duration_ns() / 1e3, int(e.start_thread_id()))
                for e in raw]
    except Exception:
        return [(e.name, str(e.device_type).rsplit(".", 1)[-1],
                 "kernel" if str(e.device_type).endswith("CUDA") else "cpu_op",
                 e.time_range.start, e.time_range.end - e.time_range.start,
                 int(getattr(e, "thread", 0) or 0)) for e in prof.events()]


def _self_times(cpu: list[tuple[str, float, float, int]]) -> list[tuple[str, float, bool]]:
    """``(name, self_us, inside optimizer.step)`` of CPU events ``(name, start, duration,
    thread)``: each event's duration minus its direct children's, nesting found per thread by
    interval containment."""
    out = []
    by_thread: dict[int, list[tuple[str, float, float]]] = {}
    for name, start, dur, thread in cpu:
        by_thread.setdefault(thread, []).append((name, start, dur))
    for events in by_thread.values():
        events.sort(key=lambda e: (e[1], -e[2]))
        child = [0.0] * len(events)
        in_opt = [False] * len(events)
        stack: list[int] = []
        for i, (_name, start, dur) in enumerate(events):
            while stack and events[stack[-1]][1] + events[stack[-1]][2] <= start:
                stack.pop()
            if stack:
                parent = stack[-1]
                child[parent] += dur
                in_opt[i] = in_opt[parent] or events[parent][0].startswith("Optimizer.")
            stack.append(i)
        out += [(name, max(0.0, dur - child[i]), in_opt[i])
                for i, (name, _, dur) in enumerate(events)]
    return out


def breakdown(prof: Any, steps: int, wall_ms: float, top: int = 8) -> dict[str, Any]:
    """Per-step time by family from a finished ``torch.profiler.profile``.

    With device (CUDA) events: ``busy_ms_per_step`` is the union of the kernels' (and copies')
    intervals — GPU busy — and families sum their durations. Without (CPU runs): ops' self CPU
    time (ops inside ``optimizer.step()`` count as ``optimizer``), and busy is their sum (one
    thread's view).
    """
    events = _events(prof)
    device = [e for e in events if e[1] == "CUDA" and e[2] in _DEVICE_ACTIVITIES]
    per: dict[str, float] = dict.fromkeys(FAMILIES, 0.0)
    names: dict[tuple[str, str], float] = {}  # (name, family) -> us
    if device:
        source = "cuda kernels"
        for name, _, _, _, dur, _ in device:
            family = classify(name)
            per[family] += dur
            names[name, family] = names.get((name, family), 0.0) + dur
        busy_us = _union_us((s, s + d) for _, _, _, s, d, _ in device)
    else:
        source = "cpu ops (self time)"
        cpu = [(n, s, d, t) for n, dev, act, s, d, t in events
               if dev == "CPU" and not n.startswith("ProfilerStep")]
        for name, self_us, in_opt in _self_times(cpu):
            if self_us <= 0:
                continue
            family = "optimizer" if in_opt else classify(name)
            per[family] += self_us
            names[name, family] = names.get((name, family), 0.0) + self_us
        busy_us = sum(per.values())
    n = max(1, steps)
    ranked = sorted(names.items(), key=lambda kv: -kv[1])[:top]
    return {
        "source": source, "steps": steps, "events": len(events),
        "wall_ms_per_step": wall_ms / n,
        "busy_ms_per_step": busy_us / 1e3 / n,
        "busy_fraction": (busy_us / 1e3) / wall_ms if wall_ms else None,
        "families_ms_per_step": {f: v / 1e3 / n for f, v in per.items() if v > 0},
        "top": [{"name": name[:120], "family": family, "ms_per_step": v / 1e3 / n}
                for (name, family), v in ranked],
    }


def cuda_kernel_times(fn: Callable[[], Any], calls: int, warmup: int = 3) -> dict[str, float]:
    """Device milliseconds per call of every CUDA kernel ``fn`` launches, by kernel name:
    ``warmup`` untimed calls, then ``calls`` under ``torch.profiler`` (kernel durations only,
    so host time never counts). Needs CUDA."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    times: dict[str, float] = {}
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            times[ev.name] = times.get(ev.name, 0.0) + ev.device_time / calls / 1000.0
    return times


def profile_steps(step: Callable[[], Any], device: str, steps: int) -> dict[str, Any]:
    """Run ``steps`` calls of ``step`` under ``torch.profiler`` and return :func:`breakdown`
    (``{"error": ...}`` when the profiler cannot run here)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    try:
        with profile(activities=activities) as prof:
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(steps):
                step()
            if device == "cuda":
                torch.cuda.synchronize()
            wall_ms = (time.perf_counter() - t0) * 1e3
        result = breakdown(prof, steps, wall_ms)
        if device == "cuda" and result["source"] != "cuda kernels":
            result["note"] = "no CUDA kernel events recorded (CUPTI unavailable?): CPU op times"
        return result
    except Exception as exc:  # the profiler is a diagnostic: never fail the benchmark for it
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
