"""The ``mixers`` group of ``mingru bench``: every mixer, fwd and fwd+bwd, fp32 and bf16
autocast, on eager, Triton, ``torch.compile`` of each, and peer-built mixers.

The peers are the mixers a user could assemble from another library in a dozen lines, written
here (not in the library) and sharing the library mixer's own linear layers (one matmul for
all of them, as the library mixers project), so every backend computes the same function
from the same weights:

* :class:`FlaMinGRU` — MinGRU's gates in PyTorch, the recurrence on fla's ``chunk_hgrn``
  (``h_t = exp(g_t) h_{t-1} + x_t`` with ``g = log a = -softplus(k_z)``,
  ``x = b = sigmoid(k_z) g(k_h)`` and ``h_0 = 0.5`` passed as its ``initial_state``);
* :class:`AccelSignedMinGRU` — SignedMinGRU's gates (``a = tanh(k_s)``,
  ``b = sigmoid(k_z) k_h``, ``h_0 = 0``) on ``accelerated_scan.scalar.scan`` in its
  ``(B, D, T)`` layout: the transposes in and out are part of the timed call.

Both take the scan as an argument, so the CPU tests check their gate algebra against the
library mixers with a plain loop in its place.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mingru_cli import bench_cases
from mingru_cli.bench_common import (
    add_speedups,
    backend_status,
    error_text,
    fmt_ms,
    fmt_ratio,
    fmt_s,
    free_memory,
    fwd,
    fwd_bwd,
    log,
    max_abs_diff,
    notes_lines,
    peak_mb,
    pivot_table,
    select_shapes,
    sync,
    time_call,
)
from mingru_cli.bench_plans import group_shapes

__all__ = ["BACKENDS", "PEER_OF", "AccelSignedMinGRU", "FlaMinGRU", "build", "run", "speedups",
           "table"]

GROUP = "mixers"
BACKENDS = ("eager", "triton", "compile(eager)", "compile(triton)")
PEER_OF = {"log": "fla", "signed": "accelerated_scan"}
ORDER = (*BACKENDS, "fla", "accelerated_scan")
MODES = ("fwd", "fwd+bwd")
Scan = Callable[..., torch.Tensor]


def _g(x: torch.Tensor) -> torch.Tensor:
    """MinGRU's candidate activation: ``x + 0.5`` for ``x ≥ 0``, ``sigmoid(x)`` below."""
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def fla_hgrn_scan(b: torch.Tensor, log_a: torch.Tensor, h0: torch.Tensor) -> torch.Tensor:
    from fla.ops.hgrn import chunk_hgrn

    return chunk_hgrn(b, log_a, initial_state=h0)[0]


def accelerated_scan_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from accelerated_scan.scalar import scan

    return scan(a, b)


def _one_gemm(x: torch.Tensor, *layers: nn.Linear) -> torch.Tensor:
    """``x`` through several linear layers as one matmul (weights concatenated per call), as
    the library mixers project; the outputs side by side."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
    return F.linear(x, weight, bias)


class FlaMinGRU(nn.Module):
    """MinGRU on fla's ``chunk_hgrn`` (``scan(b, log_a, h0) -> h``, all ``(B, T, D)``)."""

    def __init__(self, ref: nn.Module, scan: Scan = fla_hgrn_scan) -> None:
        super().__init__()
        self.linear_z, self.linear_h, self.scan = ref.linear_z, ref.linear_h, scan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k_z, k_h = _one_gemm(x, self.linear_z, self.linear_h).chunk(2, dim=-1)
        b = torch.sigmoid(k_z) * _g(k_h)
        log_a = (-F.softplus(k_z)).to(b.dtype)
        h0 = torch.full((x.shape[0], b.shape[-1]), 0.5, device=x.device, dtype=torch.float32)
        return self.scan(b.contiguous(), log_a.contiguous(), h0)


