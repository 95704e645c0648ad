"""The ``host`` group of ``mingru bench``: what one call costs on the host, where small
shapes spend their time (the kernels themselves take microseconds there).

Every public op (``parallel_scan_log``, ``linear_scan``, ``linear_recurrence``,
``matrix_scan``, ``matrix_affine_scan``) and every mixer, fwd and fwd+bwd, on ``eager``,
``auto`` and ``triton``: a batch of calls (200 on CUDA; fewer, at least 10, when a batch would
pass half a second — those rows are device-bound) with one device sync at the end, the median
over batches, in µs per call; ``host_us_per_call`` stops the clock before that sync (the time to
issue the calls while the launch queue does not fill). A trivial ``(a * 2).sum().backward()``
row is the floor of any autograd round trip. For ``linear_scan`` and ``linear_recurrence``
fwd+bwd, ``torch.compile(fn, fullgraph=True)`` of forward + loss (``compile``) is compared
with ``mode="reduce-overhead"`` (``compile(reduce-overhead)``, CUDA graphs): static inputs,
``torch.compiler.cudagraph_mark_step_begin()`` before each call, and the input gradients
reset to ``None`` before each call so no gradient ever lives in graph-owned memory across
replays.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from mingru_cli import bench_cases
from mingru_cli.bench_common import (
    add_speedups,
    backend_status,
    error_text,
    fmt_ms,
    fmt_s,
    fwd,
    fwd_bwd,
    log,
    max_abs_diff,
    notes_lines,
    pivot_table,
    select_shapes,
    sync,
)
from mingru_cli.bench_plans import HOST_OPS, HOST_REFERENCE, group_shapes

__all__ = ["BACKENDS", "COMPILE_BACKENDS", "host_time", "run", "speedups", "table"]

GROUP = "host"
BACKENDS = ("eager", "auto", "triton")
COMPILE_BACKENDS = ("compile", "compile(reduce-overhead)")
COMPILE_OPS = ("linear_scan", "linear_recurrence")
ORDER = ("torch", *BACKENDS, *COMPILE_BACKENDS)
MODES = ("fwd", "fwd+bwd")


MAX_BATCH_S = 0.5  # a batch of slow (device-bound) calls is cut to about this long


def host_time(call: Callable[[], Any], device: str, calls: int, batches: int,
              warmup: int = 3) -> tuple[float, float, int]:
    """``(wall, enqueue, calls)``: µs per call, medians over ``batches`` of ``calls``
    back-to-back calls; wall includes one device sync at the end of each batch, enqueue stops
    before it. Calls slow enough that a batch would pass ``MAX_BATCH_S`` (device-bound: their
    wall time is device time) get fewer per batch, at least 10; ``calls`` is what was used."""
    for _ in range(max(1, warmup)):
        call()
    sync(device)
    t0 = time.perf_counter()
    call()
    sync(device)
    one = time.perf_counter() - t0
    if one * calls > MAX_BATCH_S:
        calls = max(10, int(MAX_BATCH_S / one))
    walls, hosts = [], []
    for _ in range(max(1, batches)):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        t1 = time.perf_counter()
        sync(device)
        t2 = time.perf_counter()
        hosts.append((t1 - t0) / calls * 1e6)
        walls.append((t2 - t0) / calls * 1e6)
    return statistics.median(walls), statistics.median(hosts), calls


def _inputs(op: str, B: int, T: int, D: int, device: str) -> Callable[[bool], bench_cases.Tensors]:
    return bench_cases.scan_inputs("linear_scan" if op == "linear_recurrence" else op,
                                   B, T, D, device, torch.float32)


def _loss(op: str) -> Callable[..., torch.Tensor]:
    """Forward + loss of ``op``, the function compiled for the ``compile`` rows."""
    import mingru

    fn = getattr(mingru, op)

    def loss(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        out = fn(a, b)
        outs = out if isinstance(out, tuple) else (out,)
        total = outs[0].float().sum()
        for o in outs[1:]:
            total = total + o.float().sum()
        return total

    return loss


def _compile_call(op: str, backend: str, xs: bench_cases.Tensors) -> Callable[[], None]:
    kwargs: dict[str, Any] = {"fullgraph": True}
    graphs = backend == "compile(reduce-overhead)"
    if graphs:
        kwargs["mode"] = "reduce-overhead"
    f = bench_cases.compiled(_loss(op), **kwargs)
    if graphs:  # the same tensors every call: no copy into the graph's input buffers
        import torch._dynamo

        for x in xs:
            torch._dynamo.mark_static_address(x)

    def call() -> None:
        if graphs:
            torch.compiler.cudagraph_mark_step_begin()
        for x in xs:
            x.grad = None
        f(*xs).backward()

    return call


def _grads(call: Callable[[], None], xs: bench_cases.Tensors) -> list[torch.Tensor]:
    call()
    return [x.grad.detach().clone() for x in xs]  # copied before the next replay reuses them


def _rows_for(plan: Any, op: str, label: str, mode: str, make: Callable[[bool], Any],
              module: torch.nn.Module | None, runner: Callable[..., Any],
              calls: int, batches: int) -> list[dict[str, Any]]:
    import mingru

    rows = []
    for backend in BACKENDS:
        status = backend_status(plan, backend)
        if status is None:
            continue
        row = {"group": GROUP, "op": op, "shape": label, "mode": mode, "backend": backend}
        rows.append(row)
        if status != "run":
            row["skipped"] = status
            continue
        try:
            xs = make(mode != "fwd")

            def run(*a: Any, _b: str = backend) -> Any:
                with mingru.use_backend(_b):
                    return runner(*a)

            call = fwd(run, xs) if mode == "fwd" else fwd_bwd(run, xs, module)
            wall, host, used = host_time(call, plan.device, calls, batches)
            row.update(us_per_call=wall, host_us_per_call=host, calls_per_batch=used,
                       batches=batches)
        except Exception as exc:
            row["error"] = error_text(exc)
        _log_row(row)
    return rows


def _log_row(row: dict[str, Any]) -> None:
    shown = (f"{row['us_per_call']:.1f} µs/call (enqueue {row['host_us_per_call']:.1f})"
             if "us_per_call" in row else row.get("error", row.get("skipped", "")))
    log(f"  host {row['op']:34s} {row['mode']:7s} {row['backend']:24s} {shown}")


def run(plan: Any) -> list[dict[str, Any]]:
    """Every row of the ``host`` group."""
    import mingru

    rows: list[dict[str, Any]] = []
    cuda = plan.device == "cuda"
    calls = 200 if cuda else (10 if plan.quick else 50)
    batches = max(1, min(plan.repeats, 5))
    for _, label, (B, T, D) in select_shapes(plan, group_shapes(GROUP, plan.device, plan.quick)):
        if plan.selected(HOST_REFERENCE) and any(backend_status(plan, b) == "run"
                                                 for b in BACKENDS):
            rows.append(_reference(plan, label, B, T, D, calls, batches))
        for op in HOST_OPS:
            if not plan.selected(op):
                continue
            for mode in MODES:
                rows += _rows_for(plan, op, label, mode, _inputs(op, B, T, D, plan.device),
                                  None, getattr(mingru, op), calls, batches)
            if op in COMPILE_OPS:
                rows += _compile_rows(plan, op, label, B, T, D, calls, batches)
        for name in bench_cases.MIXERS:
            if not plan.selected(name):
                continue
            mixer = bench_cases.build_mixer(name, D, plan.device, torch.float32)

            def make(rg: bool, _B: int = B, _T: int = T, _D: int = D) -> bench_cases.Tensors:
                g = torch.Generator().manual_seed(1)
                return (torch.randn(_B, _T, _D, generator=g).to(plan.device).requires_grad_(rg),)

            for mode in MODES:
                rows += _rows_for(plan, name, label, mode, make, mixer, mixer, calls, batches)
    speedups(rows)
    return rows


def speedups(rows: list[dict[str, Any]]) -> None:
    """``speedup_vs_eager`` and ``speedup_vs_compile`` (µs per call) of every timed row."""
    add_speedups(rows, ("op", "shape", "mode"), "us_per_call",
                 {"eager": lambda r: "eager", "compile": lambda r: "compile"})


def _reference(plan: Any, label: str, B: int, T: int, D: int, calls: int,
               batches: int) -> dict[str, Any]:
    row: dict[str, Any] = {"group": GROUP, "op": HOST_REFERENCE, "shape": label,
                           "mode": "fwd+bwd", "backend": "torch"}
    a = torch.randn(B, T, D, device=plan.device, requires_grad=True)

    def call() -> None:
        a.grad = None
        (a * 2).sum().backward()

    wall, host, used = host_time(call, plan.device, calls, batches)
    row.update(us_per_call=wall, host_us_per_call=host, calls_per_batch=used, batches=batches)
    _log_row(row)
    return row


def _compile_rows(plan: Any, op: str, label: str, B: int, T: int, D: int, calls: int,
                  batches: int) -> list[dict[str, Any]]:
    import mingru

    rows = []
    for backend in COMPILE_BACKENDS:
        status = backend_status(plan, backend)
        if status is None:
            continue
        row: dict[str, Any] = {"group": GROUP, "op": op, "shape": label, "mode": "fwd+bwd",
                               "backend": backend}
        rows.append(row)
        if status != "run":
            row["skipped"] = status
            continue
        try:
            xs = _inputs(op, B, T, D, plan.device)(True)
            call = _compile_call(op, backend, xs)
            t0 = time.perf_counter()
            call()
            call()  # reduce-overhead records its CUDA graphs on the second call
            sync(plan.device)
            row["compile_s"] = round(time.perf_counter() - t0, 2)
            got = _grads(call, xs)
            with mingru.use_backend("auto"):
                ref = [x.detach().clone().requires_grad_(True) for x in xs]
                _loss(op)(*ref).backward()
            row["max_abs_grad_diff_vs_auto"] = max_abs_diff(tuple(got), tuple(r.grad for r in ref))
            wall, host, used = host_time(call, plan.device, calls, batches)
            row.update(us_per_call=wall, host_us_per_call=host, calls_per_batch=used,
                       batches=batches)
        except Exception as exc:
            row["error"] = error_text(exc)
        _log_row(row)
    return rows


def table(rows: list[dict[str, Any]], note: str) -> list[str]:
    """The markdown of the ``host`` group (µs per call)."""
    out = [f"### {GROUP}", ""] + ([note, ""] if note else [])

    def enqueue(cell: dict[str, dict[str, Any]]) -> str:
        r = cell.get("auto") or cell.get("torch") or {}
        return fmt_ms(r.get("host_us_per_call"))

    def compile_s(cell: dict[str, dict[str, Any]]) -> str:
        vals = [fmt_s(cell.get(b, {}).get("compile_s")) for b in COMPILE_BACKENDS]
        return " / ".join(vals)

    extra = [("auto enqueue µs", enqueue)]
    if any("compile_s" in r for r in rows):
        extra.append(("compile s (plain / reduce-overhead)", compile_s))
    out += pivot_table(rows, ("op", "shape", "mode"), ORDER, "us_per_call", "µs",
                       ratios=(("auto vs eager", "eager", "auto"),
                               ("reduce-overhead vs compile", "compile",
                                "compile(reduce-overhead)")),
                       extra=extra)
    return [*out, "", *notes_lines(rows)]
