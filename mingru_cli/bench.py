"""``mingru bench``: time the scans and mixers on every backend that can run here.

Backends: ``loop`` (a plain sequential PyTorch loop, the baseline), ``eager`` (the library's
parallel scans in PyTorch), ``compile`` (``torch.compile`` of the eager code), ``triton``
(the fused kernels, CUDA or ``TRITON_INTERPRET=1``), ``jax`` and ``jax-triton`` (the
``mingru_jax`` twins, when JAX is installed), and peer kernels (``accelerated_scan``,
``fla``) when they are installed and CUDA is present.

Each timing is the median of repeated calls after warm-up: ``triton.testing.do_bench`` on CUDA
(CUDA events when Triton is missing), ``time.perf_counter`` on CPU. ``fwd`` runs under
``no_grad``; ``fwd+bwd`` is forward then ``.float().sum().backward()`` over every output.
Ratios in the tables are always between timings taken in the same run.

The model-level groups ``mixers``, ``train-step`` and ``host`` (opt-in with ``--groups``) run
through their own modules (:mod:`mingru_cli.bench_mixers`, :mod:`mingru_cli.bench_train`,
:mod:`mingru_cli.bench_host`), registered in ``MODEL_GROUPS``; their rows land in the same
``bench.json`` / ``bench.md``. The timers are shared (:mod:`mingru_cli.bench_common`).

Example:
    $ mingru bench --device cpu --quick --out bench-out
    $ mingru bench --device cuda --groups mixers,train-step,host --out bench-models
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from mingru_cli import bench_cases, bench_common, bench_host, bench_mixers, bench_train
from mingru_cli._bench_args import add_arguments
from mingru_cli.bench_plans import Plan, make_plan

__all__ = ["add_arguments", "run", "run_from_args", "time_call", "to_markdown"]

PEERS = ("accelerated_scan", "fla")
# The model-level groups: each module has run(plan) -> rows and table(rows, note) -> lines.
MODEL_GROUPS = {"mixers": bench_mixers, "train-step": bench_train, "host": bench_host}
# Groups whose forward rows get a bandwidth floor (ops whose bytes are just inputs + outputs).
FLOOR_GROUPS = ("gpu-scans", "gpu-huge", "gpu-fused")


def run_from_args(args: argparse.Namespace) -> int:
    # JAX would otherwise reserve most of the GPU memory at import, starving PyTorch.
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    threads = torch.get_num_threads()
    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"--threads must be ≥ 1; got {args.threads}")
        torch.set_num_threads(args.threads)
    try:
        return _run_and_write(args, device)
    finally:
        torch.set_num_threads(threads)


def _run_and_write(args: argparse.Namespace, device: str) -> int:
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda was asked for but CUDA is not available")
    plan = make_plan(
        device, quick=args.quick, dtype=getattr(torch, args.dtype),
        groups=_split(args.groups), backends=_split(args.backends),
        repeats=args.repeats, warmup=args.warmup, ops=_split(args.ops),
        shapes=_split(getattr(args, "shapes", None)),
        precisions=_split(getattr(args, "precisions", None)),
        profile_steps=getattr(args, "profile_steps", 2),
    )
    plan.timer = args.timer
    plan.backward_in_thread = bool(getattr(args, "backward_in_thread", False))
    if plan.backward_in_thread and "train-step" in plan.notes:
        plan.notes["train-step"] += (" Every step's backward ran on the calling thread "
                                     "(`--backward-in-thread`).")
    result = run(plan, command=getattr(args, "command_line", None))
    md = to_markdown(result)
    print(md)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "bench.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    (out / "bench.md").write_text(md + "\n")
    written = [out / "bench.json", out / "bench.md"]
    if save_plot(result, out / "bench.png"):
        written.append(out / "bench.png")
    print("wrote " + ", ".join(str(w) for w in written), file=sys.stderr)
    return 0


def _split(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


# --------------------------------------------------------------------------- timing


# The timers and callables live in mingru_cli.bench_common (shared with the model-level
# groups); these names stay importable from here.
_sync = bench_common.sync
time_call = bench_common.time_call


def _timer_name(plan: Plan) -> str:
    if plan.timer == "loop":
        return (f"time.perf_counter over {bench_common.LOOP_CALLS} calls issued back to back, "
                "one device sync per round (ms per call, median of rounds), every backend")
    if plan.device != "cuda" or plan.timer == "wall":
        return "time.perf_counter with a device sync per call (median), every backend"
    return ("triton.testing.do_bench (median) for PyTorch; wall clock around "
            "block_until_ready for JAX")


def copy_bandwidth(device: str, repeats: int = 5) -> float:
    """Measured device copy bandwidth in bytes/s: a large ``clone`` (read + write)."""
    n = (1 << 28) if device == "cuda" else (1 << 24)
    x = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0)
    ms = time_call(lambda: x.clone(), device, warmup=2, repeats=repeats)
    return 2 * n * 4 / (ms * 1e-3)


def _nbytes(ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in bench_cases.all_outputs(ts))


def _fwd_bwd(run: Callable[..., Any], xs: bench_cases.Tensors,
             module: torch.nn.Module | None) -> Callable[[], None]:
    return bench_common.fwd_bwd(run, xs, module)


_fwd = bench_common.fwd
_peak_mb = bench_common.peak_mb
_max_diff = bench_common.max_abs_diff


# --------------------------------------------------------------------------- running


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _run_case(case: bench_cases.Case, plan: Plan, bandwidth: float | None) -> list[dict[str, Any]]:
    rows = []
    for mode in case.modes:
        ref_out = None
        for backend, runner in case.runners.items():
            row: dict[str, Any] = {"group": case.group, "op": case.op, "shape": case.shape,
                                   "mode": mode, "backend": backend}
            started = time.perf_counter()
            try:
                row.update(_time_backend(case, plan, mode, backend, runner, ref_out))
                if backend == "eager" and mode == "fwd":
                    ref_out = row.pop("_out", None)
                row.pop("_out", None)
            except Exception as exc:  # a backend that cannot run this case is recorded, not fatal
                row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            if mode == "fwd" and bandwidth and "io_bytes" in row and case.group in FLOOR_GROUPS:
                row["floor_ms"] = row["io_bytes"] / bandwidth * 1e3
            if row.get("ms"):
                row.update(_floors(case, mode, bandwidth, row["ms"]))
            rows.append(row)
            if plan.device == "cuda":
                torch.cuda.empty_cache()  # leave room for the next backend (JAX allocates too)
            shown = f"{row['ms']:.4g} ms" if "ms" in row else row.get("error", "")
            mem = f", peak {row['peak_mb']:.1f} MB" if row.get("peak_mb") is not None else ""
            # The row's wall time (compiles, checks and timing) says where a long run went.
            took = f" [{time.perf_counter() - started:.1f} s]"
            _log(f"  {case.group:11s} {case.op:19s} {case.shape:22s} {mode:7s} {backend:16s} "
                 f"{shown}{mem}{took}")
        for backend, why in case.skip.items():
            rows.append({"group": case.group, "op": case.op, "shape": case.shape, "mode": mode,
                         "backend": backend, "skipped": why})
    return rows


def _time_backend(case: bench_cases.Case, plan: Plan, mode: str, backend: str, runner: Any,
                  ref_out: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if backend.startswith("jax"):
        import jax

        make, factory = runner
        xs = make(mode != "fwd")
        f = factory(mode)
        call = lambda: jax.block_until_ready(f(*xs))
        call()  # trace + compile outside the timing
        if plan.timer == "loop":
            out["ms"] = bench_common.time_loop(lambda: f(*xs), jax.block_until_ready,
                                               plan.warmup, plan.repeats)
        else:
            out["ms"] = time_call(call, plan.device, plan.warmup, plan.repeats, wall=True)
        return out
    if isinstance(runner, tuple):  # peers bring their own input layout
        make, run = runner
    else:
        make, run = case.make, runner
    xs = make(mode != "fwd")
    if mode == "fwd":
        call = _fwd(run, xs)
        first = call()
        out["io_bytes"] = _nbytes(xs) + _nbytes(first)
        if backend == "eager":
            out["_out"] = first
        elif ref_out is not None and not isinstance(runner, tuple):
            out["max_abs_diff_vs_eager"] = _max_diff(first, ref_out)
        if case.reference is not None:
            out["err_vs_f64"] = _rel_err_vs(bench_cases.all_outputs(first)[0], case.reference())
        del first
    else:
        call = _fwd_bwd(run, xs, case.module)
        call()
    _sync(plan.device)
    out["ms"] = time_call(call, plan.device, plan.warmup, plan.repeats,
                          wall=plan.timer == "wall", loop=plan.timer == "loop")
    if case.flops.get(mode) and out["ms"]:
        out["tflops"] = case.flops[mode] / (out["ms"] * 1e-3) / 1e12
    if plan.device == "cuda" and case.group in plan.memory_groups:
        out["peak_mb"] = _peak_mb(call)
    return out


def _rel_err_vs(got: torch.Tensor, want: torch.Tensor) -> float:
    """``max |got − want| / max |want|`` in float64 (the tests' relative error)."""
    got, want = got.double(), want.double().to(got.device)
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-300))


