"""The ``mingru train`` demo: train small models on synthetic tasks and measure accuracy at
lengths beyond the training length.

Model: token embedding → :class:`mingru.MinGRUStack` → linear head, one label per position.
Each requested mixer spec trains its own model on the same data stream (same seed), so the
final per-length table compares mixers side by side. The PyTorch path lives here; the JAX
path (``framework="jax"``) is in :mod:`mingru.train_jax` and shares the data, the schedule and
the reporting.

Example:
    >>> from mingru.train import TrainConfig, run
    >>> cfg = TrainConfig(task="parity", mixers=["signed"], steps=5, batch_size=8,
    ...                   eval_lens=[16], eval_size=8, progress=False, verbose=False)
    >>> result = run(cfg)
    >>> sorted(result["models"][0]["accuracy"])
    ['16']
"""

from __future__ import annotations

import copy
import json
import math
import os
import platform
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mingru.tasks import Batch, Task, make_task

__all__ = [
    "MIXER_NAMES",
    "SequenceModel",
    "TrainConfig",
    "format_table",
    "lr_at",
    "parse_mixer_spec",
    "run",
]

MIXER_NAMES = ("log", "signed", "rotation", "givens", "delta")

# Per-task defaults used when the command line leaves a choice open. They were picked by
# measurement on a 2-core CPU (see docs/results/ladder.md) so the no-flag demo is quick and
# shows the capability gap.
TASK_DEFAULTS: dict[str, dict[str, Any]] = {
    "parity": {"mixers": ["signed", "log"], "steps": 300},
    "s3": {"mixers": ["givens", "log"], "steps": 1000},
    "s5": {"mixers": ["givens", "log"], "steps": 2000},
    # Recall needs two layers: the first carries the key into the value's position, the
    # second stores the pair. MinGRU is the first layer in both, only the memory differs.
    "mqar": {"mixers": ["log,delta", "log"], "layers": 2, "steps": 1000},
}


