"""The ``mingru train`` demo: train small models on synthetic tasks and measure accuracy at
lengths beyond the training length.

Model: token embedding → :class:`mingru.MinGRUStack` → linear head, one label per position.
Each requested mixer spec trains its own model on the same data stream (same seed), so the
final per-length table compares mixers side by side. The PyTorch path lives here; the JAX
path (``framework="jax"``) is in :mod:`mingru_cli.train_jax`. Both share the configuration
(:mod:`mingru_cli.config`) and the data, schedule and fit loop
(:mod:`mingru_cli._train_common`); neither imports the other at module level.

Example:
    >>> from mingru_cli.train import TrainConfig, run
    >>> cfg = TrainConfig(task="parity", mixers=["signed"], steps=5, batch_size=8,
    ...                   eval_lens=[16], eval_size=8, progress=False, verbose=False)
    >>> result = run(cfg)
    >>> sorted(result["models"][0]["accuracy"])
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

import torch
from torch import nn

from mingru_cli._train_common import (
    build_task,
    chance_accuracy,
    eval_sets,
    fit_loop,
    lr_at,
)
from mingru_cli.config import (
    MIXER_NAMES,
    TASK_DEFAULTS,
    TrainConfig,
    parse_mixer_spec,
    stack_arguments,
)
from mingru_cli.tasks import Batch, Task

# MIXER_NAMES, TASK_DEFAULTS, TrainConfig, parse_mixer_spec, stack_arguments and lr_at are
# defined in mingru_cli.config / mingru_cli._train_common and re-exported here.
__all__ = [
    "MIXER_NAMES",
    "TASK_DEFAULTS",
    "SequenceModel",
    "TrainConfig",
    "check_device",
    "fit_torch",
    "format_table",
    "lr_at",
    "parse_mixer_spec",
    "run",
    "stack_arguments",
]


class SequenceModel(nn.Module):
    """Embedding → :class:`mingru.MinGRUStack` → linear head; logits ``(B, T, n_classes)``."""

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        d_model: int,
        n_layers: int,
        mixer: str | list[str],
        mixer_kwargs: dict[str, Any] | None = None,
        mlp_expansion: int = 2,
    ) -> None:
        super().__init__()
        from mingru.stack import MinGRUStack

        self.embed = nn.Embedding(vocab_size, d_model)
        self.stack = MinGRUStack(
            d_model, d_model, n_layers, mlp_expansion=mlp_expansion, mixer=mixer,
            mixer_kwargs=mixer_kwargs,
        )
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.stack(self.embed(tokens))
        return self.head(out)


def torch_accuracy(model: nn.Module, batch: Batch, device: str, chunk: int = 64) -> float:
    """Accuracy over the masked positions of ``batch`` (evaluated in chunks of sequences)."""
    correct = total = 0
    model.eval()
    with torch.no_grad():
        for i in range(0, batch.tokens.shape[0], chunk):
            tok = batch.tokens[i : i + chunk].to(device)
            lab = batch.labels[i : i + chunk].to(device)
            m = batch.mask[i : i + chunk].to(device)
            pred = model(tok).argmax(-1)
            correct += int(((pred == lab) & m).sum())
            total += int(m.sum())
    model.train()
    return correct / max(1, total)


def fit_torch(spec: str, task: Task, cfg: TrainConfig, evals: dict[int, Batch],
              val: Batch | None) -> dict[str, Any]:
    """Train one PyTorch model for ``spec``; returns its result record."""
    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    torch.manual_seed(cfg.seed)
    model = SequenceModel(task.vocab_size, task.n_classes, cfg.d_model, n_layers, mixer, mkw,
                          cfg.mlp_expansion).to(cfg.device)
    # Fused AdamW on CUDA: one kernel family for the whole update instead of foreach's
    # several per parameter group; 4-10 % off a small LM's step on an NVIDIA H100, paired in
    # one process (docs/results/gpu-h200.md, twenty-seventh round).
    fused = torch.device(cfg.device).type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            fused=fused or None)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)

    def step_fn(batch: Batch, lr: float) -> tuple[float, float]:
        for group in opt.param_groups:
            group["lr"] = lr
        tok, lab = batch.tokens.to(cfg.device), batch.labels.to(cfg.device)
        logits = model(tok)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1))
        opt.zero_grad(set_to_none=True)
        # On this thread, not the autograd engine's device thread: a small model's step is
        # bound by host time, and the hand-off cost up to 12 % of a training step on an H100
        # host (docs/results/gpu-h200.md, twenty-fifth round). No effect on the CPU.
        with torch.autograd.set_multithreading_enabled(False):
            loss.backward()
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        with torch.no_grad():
            m = batch.mask.to(cfg.device)
            acc = ((logits.argmax(-1) == lab) & m).sum() / m.sum().clamp_min(1)
        return float(loss.detach()), float(acc)

    snapshot = lambda: {k: v.detach().clone() for k, v in model.state_dict().items()}
    record = fit_loop(
        spec, task, cfg, val, step_fn,
        evaluate=lambda b: torch_accuracy(model, b, cfg.device),
        snapshot=snapshot, restore=model.load_state_dict,
    )
    record["parameters"] = sum(p.numel() for p in model.parameters())
    record["accuracy"] = {str(n): torch_accuracy(model, b, cfg.device) for n, b in evals.items()}
    return record


def versions() -> dict[str, str]:
    import mingru

    out = {"python": platform.python_version(), "torch": torch.__version__,
           "mingru": mingru.__version__}
    for mod in ("jax", "flax"):
        if mod in sys.modules:
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


def check_device(device: str) -> None:
    """Raise a one-line ``RuntimeError`` when the torch ``device`` cannot be used here
    (``cuda`` without CUDA, a GPU index past the last one, an unknown device string)."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise RuntimeError(f"--device {device!r} is not a torch device: {exc}") from None
    if dev.type != "cuda":
        return
    if not torch.cuda.is_available():
        raise RuntimeError(f"--device {device} was asked for but CUDA is not available")
    if dev.index is not None and dev.index >= torch.cuda.device_count():
        raise RuntimeError(f"--device {device} was asked for but only "
                           f"{torch.cuda.device_count()} CUDA device(s) are visible")


def run(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train every requested mixer, evaluate per length, optionally write ``--out`` files."""
    cfg = cfg.resolved()
    if cfg.framework == "torch":  # the JAX path places arrays itself and ignores ``device``
        check_device(cfg.device)
    threads = torch.get_num_threads()
    if cfg.threads is not None and cfg.device == "cpu":
        # Tiny models train fastest single-threaded: intra-op threads mostly spin-wait, and
        # far worse when other processes share the cores.
        torch.set_num_threads(cfg.threads)
    try:
        return _run(cfg, command)
    finally:
        torch.set_num_threads(threads)


def _run(cfg: TrainConfig, command: str | None) -> dict[str, Any]:
    task = build_task(cfg)
    for n in [cfg.train_len, *cfg.eval_lens, *([cfg.val_len] if cfg.val_len else [])]:
        task.check_length(n)
    evals, val = eval_sets(task, cfg)
    if cfg.framework == "jax":
        from mingru_cli.train_jax import fit_jax as fit
    else:
        fit = fit_torch
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