def _floors(case: bench_cases.Case, mode: str, bandwidth: float | None,
            ms: float) -> dict[str, float]:
    """The memory and compute floors of a row whose case states its bytes and FLOP ceiling,
    and the fraction of the larger floor the measured time reaches."""
    out = {}
    if bandwidth and case.bytes_moved.get(mode):
        out["mem_floor_ms"] = case.bytes_moved[mode] / bandwidth * 1e3
    if case.peak_flops and case.flops.get(mode):
        out["compute_floor_ms"] = case.flops[mode] / case.peak_flops * 1e3
    if out:
        out["floor_frac"] = max(out.values()) / ms
    return out


def environment(device: str) -> dict[str, Any]:
    import mingru

    env: dict[str, Any] = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(), "torch": torch.__version__,
        "mingru": mingru.__version__, "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
        "device": device,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
        "cuda": torch.version.cuda, "cudnn": torch.backends.cudnn.version() if device == "cuda" else None,
        "MINGRU_SCAN": os.environ.get("MINGRU_SCAN", ""),
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", ""),
    }
    for mod in ("triton", "jax", "flax", "accelerated_scan", "fla"):
        try:
            env[mod] = getattr(__import__(mod), "__version__", "?")
        except Exception:
            env[mod] = None
    # MINGRU_COMMIT names the commit when the tree was copied without (or with stale) git
    # metadata, as on a machine the working tree is shipped to.
    env["commit"] = os.environ.get("MINGRU_COMMIT") or None
    try:
        env["commit"] = env["commit"] or subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip() or None
    except Exception:
        env["commit"] = None
    return env


