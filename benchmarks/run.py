"""The one benchmark runner: ``mingru bench`` and ``python -m mingru_benchmarks.run``.

Runs the chosen suites (default ``headline``), prints their tables, and writes ``bench.json``
(every row, with the environment and the command), ``bench.md`` and ``bench.png`` (when
matplotlib is installed) to ``--out``; ``--json-out DIR`` also writes ``DIR/<suite>.json``, the
input of :mod:`mingru_benchmarks.page`. Every ratio compares timings of one run.

Imports no framework until it runs: the parser and ``--help`` are pure Python.

Example:
    $ mingru bench --device cpu --quick --suite ops --out /tmp/bench
    $ python -m mingru_benchmarks.run --suite headline --json-out docs/benchmarks/h100
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mingru_benchmarks import registry, tables, timers
from mingru_benchmarks.registry import Case, Skip

__all__ = ["build_parser", "main", "run"]

PRECISIONS = {"fp32": "fp32", "float32": "fp32", "bf16": "bf16", "bfloat16": "bf16"}
VERSIONS = ("torch", "triton", "jax", "jax-triton", "flax", "fla-core", "accelerated-scan",
            "mingru-pytorch", "transformers", "mingru-scans")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, no usage block
        raise ValueError(message)


def build_parser(prog: str = "python -m mingru_benchmarks.run") -> argparse.ArgumentParser:
    """The flags of ``mingru bench`` (pure Python)."""
    p = _Parser(prog=prog, description="Time the library's ops, mixers and training step "
                "against eager PyTorch, torch.compile, peers and the JAX frontend; write JSON, "
                "markdown and a plot.")
    p.add_argument("--suite", "--groups", dest="suite", default="headline",
                   help=f"comma-separated suites: {', '.join(registry.SUITES)} (default headline)")
    p.add_argument("--only", "--ops", dest="only", default=None,
                   help="comma-separated case names (an op, a mixer class, a hook; a name's "
                        "first word matches too, e.g. delta_rule)")
    p.add_argument("--backends", default=None,
                   help=f"comma-separated backends, among {', '.join(registry.BACKENDS)} "
                        "(default: every one the case has, triton only in host)")
    p.add_argument("--dtype", default=None, help="comma-separated precisions: fp32, bf16")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="default: cuda when available")
    p.add_argument("--quick", action="store_true",
                   help="tiny shapes, no torch.compile unless named (a smoke run)")
    p.add_argument("--warmup", type=int, default=None, help="untimed calls (wall-clock timers)")
    p.add_argument("--repeats", type=int, default=None,
                   help="timed calls (wall-clock timers; the rounds of the hooks suite)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    p.add_argument("--out", default="mingru-bench", help="folder for bench.json, bench.md, "
                   "bench.png (default ./mingru-bench)")
    p.add_argument("--json-out", default=None, help="also write the JSON to this .json file, or "
                   "to DIR/<suite>.json (the input of python -m mingru_benchmarks.page)")
    return p


def _split(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


@dataclass
class Settings:
    """The resolved flags."""

    suites: list[str]
    device: str
    quick: bool
    warmup: int
    repeats: int
    only: list[str]
    backends: list[str] | None
    precisions: list[str] | None


def _check(names: list[str], valid: tuple[str, ...] | list[str], flag: str) -> None:
    bad = [n for n in names if n not in valid]
    if bad:
        raise ValueError(f"{flag}: unknown {', '.join(map(repr, bad))}; choose from "
                         f"{', '.join(dict.fromkeys(valid))}")


def _needs_torch(suites: list[str], backends: list[str] | None) -> bool:
    """Whether the run has PyTorch rows (only the ``jax`` suite without ``ours`` has none)."""
    return suites != ["jax"] or backends is None or "ours" in backends


def _torch() -> Any:
    """``torch``, or ``None`` when it is not installed."""
    try:
        import torch
    except ImportError:
        return None
    return torch


def _jax_has_gpu() -> bool:
    try:
        import jax

        return bool(jax.devices("gpu"))
    except (ImportError, RuntimeError):
        return False


def settings(args: argparse.Namespace) -> Settings:
    """Validate the flags; errors name the flag."""
    suites = _split(args.suite) or ["headline"]
    _check(suites, registry.SUITES, "--suite")
    backends = _split(args.backends) or None
    _check(backends or [], registry.BACKENDS, "--backends")
    precisions = [PRECISIONS.get(p, p) for p in _split(args.dtype)] or None
    _check(precisions or [], list(PRECISIONS), "--dtype")
    for flag, least in (("warmup", 0), ("repeats", 1), ("threads", 1)):
        if getattr(args, flag) is not None and getattr(args, flag) < least:
            raise ValueError(f"--{flag} must be at least {least}; got {getattr(args, flag)}")
    device = args.device
    torch = _torch() if _needs_torch(suites, backends) else None
    if torch is None and suites != ["jax"]:
        raise RuntimeError("needs PyTorch, which is not installed: pip install '.[torch]' "
                           "(--suite jax runs without it)")
    if torch is not None:
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        if device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda was asked for but CUDA is not available")
        if args.threads:
            torch.set_num_threads(args.threads)
    elif device == "cuda" and not _jax_has_gpu():  # the jax suite: JAX says if there is a GPU
        raise RuntimeError("--device cuda was asked for but JAX sees no GPU")
    device = device or "cpu"
    cpu_counts = (1, 3) if args.quick else (2, 7)
    warmup, repeats = cpu_counts if device == "cpu" else (3, 10)
    return Settings(suites, device, args.quick, warmup if args.warmup is None else args.warmup,
                    repeats if args.repeats is None else args.repeats, _split(args.only),
                    backends, precisions)


def select(s: Settings) -> list[Case]:
    """The cases the flags keep; an ``--only`` name that matches nothing is an error."""
    every = [c for suite in s.suites for c in registry.cases(suite, s.device, s.quick)]
    keep = [c for c in every if (not s.only or c.name in s.only or c.name.split()[0] in s.only)
            and (not s.precisions or c.precision in s.precisions)]
    unknown = [o for o in s.only if not any(o in (c.name, c.name.split()[0]) for c in every)]
    if unknown:
        names = dict.fromkeys(c.name for c in every)
        raise ValueError(f"--only: {', '.join(map(repr, unknown))} names no case of "
                         f"{', '.join(s.suites)}; valid: {', '.join(names)}")
    if not keep:
        raise ValueError("--dtype: no case of the chosen suites has that precision")
    return keep


def backends_for(case: Case, s: Settings) -> list[tuple[str, str | None]]:
    """``(backend, why not)`` of every backend the case runs (``None``: it runs)."""
    out = []
    for b in case.backends:
        if s.backends is not None and b not in s.backends:
            continue
        if s.backends is None and b == "triton" and case.suite != "host":
            continue  # the kernels are ``ours`` wherever they serve; forcing them is opt-in
        named = s.backends is not None and b in s.backends
        out.append((b, "--quick" if b == "compile" and s.quick and not named else None))
    return out


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _time(case: Case, backend: str, mode: str, s: Settings) -> dict[str, Any]:
    """One row's measurement: ``ms`` (and ``enqueue_ms``, ``first_s``, extra fields)."""
    if case.suite == "decode":  # times whole generate() calls its own way
        from mingru_benchmarks import decode

        return decode.measure(case, backend, s.device, s.warmup, s.repeats)
    jax = backend.startswith("jax")
    if jax:
        from mingru_benchmarks import jax_side as side
    else:
        if _torch() is None:
            raise Skip("torch not installed")
        from mingru_benchmarks import torch_side as side  # type: ignore[no-redef]
    call, extra = side.timed_call(case, backend, mode, s.device)
    if jax:
        import jax as jax_module

        finish: Any = jax_module.block_until_ready
    else:
        finish = timers.torch_sync(s.device)
    t0 = time.perf_counter()
    finish(call())  # compiles and warms up outside the timing
    row: dict[str, Any] = {"first_s": round(time.perf_counter() - t0, 2), **extra}
    if case.suite == "host":
        calls = 10 if s.quick else 200
        row["ms"], row["enqueue_ms"] = timers.host(call, finish, calls, min(s.repeats, 5))
    elif jax:
        row["ms"] = timers.jax_time(call, s.warmup, s.repeats)
    elif case.suite == "jax":  # PyTorch against JAX: the same wall clock with a sync
        row["ms"] = timers.wall(call, finish, s.warmup, s.repeats)
    else:
        rep = 1000 if case.suite == "train-step" else 100
        row["ms"] = timers.torch_time(call, s.device, s.warmup, s.repeats, rep_ms=rep)
    return row


