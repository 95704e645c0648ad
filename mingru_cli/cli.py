"""The ``mingru`` command line (also ``python -m mingru_cli`` and ``python -m mingru``).

Commands:

* ``mingru info``  — which frontends are installed (``mingru`` for PyTorch, ``mingru_jax`` for
  Flax) and the backend status of each, versions, GPU, and the ``MINGRU_SCAN`` mode in force.
* ``mingru train`` — train small models on synthetic state-tracking tasks and print accuracy
  per evaluation length (see :mod:`mingru_cli.train`); ``--task lm --data FILE --out DIR``
  trains a byte-level ``MinGRULM`` on a text file and saves it (:func:`mingru_cli.runner.run_lm`).
* ``mingru generate`` — continue a prompt with such a checkpoint
  (:func:`mingru_cli.runner.generate_text`).
* ``mingru bench`` — the benchmark harness (:mod:`mingru_benchmarks.run`: its flags, its runs).

Importing this module, building the parser, ``--help`` and ``info`` import neither torch nor
jax up front: ``info`` imports each framework only to report on it (and reports a missing one
as not installed). ``train``/``generate --framework torch`` and the torch suites of ``bench``
import torch when they run and exit with a one-line error when it is missing;
``train``/``generate --framework jax`` and ``bench --suite jax`` run without it.

Example:
    >>> from mingru_cli.cli import main
    >>> main(["info"])  # doctest: +SKIP
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import shlex
import sys
from typing import Any

from mingru_cli._train_args import add_train_parser, train_config

__all__ = ["build_parser", "info", "main"]

TORCH_MISSING = "not installed (pip install '.[torch]')"
JAX_MISSING = "not installed (pip install '.[jax]')"
FRONTENDS = {"mingru": "mingru (PyTorch)", "mingru_jax": "mingru_jax (Flax)"}


def _module_version(name: str) -> str | None:
    """The version of an importable module, or ``None`` when it is not installed."""
    try:
        mod = importlib.import_module(name)
    except Exception:
        return None
    return str(getattr(mod, "__version__", "unknown"))


def _package_version() -> str:
    """The installed ``mingru-scans`` version (read from package metadata, no imports)."""
    try:
        return importlib.metadata.version("mingru-scans")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _scan_mode() -> str:
    """``MINGRU_SCAN`` as both frontends read it, or why it is invalid."""
    from mingru_kernels._seam import env_mode

    try:
        return env_mode()
    except ValueError as exc:  # a bad MINGRU_SCAN value: report it rather than crash
        return f"invalid: {exc}"


def _frontend(name: str, framework: str, missing: str) -> tuple[str | None, bool | str]:
    """``(version, available())`` of frontend ``name``; the version is ``None`` (and the
    status says why) when it cannot be imported. Never raises."""
    try:
        importlib.import_module(framework)
    except ModuleNotFoundError as exc:
        if exc.name == framework:
            return None, missing
        return None, f"{framework} fails to import: {type(exc).__name__}: {exc}"
    except Exception as exc:  # a broken framework install: say so, do not call it missing
        return None, f"{framework} fails to import: {type(exc).__name__}: {exc}"
    try:
        mod = importlib.import_module(name)
        available = mod.available
    except Exception as exc:
        return None, f"{name} not importable: {type(exc).__name__}: {exc}"
    version = str(getattr(mod, "__version__", "unknown"))
    try:
        return version, available()
    except Exception as exc:  # report, never crash `info`
        return version, f"{name}.available() raised: {exc}"


def info() -> dict[str, Any]:
    """Collect what ``mingru info`` prints: installed frontends, versions, devices, backend
    status, dispatch mode. Works with either framework alone (or none)."""
    mingru_version, mingru_status = _frontend("mingru", "torch", TORCH_MISSING)
    jax_version, jax_status = _frontend("mingru_jax", "jax", JAX_MISSING)
    data: dict[str, Any] = {
        "mingru-scans": _package_version(),
        "frontends": [name for name, v in (("mingru", mingru_version),
                                           ("mingru_jax", jax_version)) if v is not None],
        "mingru": mingru_version,
        "mingru_jax": jax_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "torch": _module_version("torch"),
        "triton": _module_version("triton"),
        "jax": _module_version("jax"),
        "flax": _module_version("flax"),
        "cuda_available": None,
        "gpu": None,
        "cpu_count": os.cpu_count(),
        "TRITON_INTERPRET": os.environ.get("TRITON_INTERPRET", ""),
        "MINGRU_SCAN": _scan_mode(),
        "mingru.available": mingru_status,
        "mingru_jax.available": jax_status,
    }
    if data["torch"] is not None:
        import torch

        data["cuda_available"] = torch.cuda.is_available()
        data["gpu"] = torch.cuda.get_device_name(0) if data["cuda_available"] else None
    if data["jax"] is not None:
        try:
            import jax

            devices = jax.devices()
            data["jax_devices"] = [str(d) for d in devices]
            if data["gpu"] is None:
                gpus = [d for d in devices if d.platform == "gpu"]
                data["gpu"] = gpus[0].device_kind if gpus else None
        except Exception as exc:  # pragma: no cover - broken jax install
            data["jax_devices"] = f"error: {exc}"
    return data


def _print_info(data: dict[str, Any]) -> None:
    def show(name: str) -> str:
        status = data[f"{name}.available"]
        if data[name] is None:  # not installed / not importable: the status says why
            return str(status)
        if status is True:
            return "available (Triton kernels can serve)"
        return f"eager only — {status}"

    present = [FRONTENDS[n] for n in data["frontends"]]
    rows = [
        ("mingru-scans", data["mingru-scans"]),
        ("frontends", ", ".join(present) if present
         else "none (pip install '.[torch]' and/or '.[jax]')"),
        ("python", data["python"]),
        ("platform", data["platform"]),
        ("torch", data["torch"] or TORCH_MISSING),
        ("triton", data["triton"] or "not installed"),
        ("jax", data["jax"] or JAX_MISSING),
        ("flax", data["flax"] or "not installed"),
        ("GPU", data["gpu"] or "none (no CUDA device found)"),
        ("CPU cores", data["cpu_count"]),
        ("MINGRU_SCAN", data["MINGRU_SCAN"]),
        ("TRITON_INTERPRET", data["TRITON_INTERPRET"] or "unset"),
        (FRONTENDS["mingru"], show("mingru")),
        (FRONTENDS["mingru_jax"], show("mingru_jax")),
    ]
    if "jax_devices" in data:
        rows.append(("jax devices", ", ".join(data["jax_devices"])
                     if isinstance(data["jax_devices"], list) else data["jax_devices"]))
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        print(f"{key.ljust(width)}  {value}")


def _need_torch(why: str = "") -> None:
    """A one-line ``RuntimeError`` (printed by :func:`main` after ``mingru <command>: error:``)
    when torch is not installed."""
    try:
        import torch  # noqa: F401
    except ImportError:
        raise RuntimeError(
            f"needs PyTorch{why}, which is not installed: pip install '.[torch]'"
        ) from None


def _cmd_train(args: argparse.Namespace) -> int:
    cfg = train_config(args)  # on --resume: the saved run's framework
    if cfg.framework == "torch":  # the JAX path needs no torch: its data is NumPy
        _need_torch(" for --framework torch (--framework jax runs without it)")
    from mingru_cli.runner import run

    run(cfg, command=args.command_line)
    return 0


def _add_generate(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "generate", help="continue a prompt with a byte-level MinGRULM checkpoint",
        description="Load a checkpoint written by `mingru train --task lm` (or save_pretrained "
                    "of a MinGRULM with vocab_size 256) and print the continuation of --prompt "
                    "(its UTF-8 bytes are the tokens; bytes that are not UTF-8 print as �).")
    p.add_argument("--checkpoint", required=True, help="the checkpoint folder")
    p.add_argument("--prompt", required=True, help="the text to continue")
    p.add_argument("--max-new-tokens", type=int, required=True, help="bytes to generate")
    p.add_argument("--temperature", type=float, default=1.0, help="0 is greedy (default 1)")
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--seed", type=int, default=None, help="default: a fresh random seed")
    p.add_argument("--framework", choices=("torch", "jax"), default="torch")
    p.add_argument("--device", default="auto", help="cpu, cuda or cuda:N (default cuda when "
                   "the framework sees a GPU)")
    p.set_defaults(func=_cmd_generate)


def _cmd_generate(args: argparse.Namespace) -> int:
    if args.framework == "torch":
        _need_torch(" for --framework torch (--framework jax runs without it)")
    from mingru_cli.runner import generate_text

    text = generate_text(args.checkpoint, args.prompt, args.max_new_tokens,
                         framework=args.framework, device=args.device,
                         temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                         seed=args.seed)
    print(text)
    return 0


def _cmd_bench(argv: list[str]) -> int:
    from mingru_benchmarks.run import main as bench  # here: `mingru --help` stays framework-free

    return bench(argv, prog="mingru bench")


def _cmd_info(args: argparse.Namespace) -> int:
    data = info()
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    else:
        _print_info(data)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``mingru`` argument parser (subcommands ``info``, ``train``, ``generate``,
    ``bench``); imports neither torch nor jax."""
    parser = argparse.ArgumentParser(
        prog="mingru", description="mingru-scans: parallel-scan minGRU mixers (PyTorch + Flax)."
    )
    parser.add_argument("--version", action="version", version=f"mingru-scans {_package_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    p_info = sub.add_parser("info", help="installed frontends, backend status, versions, GPU, "
                                         "MINGRU_SCAN")
    p_info.add_argument("--json", action="store_true", help="print as JSON")
    p_info.set_defaults(func=_cmd_info)
    add_train_parser(sub, _cmd_train)
    _add_generate(sub)
    sub.add_parser("bench", add_help=False, help="benchmark the ops, mixers and training step "
                   "against eager, torch.compile, peers and JAX (JSON + markdown + PNG; "
                   "mingru bench --help)")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mingru`` console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser()
    args, rest = parser.parse_known_args(argv)
    if args.command == "bench":  # its flags are the harness's own
        return _cmd_bench(rest)
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    args.command_line = "mingru " + shlex.join(argv)
    try:
        return int(args.func(args) or 0)
    except (ValueError, TypeError, RuntimeError) as exc:
        print(f"mingru {args.command}: error: {exc}", file=sys.stderr)
        return 1