def run(plan: Plan, command: str | None = None) -> dict[str, Any]:
    """Run every case of ``plan``; returns the JSON-ready result."""
    env = environment(plan.device)
    _log(f"mingru bench on {env['gpu'] or env['processor']} ({plan.device}, {plan.dtype}), "
         f"groups {', '.join(plan.groups)}")
    bandwidth = copy_bandwidth(plan.device) if plan.bandwidth else None
    rows: list[dict[str, Any]] = []
    started = time.perf_counter()
    for group in plan.groups:
        if group in MODEL_GROUPS:
            rows += MODEL_GROUPS[group].run(plan)
            continue
        for case in plan.cases([group]):
            rows += _run_case(case, plan, bandwidth)
    return {
        "command": command, "environment": env,
        "settings": {"device": plan.device, "dtype": str(plan.dtype).replace("torch.", ""),
                     "quick": plan.quick, "warmup": plan.warmup, "repeats": plan.repeats,
                     "groups": plan.groups, "backends": plan.backends,
                     "ops": plan.ops, "shapes": plan.shapes,
                     "precisions": list(plan.precisions), "profile_steps": plan.profile_steps,
                     "backward_in_thread": plan.backward_in_thread,
                     "timer": _timer_name(plan)},
        "copy_bandwidth_GBps": bandwidth / 1e9 if bandwidth else None,
        "seconds": round(time.perf_counter() - started, 1),
        "group_notes": {g: plan.notes.get(g, "") for g in plan.groups},
        "rows": rows,
    }