def _free(device: str) -> None:
    if device == "cuda" and "torch" in sys.modules:
        import torch

        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def run_case(case: Case, s: Settings) -> list[dict[str, Any]]:
    """Every row of one case: a time, an error, or why a backend was skipped."""
    base = {"suite": case.suite, "case": case.name, "shape": case.shape,
            "precision": case.precision}
    if case.suite == "hooks":
        try:
            from mingru_benchmarks import torch_side

            found = torch_side.hook_rows(case, s.device, s.repeats)
        except Skip as why:
            found = [{"backend": b, "skipped": str(why)} for b in ("on", "off")]
        except Exception as exc:
            found = [{"backend": "off", "error": _error(exc)}]
        rows = [{**base, "mode": "step", **r} for r in found]
        _log(f"  hooks {case.name}: " + ", ".join(_shown(r) for r in rows))
        return rows
    rows = []
    for mode in case.modes:
        for backend, why in backends_for(case, s):
            if case.suite == "decode" and (mode == "prefill") != (backend in registry.PREFILL_BACKENDS):
                continue
            row = {**base, "mode": mode, "backend": backend}
            try:
                if why:
                    raise Skip(why)
                row.update(_time(case, backend, mode, s))
            except Skip as skip:
                row["skipped"] = str(skip)
            except Exception as exc:  # recorded, the run goes on
                row["error"] = _error(exc)
            _free(s.device)
            rows.append(row)
            _log(f"  {case.suite:12s} {case.name:20s} {case.shape:18s} {case.precision} "
                 f"{mode:7s} {backend:16s} {_shown(row)}")
    return rows


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def _shown(row: dict[str, Any]) -> str:
    if "ms" in row:
        return f"{row['ms']:.4g} ms" + (f" (first {row['first_s']} s)" if "first_s" in row else "")
    return row.get("skipped") or row.get("error", "")