@dataclass
class TrainConfig:
    """Everything one ``mingru train`` invocation needs. Field names match the CLI flags."""

    task: str = "parity"
    mixers: list[str] | None = None  # None → TASK_DEFAULTS[task]["mixers"]
    framework: str = "torch"
    layers: int | None = None  # None → TASK_DEFAULTS or 1
    d_model: int = 64
    mlp_expansion: int = 2
    mixer_kwargs: dict[str, Any] = field(default_factory=dict)
    steps: int | None = None  # None → TASK_DEFAULTS[task]["steps"]
    batch_size: int = 32
    lr: float = 3e-3
    weight_decay: float = 0.0
    warmup: float = 0.05
    grad_clip: float = 1.0
    train_len: int = 64
    eval_lens: list[int] = field(default_factory=lambda: [64, 256, 1024])
    val_len: int | None = 128
    eval_every: int | None = None  # None → max(10, steps // 20)
    eval_size: int = 128
    seed: int = 0
    device: str = "cpu"
    threads: int | None = 1  # CPU intra-op threads; None = torch's default
    out: str | None = None
    progress: bool = True
    verbose: bool = True
    mqar_pairs: int = 8
    mqar_keys: int = 32
    mqar_values: int = 32

    def resolved(self) -> TrainConfig:
        """A copy with task defaults filled in and every field checked."""
        cfg = copy.deepcopy(self)
        defaults = TASK_DEFAULTS.get(cfg.task)
        if defaults is None:
            raise ValueError(f"task must be one of {', '.join(TASK_DEFAULTS)}; got {cfg.task!r}")
        if cfg.mixers is None:
            cfg.mixers = list(defaults["mixers"])
        if cfg.layers is None:
            cfg.layers = int(defaults.get("layers", 1))
        if cfg.steps is None:
            cfg.steps = int(defaults["steps"])
        if cfg.framework not in ("torch", "jax"):
            raise ValueError(f"framework must be 'torch' or 'jax'; got {cfg.framework!r}")
        for name, low in (("layers", 1), ("d_model", 2), ("steps", 1), ("batch_size", 1),
                          ("train_len", 1), ("eval_size", 1), ("mlp_expansion", 0)):
            value = getattr(cfg, name)
            if not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an int ≥ {low}; got {value!r}")
        if not (cfg.lr > 0 and math.isfinite(cfg.lr)):
            raise ValueError(f"lr must be a finite number > 0; got {cfg.lr!r}")
        if not cfg.eval_lens or any(int(n) < 1 for n in cfg.eval_lens):
            raise ValueError(f"eval_lens must be a non-empty list of lengths ≥ 1; got {cfg.eval_lens!r}")
        cfg.eval_lens = [int(n) for n in cfg.eval_lens]
        if cfg.val_len is not None and cfg.val_len < 1:
            raise ValueError(f"val_len must be ≥ 1 or None; got {cfg.val_len!r}")
        if cfg.eval_every is None:
            cfg.eval_every = max(10, cfg.steps // 20)
        for spec in cfg.mixers:
            parse_mixer_spec(spec, cfg.layers)
        return cfg


def parse_mixer_spec(spec: str, layers: int) -> str | list[str]:
    """``"signed"`` → ``"signed"`` (all layers); ``"signed,givens"`` → one name per layer.

    A per-layer list must have ``layers`` entries, or ``layers`` must be 1 (the default), in
    which case the list sets the depth.
    """
    names = [s.strip() for s in spec.split(",") if s.strip()]
    if not names:
        raise ValueError(f"mixer spec is empty: {spec!r}")
    for name in names:
        if name not in MIXER_NAMES:
            raise ValueError(f"mixer must be one of {', '.join(MIXER_NAMES)}; got {name!r} in {spec!r}")
    if len(names) == 1:
        return names[0]
    if layers not in (1, len(names)):
        raise ValueError(f"mixer spec {spec!r} names {len(names)} layers but --layers is {layers}")
    return names


def stack_arguments(spec: str, cfg: TrainConfig) -> tuple[str | list[str], int, dict[str, Any] | None]:
    """``(mixer, n_layers, mixer_kwargs)`` for :class:`MinGRUStack` from one spec.

    ``cfg.mixer_kwargs`` is either flat (one mixer's arguments, for single-name specs) or
    keyed by mixer name (``{"givens": {"block_size": 4}}``), which works for every spec: each
    model takes the entries of the mixers it uses.
    """
    mixer = parse_mixer_spec(spec, cfg.layers)
    n_layers = len(mixer) if isinstance(mixer, list) else cfg.layers
    given = dict(cfg.mixer_kwargs or {})
    keyed = bool(given) and all(k in MIXER_NAMES and isinstance(v, dict) for k, v in given.items())
    if isinstance(mixer, list):
        if given and not keyed:
            raise ValueError(
                "with a per-layer mixer list, mixer_kwargs must be keyed by mixer name, "
                'e.g. {"givens": {"block_size": 4}}'
            )
        kwargs = {k: v for k, v in given.items() if k in mixer}
    else:
        kwargs = dict(given.get(mixer, {})) if keyed else given
    return mixer, n_layers, kwargs or None


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


def lr_at(step: int, steps: int, peak: float, warmup: float) -> float:
    """Linear warm-up over ``warmup·steps`` steps, then cosine decay to 10% of ``peak``."""
    n_warm = max(1, int(round(warmup * steps)))
    if step < n_warm:
        return peak * (step + 1) / n_warm
    frac = (step - n_warm) / max(1, steps - n_warm)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def build_task(cfg: TrainConfig) -> Task:
    if cfg.task == "mqar":
        return make_task("mqar", n_pairs=cfg.mqar_pairs, n_keys=cfg.mqar_keys, n_values=cfg.mqar_values)
    return make_task(cfg.task)


def eval_sets(task: Task, cfg: TrainConfig) -> tuple[dict[int, Batch], Batch | None]:
    """Fixed evaluation sets per length (and the validation set), independent of training data."""
    sets = {}
    for n in cfg.eval_lens:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7919 * n + 1)
        sets[n] = task.sample(cfg.eval_size, n, gen)
    val = None
    if cfg.val_len is not None:
        gen = torch.Generator().manual_seed(cfg.seed * 1_000_003 + 7919 * cfg.val_len + 2)
        val = task.sample(cfg.eval_size, cfg.val_len, gen)
    return sets, val