# --------------------------------------------------------------------------- reporting

ORDER = ("loop", "eager", "compile", "triton", "jax", "jax-triton", "accelerated_scan", "fla")


def _fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms:.3g}" if ms < 100 else f"{ms:.0f}"


def _ratio(num: float | None, den: float | None) -> str:
    if not num or not den:
        return "—"
    return f"{num / den:.2f}×"


def to_markdown(result: dict[str, Any]) -> str:
    """One table per group: median ms per backend, then ratios from the same run."""
    env = result["environment"]
    lines = [
        f"Device: {env['gpu'] or env['processor']} ({env['device']}, {env['cpu_count']} CPU cores); "
        f"python {env['python']}, torch {env['torch']}, triton {env['triton']}, jax {env['jax']}; "
        f"commit {env['commit']}; {env['date']}.",
        f"Timer: {result['settings']['timer']}; dtype {result['settings']['dtype']}"
        + (f"; copy bandwidth {result['copy_bandwidth_GBps']:.0f} GB/s"
           if result.get("copy_bandwidth_GBps") else "") + ".",
        "",
    ]
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in result["rows"]:
        groups.setdefault(row["group"], []).append(row)
    for group, rows in groups.items():
        note = result["group_notes"].get(group, "")
        if group in MODEL_GROUPS:
            lines += MODEL_GROUPS[group].table(rows, note)
        else:
            lines += _group_table(group, rows, note)
    return "\n".join(lines).rstrip()