def environment(device: str) -> dict[str, Any]:
    """GPU, versions, commit and date of this run (versions from package metadata)."""
    env: dict[str, Any] = {"date": datetime.datetime.now(datetime.timezone.utc).strftime(
        "%Y-%m-%d %H:%M UTC"), "python": platform.python_version(), "device": device,
        "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    for dist in VERSIONS:
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = None
    env["gpu"] = None
    if device.startswith("cuda") and "torch" in sys.modules:
        import torch

        env["gpu"] = torch.cuda.get_device_name(torch.device(device))
    # MINGRU_COMMIT names the commit where the tree was copied without its git metadata.
    env["commit"] = os.environ.get("MINGRU_COMMIT")
    if not env["commit"]:
        try:
            env["commit"] = subprocess.run(
                ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                timeout=5, cwd=Path(__file__).resolve().parent).stdout.strip() or None
        except (OSError, subprocess.SubprocessError):
            env["commit"] = None
    return env


def run(s: Settings, command: str, out: Path | None = None) -> dict[str, Any]:
    """Run every selected case; the JSON-ready result (also written to ``out/bench.json``
    after every case, so a run cut short keeps what it measured)."""
    cases = select(s)
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # JAX shares the GPU
    started = time.perf_counter()
    _log(f"{command}: {len(cases)} cases on {s.device}")
    result: dict[str, Any] = {"suites": s.suites, "command": command, "settings": {
        "device": s.device, "quick": s.quick, "warmup": s.warmup, "repeats": s.repeats,
        "only": s.only, "backends": s.backends, "precisions": s.precisions},
        "environment": environment(s.device), "rows": []}
    if any(c.suite == "memory-floor" for c in cases):
        from mingru_benchmarks import torch_side

        result["bandwidth_GBps"] = torch_side.copy_bandwidth(s.device) / 1e9
    for case in cases:
        for row in run_case(case, s):
            if "bytes" in row and "ms" in row:
                row["floor_ms"] = row["bytes"] / (result["bandwidth_GBps"] * 1e9) * 1e3
            result["rows"].append(row)
        result["seconds"] = round(time.perf_counter() - started, 1)
        if out is not None:
            out.mkdir(parents=True, exist_ok=True)
            (out / "bench.json").write_text(json.dumps(result, indent=1, default=str) + "\n")
    return result


def write(result: dict[str, Any], out: Path, json_out: str | None) -> list[Path]:
    """``bench.json``, ``bench.md`` and ``bench.png`` in ``out`` (and the ``--json-out`` copy)."""
    out.mkdir(parents=True, exist_ok=True)
    text = json.dumps(result, indent=1, default=str) + "\n"
    written = [out / "bench.json", out / "bench.md"]
    written[0].write_text(text)
    written[1].write_text(tables.markdown(result) + "\n")
    if tables.plot(result, out / "bench.png"):
        written.append(out / "bench.png")
    if json_out:  # a .json file, or a folder for <suite>.json
        path = Path(json_out)
        path = path if path.suffix == ".json" else path / f"{'+'.join(result['suites'])}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None, prog: str = "python -m mingru_benchmarks.run") -> int:
    """Parse ``argv``, run, print the tables and write the files; errors are one line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        args = build_parser(prog).parse_args(argv)
        result = run(settings(args), f"{prog} {shlex.join(argv)}".strip(), Path(args.out))
        print(tables.markdown(result))
        _log("wrote " + ", ".join(map(str, write(result, Path(args.out), args.json_out))))
    except (ValueError, RuntimeError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