def train_batches(task: Task, cfg: TrainConfig) -> Iterator[Batch]:
    gen = torch.Generator().manual_seed(cfg.seed)
    while True:
        yield task.sample(cfg.batch_size, cfg.train_len, gen)


def chance_accuracy(task: Task) -> float:
    return 1.0 / task.n_classes


def _progress(total: int, desc: str, enabled: bool):
    """A tqdm bar when tqdm is installed and wanted; otherwise a silent stand-in."""
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=desc, leave=True, dynamic_ncols=True, file=sys.stderr)
        except ImportError:
            pass

    class _Silent:
        def update(self, n: int = 1) -> None: ...
        def set_postfix(self, **kw: Any) -> None: ...
        def close(self) -> None: ...

    return _Silent()


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
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)

    def step_fn(batch: Batch, lr: float) -> tuple[float, float]:
        for group in opt.param_groups:
            group["lr"] = lr
        tok, lab = batch.tokens.to(cfg.device), batch.labels.to(cfg.device)
        logits = model(tok)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        with torch.no_grad():
            m = batch.mask.to(cfg.device)
            acc = ((logits.argmax(-1) == lab) & m).sum() / m.sum().clamp_min(1)
        return float(loss.detach()), float(acc)

    snapshot = lambda: {k: v.detach().clone() for k, v in model.state_dict().items()}
    record = _fit_loop(
        spec, task, cfg, val, step_fn,
        evaluate=lambda b: torch_accuracy(model, b, cfg.device),
        snapshot=snapshot, restore=model.load_state_dict,
    )
    record["parameters"] = sum(p.numel() for p in model.parameters())
    record["accuracy"] = {str(n): torch_accuracy(model, b, cfg.device) for n, b in evals.items()}
    return record


def _fit_loop(spec: str, task: Task, cfg: TrainConfig, val: Batch | None,
              step_fn: Callable[[Batch, float], tuple[float, float]],
              evaluate: Callable[[Batch], float], snapshot: Callable[[], Any],
              restore: Callable[[Any], Any]) -> dict[str, Any]:
    """The framework-neutral loop: schedule, progress bar, validation-based checkpoint choice."""
    assert cfg.eval_every is not None
    bar = _progress(cfg.steps, f"{cfg.task}/{spec}", cfg.progress)
    curve: list[dict[str, float]] = []
    best = (-1.0, -1, None)  # (val accuracy, step, weights)
    loss_avg = acc_avg = None
    start = time.perf_counter()
    batches = train_batches(task, cfg)
    for step in range(cfg.steps):
        loss, acc = step_fn(next(batches), lr_at(step, cfg.steps, cfg.lr, cfg.warmup))
        loss_avg = loss if loss_avg is None else 0.9 * loss_avg + 0.1 * loss
        acc_avg = acc if acc_avg is None else 0.9 * acc_avg + 0.1 * acc
        last = step == cfg.steps - 1
        if (step + 1) % cfg.eval_every == 0 or last:
            point = {"step": step + 1, "loss": round(loss_avg, 5), "train_acc": round(acc_avg, 5)}
            if val is not None:
                v = evaluate(val)
                point["val_acc"] = round(v, 5)
                if v >= best[0]:  # ties keep the later (longer-trained) checkpoint
                    best = (v, step + 1, snapshot())
            curve.append(point)
            bar.set_postfix(loss=f"{loss_avg:.3f}", acc=f"{acc_avg:.3f}",
                            **({"val": f"{point['val_acc']:.3f}"} if val is not None else {}))
        bar.update(1)
    bar.close()
    seconds = time.perf_counter() - start
    record: dict[str, Any] = {"mixer": spec, "train_seconds": round(seconds, 2), "curve": curve,
                              "final_loss": round(float(loss_avg or 0.0), 5)}
    if val is not None and best[2] is not None:
        restore(best[2])
        record.update(selected_step=best[1], val_acc=round(best[0], 5))
    else:
        record["selected_step"] = cfg.steps
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


def run(cfg: TrainConfig, command: str | None = None) -> dict[str, Any]:
    """Train every requested mixer, evaluate per length, optionally write ``--out`` files."""
    cfg = cfg.resolved()
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
        from mingru.train_jax import fit_jax as fit
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