def _group_table(group: str, rows: list[dict[str, Any]], note: str) -> list[str]:
    backends = [b for b in ORDER if any(r["backend"] == b and "ms" in r for r in rows)]
    has_floor = any("floor_ms" in r for r in rows)
    has_mem = any(r.get("peak_mb") is not None for r in rows)
    rate_backends = [b for b in backends if any(r["backend"] == b and "tflops" in r for r in rows)]
    floor_backends = [b for b in backends
                      if any(r["backend"] == b and "floor_frac" in r for r in rows)]
    floor_cols = [c for c in ("mem_floor_ms", "compute_floor_ms") if any(c in r for r in rows)]
    err_backends = [b for b in backends if any(r["backend"] == b and "err_vs_f64" in r for r in rows)]
    ratios = []
    if "loop" in backends and "eager" in backends:
        ratios.append(("eager vs loop", "loop", "eager"))
    fast = "triton" if "triton" in backends else ("compile" if "compile" in backends else None)
    if fast == "triton":
        ratios.append(("triton vs eager", "eager", "triton"))
        for other in ("compile", "accelerated_scan", "fla", "jax"):
            if other in backends:
                ratios.append((f"triton vs {other}", other, "triton"))
    elif fast == "compile":
        ratios.append(("compile vs eager", "eager", "compile"))
    if "jax" in backends and "eager" in backends and fast != "triton":
        ratios.append(("jax vs eager", "eager", "jax"))
    if "jax-triton" in backends and "jax" in backends:
        ratios.append(("jax-triton vs jax", "jax", "jax-triton"))
    if "jax-triton" in backends and "triton" in backends:
        ratios.append(("jax-triton vs triton", "triton", "jax-triton"))
    header = ["op", "shape", "mode", *[f"{b} ms" for b in backends]]
    if has_floor:
        header.append("bw floor ms")
    header += [r[0] for r in ratios]
    header += [f"{b} TFLOP/s" for b in rate_backends]
    header += [c.removesuffix("_ms").replace("_", " ") + " ms" for c in floor_cols]
    header += [f"{b} % floor" for b in floor_backends]
    header += [f"{b} err vs f64" for b in err_backends]
    if has_mem:
        header += [f"{b} peak MB" for b in backends if any(
            r["backend"] == b and r.get("peak_mb") is not None for r in rows)]
    out = [f"### {group}", ""]
    if note:
        out += [note, ""]
    out += ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys: list[tuple[str, str, str]] = []
    for r in rows:
        key = (r["op"], r["shape"], r["mode"])
        if key not in keys:
            keys.append(key)
    errors = []
    for key in keys:
        cell = {r["backend"]: r for r in rows if (r["op"], r["shape"], r["mode"]) == key}
        ms = {b: cell[b].get("ms") for b in backends if b in cell}
        line = [*key, *[_fmt_ms(ms.get(b)) for b in backends]]
        if has_floor:
            floors = [c["floor_ms"] for c in cell.values() if "floor_ms" in c]
            line.append(_fmt_ms(min(floors)) if floors else "—")
        line += [_ratio(ms.get(num), ms.get(den)) for _, num, den in ratios]
        line += [f"{cell[b]['tflops']:.1f}" if "tflops" in cell.get(b, {}) else "—"
                 for b in rate_backends]
        for col in floor_cols:
            vals = [c[col] for c in cell.values() if col in c]
            line.append(_fmt_ms(vals[0]) if vals else "—")
        line += [f"{100 * cell[b]['floor_frac']:.1f}" if "floor_frac" in cell.get(b, {}) else "—"
                 for b in floor_backends]
        line += [f"{cell[b]['err_vs_f64']:.2g}" if "err_vs_f64" in cell.get(b, {}) else "—"
                 for b in err_backends]
        if has_mem:
            for b in backends:
                if any(r["backend"] == b and r.get("peak_mb") is not None for r in rows):
                    pm = cell.get(b, {}).get("peak_mb")
                    line.append(f"{pm:.1f}" if pm is not None else "—")
        out.append("| " + " | ".join(line) + " |")
        for b, c in cell.items():
            if "error" in c:
                errors.append(f"{key[0]} {key[1]} {key[2]} {b}: {c['error']}")
    skipped = sorted({f"{r['backend']}: {r['skipped']}" for r in rows if "skipped" in r})
    out.append("")
    if errors:
        out += ["Errors (backend could not run the case):", ""]
        out += [f"- {e}" for e in errors] + [""]
    if skipped:
        out += ["Not run here: " + "; ".join(skipped) + ".", ""]
    return out


def save_plot(result: dict[str, Any], path: Path) -> bool:
    """Grouped bars of median time per backend (log scale), one panel per group."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in result["rows"]:
        if "ms" in row:
            groups.setdefault(row["group"], []).append(row)
    if not groups:
        return False
    order = (*ORDER, *dict.fromkeys(r["backend"] for rows in groups.values() for r in rows))
    fig, axes = plt.subplots(len(groups), 1, figsize=(11, 3.6 * len(groups)), dpi=100,
                             squeeze=False)
    for ax, (group, rows) in zip(axes[:, 0], groups.items(), strict=True):
        keys: list[tuple[str, ...]] = []
        for r in rows:
            key = _plot_key(r)
            if key not in keys:
                keys.append(key)
        backends = [b for b in dict.fromkeys(order) if any(r["backend"] == b for r in rows)]
        width = 0.8 / max(1, len(backends))
        for i, b in enumerate(backends):
            ys = [next((r["ms"] for r in rows if r["backend"] == b
                        and _plot_key(r) == k), 0.0) for k in keys]
            ax.bar([j + i * width for j in range(len(keys))], ys, width, label=b)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(keys))])
        ax.set_xticklabels(["\n".join(k) for k in keys], fontsize=6)
        ax.set_yscale("log")
        ax.set_ylabel("median ms (log)")
        ax.set_title(group)
        ax.legend(fontsize=7, ncol=min(len(backends), 6))
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def _plot_key(row: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(row[k]) for k in ("op", "shape", "precision", "mode") if k in row)
