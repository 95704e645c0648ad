"""Run ``mingru train`` on either framework: train every requested mixer, evaluate per length,
print the table and write ``--out`` files.

Framework-free itself: it imports the chosen training path (:mod:`mingru_cli.train` for
PyTorch, :mod:`mingru_cli.train_jax` for Flax) only when it runs, so a Flax-only install never
loads torch. Each path provides ``session(cfg)`` (checks ``cfg.device``, resolves ``"auto"``,
places the work) and ``fit(spec, task, cfg, evals, val)`` (one model's record).

Example:
    >>> from mingru_cli.runner import TrainConfig, run
    >>> cfg = TrainConfig(task="parity", mixers=["signed"], framework="jax", steps=5,
    ...                   batch_size=8, eval_lens=[16], eval_size=8, progress=False,
    ...                   verbose=False)
    >>> sorted(run(cfg)["models"][0]["accuracy"])  # doctest: +SKIP
    ['16']
"""

from __future__ import annotations

import json
import os
import platform
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from mingru_cli._train_common import build_task, chance_accuracy, eval_sets
from mingru_cli.config import TrainConfig

__all__ = ["TrainConfig", "format_table", "run", "save_plot", "versions"]


def versions() -> dict[str, str]:
    """Python and the versions of the frameworks and frontends this run loaded."""
    out = {"python": platform.python_version()}
    for mod in ("torch", "mingru", "jax", "flax", "mingru_jax"):
        if sys.modules.get(mod) is not None:
            out[mod] = getattr(sys.modules[mod], "__version__", "?")
    return out


def format_table(result: dict[str, Any]) -> str:
    """The per-length accuracy table (plain text, one column per model)."""
    models = result["models"]
    names = [m["mixer"] for m in models]
    width = max(8, *(len(n) for n in names))
    lines = [f"task {result['task_description']}, trained at T={result['config']['train_len']}, "
             f"seed {result['config']['seed']}, chance {result['chance']:.3f}"]
    header = "length".rjust(7) + " | " + " | ".join(n.rjust(width) for n in names)
    lines += [header, "-" * len(header)]
    lengths = list(models[0]["accuracy"]) if models else []
    for n in lengths:
        cells = [f"{m['accuracy'][n]:.3f}".rjust(width) for m in models]
        mark = " (train)" if int(n) == result["config"]["train_len"] else ""
        lines.append(n.rjust(7) + " | " + " | ".join(cells) + mark)
    lines.append("-" * len(header))
    extra = []
    for m in models:
        sel = f"step {m['selected_step']}"
        if "val_acc" in m:
            sel += f" (val@{result['config']['val_len']} {m['val_acc']:.3f})"
        extra.append(f"  {m['mixer']}: {m['parameters']} params, {m['train_seconds']:.1f}s, "
                     f"checkpoint {sel}")
    return "\n".join(lines + extra)


def save_plot(result: dict[str, Any], path: Path) -> bool:
    """Accuracy vs evaluation length, one line per model (matplotlib Agg). False without it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
    for m in result["models"]:
        xs = [int(n) for n in m["accuracy"]]
        ax.plot(xs, list(m["accuracy"].values()), marker="o", label=m["mixer"])
    ax.axhline(result["chance"], color="grey", linestyle=":", label="chance")
    ax.axvline(result["config"]["train_len"], color="grey", linestyle="--", linewidth=0.8,
               label="train length")
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.02)
    ax.set_xlabel("evaluation length T")
    ax.set_ylabel("accuracy")
    ax.set_title(f"mingru train: {result['task_description']}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True


def run(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train every requested mixer on ``cfg.framework``, evaluate per length, optionally write
    ``--out`` files. ``cfg.device`` may be ``"auto"`` (a GPU when the framework sees one)."""
    cfg = cfg.resolved()
    if cfg.framework == "jax":
        from mingru_cli import train_jax as path
    else:
        from mingru_cli import train as path  # type: ignore[no-redef]
    with path.session(cfg):  # a bad --device fails here, before any data or output
        return _run(cfg, path.fit, command)


def _run(cfg: TrainConfig, fit: Any, command: str | None) -> dict[str, Any]:
    task = build_task(cfg)
    for n in [cfg.train_len, *cfg.eval_lens, *([cfg.val_len] if cfg.val_len else [])]:
        task.check_length(n)
    evals, val = eval_sets(task, cfg)
    models = [fit(spec, task, cfg, evals, val) for spec in cfg.mixers]
    result = {
        "task": cfg.task,
        "task_description": task.describe(),
        "chance": chance_accuracy(task),
        "command": command,
        "config": asdict(cfg),
        "versions": versions(),
        "cpu_count": os.cpu_count(),
        "models": models,
    }
    if cfg.verbose:
        print(format_table(result))
    if cfg.out:
        out = Path(cfg.out)
        out.mkdir(parents=True, exist_ok=True)
        (out / "train_results.json").write_text(json.dumps(result, indent=2) + "\n")
        written = ["train_results.json"]
        if save_plot(result, out / "train_accuracy.png"):
            written.append("train_accuracy.png")
        if cfg.verbose:
            print(f"wrote {', '.join(str(out / w) for w in written)}")
    return result