class AccelSignedMinGRU(nn.Module):
    """SignedMinGRU on accelerated-scan (``scan(a, b) -> h``, all ``(B, D, T)`` contiguous)."""

    def __init__(self, ref: nn.Module, scan: Scan = accelerated_scan_scan) -> None:
        super().__init__()
        self.linear_z, self.linear_s, self.linear_h = ref.linear_z, ref.linear_s, ref.linear_h
        self.scan = scan

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        k_z, k_s, k_h = _one_gemm(x, self.linear_z, self.linear_s, self.linear_h).chunk(3, -1)
        a = torch.tanh(k_s)
        b = torch.sigmoid(k_z) * k_h
        h = self.scan(a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous())
        return h.transpose(1, 2).contiguous()


def build(name: str, d: int, device: str) -> nn.Module:
    """The mixer ``name`` with input = hidden = ``d``, fp32 parameters (Delta: ``d/64``
    heads so ``d_k = d_v = 64``, which the kernels serve at every width)."""
    import mingru

    torch.manual_seed(0)
    if name == "delta":
        return mingru.DeltaMinGRU(d, d, n_heads=max(1, d // 64)).to(device)
    return bench_cases.build_mixer(name, d, device, torch.float32)


def _precision(fn: Callable[..., Any], precision: str, device: str) -> Callable[..., Any]:
    """``fn`` run under bf16 autocast (the context inside, so ``torch.compile`` traces it)."""
    if precision == "fp32":
        return fn

    def run(*xs: Any) -> Any:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return fn(*xs)

    return run


def _runner(backend: str, module: nn.Module, precision: str, device: str) -> Callable[..., Any]:
    """The call timed for ``backend``: the module under its dispatch mode, compiled for the
    ``compile(...)`` backends (a fresh dynamo cache each, built right before its warm-up)."""
    inner = _precision(lambda x: module(x), precision, device)
    if backend.startswith("compile("):
        mode = backend[len("compile("):-1]
        return bench_cases._with_backend(mode, bench_cases.compiled(inner))
    if backend in BACKENDS:
        return bench_cases._with_backend(backend, inner)
    return inner  # peers: no dispatch involved


def _measure(plan: Any, backend: str, run: Callable[..., Any], x: torch.Tensor,
             module: nn.Module, mode: str, ref_out: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    call = fwd(run, (x,)) if mode == "fwd" else fwd_bwd(run, (x,), module)
    t0 = time.perf_counter()
    first = call()
    sync(plan.device)
    first_s = time.perf_counter() - t0
    if backend.startswith("compile"):
        out["compile_s"] = round(first_s, 2)
    if mode == "fwd":
        if backend == "eager":
            out["_out"] = first
        elif ref_out is not None:
            out["max_abs_diff_vs_eager"] = max_abs_diff(first, ref_out)
    del first
    out["ms"] = time_call(call, plan.device, plan.warmup, plan.repeats, wall=plan.timer == "wall",
                          loop=plan.timer == "loop")
    if plan.device == "cuda":
        out["peak_mb"] = peak_mb(call)
    return out


def run(plan: Any) -> list[dict[str, Any]]:
    """Every row of the ``mixers`` group."""
    rows: list[dict[str, Any]] = []
    names = [n for n in bench_cases.MIXERS if plan.selected(n)]
    for size, label, (B, T, d) in select_shapes(plan, group_shapes(GROUP, plan.device, plan.quick)):
        for name in names:
            rows += _mixer_rows(plan, name, size, label, B, T, d)
    speedups(rows)
    return rows


def speedups(rows: list[dict[str, Any]]) -> None:
    """``speedup_vs_eager``, ``speedup_vs_compile_eager`` and ``speedup_vs_peer`` (the
    mixer's peer: fla for log, accelerated_scan for signed) of every timed row."""
    add_speedups(rows, ("op", "shape", "precision", "mode"), "ms", {
        "eager": lambda r: "eager",
        "compile_eager": lambda r: "compile(eager)",
        "peer": lambda r: PEER_OF.get(r["op"]),
    })


def _mixer_rows(plan: Any, name: str, size: str, label: str, B: int, T: int,
                d: int) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    module = build(name, d, plan.device)
    backends = [*BACKENDS, *([PEER_OF[name]] if name in PEER_OF else [])]
    peer = {"fla": FlaMinGRU, "accelerated_scan": AccelSignedMinGRU}
    g = torch.Generator().manual_seed(1)
    x0 = torch.randn(B, T, d, generator=g).to(plan.device)
    for precision in plan.precisions:
        for mode in MODES:
            ref_out = None
            if mode == "fwd" and backend_status(plan, "eager") != "run":
                # eager is not timed in this run: one untimed call still gives every backend
                # its max_abs_diff_vs_eager
                try:
                    ref_out = fwd(_runner("eager", module, precision, plan.device), (x0,))()
                except Exception:
                    ref_out = None
            for backend in backends:
                status = backend_status(plan, backend)
                if status is None:
                    continue
                row: dict[str, Any] = {"group": GROUP, "op": name, "size": size, "shape": label,
                                       "precision": precision, "mode": mode, "backend": backend}
                rows.append(row)
                if status != "run":
                    row["skipped"] = status
                    continue
                try:
                    target = peer[backend](module) if backend in peer else module
                    x = x0.clone().requires_grad_(mode != "fwd")
                    runner = _runner(backend, target, precision, plan.device)
                    row.update(_measure(plan, backend, runner, x, module, mode, ref_out))
                    if "_out" in row:
                        ref_out = row.pop("_out")
                except Exception as exc:  # recorded, the run goes on
                    row["error"] = error_text(exc)
                free_memory(plan.device)
                shown = f"{row['ms']:.4g} ms" if "ms" in row else row.get("error", "")
                extra = f", compile {row['compile_s']:.1f} s" if "compile_s" in row else ""
                mem = f", peak {row['peak_mb']:.0f} MB" if row.get("peak_mb") is not None else ""
                log(f"  mixers {name:9s} {label:16s} {precision:5s} {mode:7s} {backend:16s} "
                    f"{shown}{extra}{mem}")
    del module
    free_memory(plan.device)
    return rows


def table(rows: list[dict[str, Any]], note: str) -> list[str]:
    """The markdown of the ``mixers`` group."""
    out = [f"### {GROUP}", ""] + ([note, ""] if note else [])

    def peer_ms(cell: dict[str, dict[str, Any]]) -> str:
        for p in ("fla", "accelerated_scan"):
            if "ms" in cell.get(p, {}):
                return f"{fmt_ms(cell[p]['ms'])} ({p})"
        return "—"

    def triton_vs_peer(cell: dict[str, dict[str, Any]]) -> str:
        s = cell.get("triton", {}).get("speedup_vs_peer")
        return fmt_ratio(s, 1.0)

    def peaks(cell: dict[str, dict[str, Any]]) -> str:
        vals = [f"{cell[b]['peak_mb']:.0f}" if cell.get(b, {}).get("peak_mb") is not None
                else "—" for b in ("eager", "triton", "compile(eager)")]
        return " / ".join(vals)

    def compile_s(cell: dict[str, dict[str, Any]]) -> str:
        vals = [fmt_s(cell.get(b, {}).get("compile_s")) for b in ("compile(eager)", "compile(triton)")]
        return " / ".join(vals)

    extra: list[tuple[str, Callable[[dict[str, dict[str, Any]]], str]]] = []
    if any(r.get("backend") in PEER_OF.values() and "ms" in r for r in rows):
        extra += [("peer ms", peer_ms), ("triton vs peer", triton_vs_peer)]
    if any(r.get("peak_mb") is not None for r in rows):
        extra.append(("peak MB eager / triton / compile(eager)", peaks))
    if any("compile_s" in r for r in rows):
        extra.append(("compile s (eager / triton)", compile_s))
    out += pivot_table(
        [r for r in rows if r["backend"] in BACKENDS or "ms" in r],
        ("op", "shape", "precision", "mode"), BACKENDS, "ms", "ms",
        ratios=(("triton vs eager", "eager", "triton"),
                ("triton vs compile(eager)", "compile(eager)", "triton"),
                ("compile(triton) vs compile(eager)", "compile(eager)", "compile(triton)")),
        extra=extra)
    return [*out, "", *notes_lines(rows)]
