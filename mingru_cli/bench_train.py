"""The ``train-step`` group of ``mingru bench``: one optimizer step of a byte-level language
model, the number a user training with the library sees.

Model: ``Embedding(256, d)`` → :class:`mingru.MinGRUStack` ``(d, d, L, mixer=...,
mlp_expansion=4)`` → ``Linear(d, 256)`` (:class:`mingru_cli.train.SequenceModel`), next-token
cross-entropy on a fixed random batch, ``torch.optim.AdamW``, bf16 autocast::

    loss.backward(); opt.step(); opt.zero_grad(set_to_none=True)

Backends: ``eager``, ``auto`` and ``triton`` (``use_backend``, no compile; ``triton`` also
takes the kernels ``auto`` does not pick at that size, such as the blocks' fused LayerNorm
below 2^24 elements), ``compile(eager)`` and
``compile(triton)`` (every block ``torch.compile``d in place — regional compilation, the
blocks share one compiled graph — run under ``use_backend(X)``), and, only when named,
``compile(eager, reduce-overhead)`` / ``compile(triton, reduce-overhead)`` (the same with CUDA
graphs: what is left of the step once the host's launch time leaves the critical path). Each row: median ms/step of
the timed steps after warm-up (CUDA events, or wall clock with a sync per step), tokens/s,
peak memory, warm-up seconds, and a ``torch.profiler`` breakdown of a few more steps
(:mod:`mingru_cli.bench_profile`).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from mingru_cli import bench_cases
from mingru_cli.bench_common import (
    add_speedups,
    backend_status,
    error_text,
    fmt_ms,
    fmt_ratio,
    fmt_s,
    free_memory,
    log,
    notes_lines,
    select_shapes,
    sync,
)
from mingru_cli.bench_plans import TRAIN_MIXERS, group_shapes
from mingru_cli.bench_profile import FAMILIES, profile_steps

__all__ = ["BACKENDS", "VOCAB", "build_model", "build_training", "make_step", "mixer_kwargs", "parse_backend", "run",
           "speedups", "table",
           "time_steps"]

GROUP = "train-step"
BACKENDS = ("eager", "auto", "triton", "compile(eager)", "compile(triton)",
            "compile(eager, reduce-overhead)", "compile(triton, reduce-overhead)")
VOCAB = 256
MLP_EXPANSION = 4  # MinGRUStack's default


def mixer_kwargs(name: str, d: int) -> dict[str, Any]:
    """Per-mixer arguments: DeltaMinGRU gets ``d/64`` heads (``d_k = d_v = 64``, served by the
    kernels); GivensMinGRU keeps its defaults (8×8 blocks, 3 rounds)."""
    return {"n_heads": max(1, d // 64)} if name == "delta" else {}


def build_model(name: str, d: int, n_layers: int, device: str) -> torch.nn.Module:
    from mingru_cli.train import SequenceModel

    torch.manual_seed(0)
    return SequenceModel(VOCAB, VOCAB, d, n_layers, name, mixer_kwargs(name, d),
                         mlp_expansion=MLP_EXPANSION).to(device)


def _compile_blocks(model: torch.nn.Module, mode: str | None = None) -> None:
    bench_cases.fresh_dynamo()
    for block in model.stack.blocks:
        block.compile(dynamic=False, mode=mode)


def parse_backend(backend: str) -> tuple[str, str | None]:
    """``(use_backend mode, torch.compile mode)`` of a row's backend: ``"auto"`` →
    ``("auto", None)``, ``"compile(triton, reduce-overhead)"`` → ``("triton",
    "reduce-overhead")``; the compile mode is ``None`` for uncompiled rows and plain compile."""
    if not backend.startswith("compile("):
        return backend, None
    inner, _, compile_mode = backend[len("compile("):-1].partition(", ")
    return inner, compile_mode or None


def make_step(model: torch.nn.Module, opt: torch.optim.Optimizer, tokens: torch.Tensor,
              device: str, mode: str, cudagraphs: bool = False,
              backward_in_thread: bool = False) -> Callable[[], torch.Tensor]:
    """One training step under ``use_backend(mode)``; returns the (detached) loss. With
    ``cudagraphs`` (blocks compiled with ``mode="reduce-overhead"``) each step starts with
    ``torch.compiler.cudagraph_mark_step_begin()``, so a replay never overwrites outputs the
    step still needs. With ``backward_in_thread`` the backward runs on the calling thread
    (``torch.autograd.set_multithreading_enabled(False)``), not the autograd engine's device
    thread."""
    import mingru

    inp, tgt = tokens[:, :-1], tokens[:, 1:].reshape(-1)

    def step() -> torch.Tensor:
        if cudagraphs:
            torch.compiler.cudagraph_mark_step_begin()
        with mingru.use_backend(mode):
            with torch.autocast(device_type=device, dtype=torch.bfloat16):
                logits = model(inp)
                loss = F.cross_entropy(logits.reshape(-1, VOCAB).float(), tgt)
            with torch.autograd.set_multithreading_enabled(not backward_in_thread):
                loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def time_steps(step: Callable[[], Any], device: str, repeats: int,
               wall: bool) -> tuple[list[float], float]:
    """Per-step milliseconds of ``repeats`` steps (CUDA events, or wall clock with a sync per
    step) and the mean wall ms/step of the whole loop (one sync at each end)."""
    sync(device)
    t0 = time.perf_counter()
    times: list[float] = []
    if device == "cuda" and not wall:
        marks = []
        for _ in range(repeats):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            marks.append((start, end))
        torch.cuda.synchronize()
        times = [s.elapsed_time(e) for s, e in marks]
    else:
        for _ in range(repeats):
            t = time.perf_counter()
            step()
            sync(device)
            times.append((time.perf_counter() - t) * 1e3)
    sync(device)
    return times, (time.perf_counter() - t0) * 1e3 / max(1, repeats)


def build_training(name: str, backend: str, B: int, T: int, d: int, L: int, device: str,
                   fused_adamw: bool = False,
                   ) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """What a row's steps run on: the model (its blocks compiled for a ``compile(...)``
    backend), AdamW over it (PyTorch's default implementation, or ``fused=True``) and the
    fixed token batch ``(B, T + 1)``."""
    model = build_model(name, d, L, device)
    if backend.startswith("compile("):
        _compile_blocks(model, parse_backend(backend)[1])
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **({"fused": True} if fused_adamw else {}))
    g = torch.Generator().manual_seed(3)
    tokens = torch.randint(0, VOCAB, (B, T + 1), generator=g).to(device)
    return model, opt, tokens


def _measure(plan: Any, name: str, backend: str, B: int, T: int, d: int,
             L: int) -> dict[str, Any]:
    import torch._dynamo

    out: dict[str, Any] = {}
    mode, compile_mode = parse_backend(backend)
    if backend.startswith("compile("):
        torch._dynamo.utils.counters.clear()
    model, opt, tokens = build_training(name, backend, B, T, d, L, plan.device)
    out["parameters"] = sum(p.numel() for p in model.parameters())
    step = make_step(model, opt, tokens, plan.device, mode,
                     cudagraphs=compile_mode == "reduce-overhead" and plan.device == "cuda",
                     backward_in_thread=plan.backward_in_thread)
    t0 = time.perf_counter()
    out["loss_first"] = float(step())  # compiles, creates the optimizer state
    out["warmup_s"] = round(time.perf_counter() - t0, 2)
    for _ in range(max(1, plan.warmup) - 1):
        step()
    if backend.startswith("compile("):
        graphs = torch._dynamo.utils.counters["stats"].get("unique_graphs")
        if graphs is not None:
            out["compiled_graphs"] = int(graphs)
    if plan.device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, wall = time_steps(step, plan.device, max(1, plan.repeats), plan.timer == "wall")
    out["loss_last"] = float(step())
    if plan.device == "cuda":
        out["peak_mb"] = torch.cuda.max_memory_allocated() / 1e6
    out["ms"] = statistics.median(times)
    out["ms_min"] = min(times)
    out["wall_ms_per_step"] = wall
    out["steps_timed"] = len(times)
    out["tokens_per_s"] = B * T / (out["ms"] * 1e-3)
    if plan.profile_steps:
        out["profile"] = profile_steps(step, plan.device, plan.profile_steps)
    if not (math.isfinite(out["loss_first"]) and math.isfinite(out["loss_last"])):
        out["warning"] = "non-finite loss"
    del model, opt, step
    return out


def run(plan: Any) -> list[dict[str, Any]]:
    """Every row of the ``train-step`` group."""
    rows: list[dict[str, Any]] = []
    names = [n for n in TRAIN_MIXERS if plan.selected(n)]
    for size, label, (B, T, d, L) in select_shapes(plan, group_shapes(GROUP, plan.device,
                                                                     plan.quick)):
        for name in names:
            for backend in BACKENDS:
                status = backend_status(plan, backend)
                if status is None:
                    continue
                row: dict[str, Any] = {"group": GROUP, "op": name, "size": size, "shape": label,
                                       "mode": "step", "backend": backend,
                                       "mixer_kwargs": mixer_kwargs(name, d)}
                rows.append(row)
                if status != "run":
                    row["skipped"] = status
                    continue
                try:
                    row.update(_measure(plan, name, backend, B, T, d, L))
                except Exception as exc:  # recorded, the run goes on
                    row["error"] = error_text(exc)
                free_memory(plan.device)
                shown = (f"{row['ms']:.4g} ms/step, {row['tokens_per_s']:.3g} tok/s, warm-up "
                         f"{row['warmup_s']:.1f} s" if "ms" in row else row.get("error", ""))
                log(f"  train-step {name:7s} {label:20s} {backend:16s} {shown}")
    speedups(rows)
    return rows


def speedups(rows: list[dict[str, Any]]) -> None:
    """``speedup_vs_eager`` and ``speedup_vs_compile_eager`` (ms/step) of every timed row."""
    add_speedups(rows, ("op", "shape"), "ms", {
        "eager": lambda r: "eager",
        # Like with like: a CUDA-graph row against compile(eager) with CUDA graphs.
        "compile_eager": lambda r: ("compile(eager, reduce-overhead)"
                                    if parse_backend(r["backend"])[1] == "reduce-overhead"
                                    else "compile(eager)")})


def _pct(part: float | None, whole: float | None) -> str:
    return f"{100 * part / whole:.0f}%" if part is not None and whole else "—"


def table(rows: list[dict[str, Any]], note: str) -> list[str]:
    """The markdown of the ``train-step`` group: timings, then the profiler breakdown."""
    out = [f"### {GROUP}", ""] + ([note, ""] if note else [])
    timed = [r for r in rows if "ms" in r]
    header = ["mixer", "shape", "backend", "ms/step", "tokens/s", "peak MB", "warm-up s",
              "vs eager", "vs compile(eager)"]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in timed:
        peak = f"{r['peak_mb']:.0f}" if r.get("peak_mb") is not None else "—"
        sp = [fmt_ratio(r.get(k), 1.0) for k in ("speedup_vs_eager", "speedup_vs_compile_eager")]
        out.append("| " + " | ".join([r["op"], r["shape"], r["backend"], fmt_ms(r["ms"]),
                                      f"{r['tokens_per_s']:,.0f}", peak, fmt_s(r["warmup_s"]),
                                      *sp]) + " |")
    profiled = [r for r in timed if "busy_ms_per_step" in r.get("profile", {})]
    if profiled:
        fams = [f for f in FAMILIES
                if any(r["profile"]["families_ms_per_step"].get(f) for r in profiled)]
        src = profiled[0]["profile"]["source"]
        out += ["", f"Time by op family ({src}), ms per step under the profiler; busy = "
                    "union of kernel time (CPU: sum of op self time) / wall:", ""]
        header = ["mixer", "shape", "backend", "wall ms", "busy ms", "busy", *fams]
        out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
        for r in profiled:
            p = r["profile"]
            line = [r["op"], r["shape"], r["backend"], fmt_ms(p["wall_ms_per_step"]),
                    fmt_ms(p["busy_ms_per_step"]), _pct(p["busy_ms_per_step"],
                                                        p["wall_ms_per_step"])]
            line += [fmt_ms(p["families_ms_per_step"].get(f)) for f in fams]
            out.append("| " + " | ".join(line) + " |")
    failed = [f"{r['op']} {r['shape']} {r['backend']}: {r['profile'].get('error') or r['profile']['note']}"
              for r in timed if {"error", "note"} & set(r.get("profile", {}))]
    out.append("")
    if failed:
        out += ["Profiler: " + "; ".join(failed) + ".", ""]
    return [*out, *notes_lines(rows)]
