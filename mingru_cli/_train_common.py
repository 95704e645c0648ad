"""What both training paths of ``mingru train`` share: the task, the fixed evaluation sets, the
training data stream, the learning-rate schedule and the framework-neutral fit loop.

:mod:`mingru_cli.train` (PyTorch) and :mod:`mingru_cli.train_jax` (Flax) both import this
module and neither imports the other at module level. Framework-free: the synthetic tasks
(:mod:`mingru_cli.tasks`) generate their data with NumPy.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from mingru_cli.config import TrainConfig
from mingru_cli.tasks import Batch, ByteText, Task, make_task

__all__ = [
    "build_task",
    "chance_accuracy",
    "eval_sets",
    "fit_loop",
    "lm_metrics",
    "lr_at",
    "train_batches",
]


def lr_at(step: int, steps: int, peak: float, *, warmup: float) -> float:
    """Linear warm-up over ``warmup·steps`` steps, then cosine decay to 10% of ``peak``."""
    n_warm = max(1, int(round(warmup * steps)))
    if step < n_warm:
        return peak * (step + 1) / n_warm
    frac = (step - n_warm) / max(1, steps - n_warm)
    return peak * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * min(1.0, frac))))


def build_task(cfg: TrainConfig) -> Task:
    if cfg.task == "lm":  # errors name --data
        assert cfg.data is not None
        return ByteText.from_file(cfg.data, cfg.val_fraction, cfg.train_len)
    if cfg.task == "mqar":
        return make_task("mqar", n_pairs=cfg.mqar_pairs, n_keys=cfg.mqar_keys, n_values=cfg.mqar_values)
    return make_task(cfg.task)


def eval_sets(task: Task, cfg: TrainConfig) -> tuple[dict[int, Batch], Batch | None]:
    """Fixed evaluation sets per length (and the validation set), independent of training data."""
    sets = {}
    for n in cfg.eval_lens:
        gen = np.random.default_rng(cfg.seed * 1_000_003 + 7919 * n + 1)
        sets[n] = task.sample(cfg.eval_size, n, gen)
    val = None
    if cfg.val_len is not None:
        gen = np.random.default_rng(cfg.seed * 1_000_003 + 7919 * cfg.val_len + 2)
        val = task.sample(cfg.eval_size, cfg.val_len, gen)
    return sets, val


def train_batches(task: Task, cfg: TrainConfig) -> Iterator[Batch]:
    gen = np.random.default_rng(cfg.seed)
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


def lm_metrics(loss: float) -> dict[str, float]:
    """``val_loss`` (mean cross-entropy in nats per byte) and ``val_bpb`` (bits per byte)."""
    return {"val_loss": round(loss, 5), "val_bpb": round(loss / math.log(2), 5)}


def fit_loop(spec: str, task: Task, cfg: TrainConfig, *, val: Batch | None,
             step_fn: Callable[[Batch, float], tuple[float, float]],
             evaluate: Callable[[Batch], float], snapshot: Callable[[], Any],
             restore: Callable[[Any], Any],
             on_eval: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
    """The framework-neutral loop: schedule, progress bar, validation-based checkpoint choice.
    ``on_eval`` adds its metrics to every evaluation point (the language model's validation
    loss)."""
    assert cfg.eval_every is not None and cfg.steps is not None
    bar = _progress(cfg.steps, f"{cfg.task}/{spec}", cfg.progress)
    curve: list[dict[str, float]] = []
    best = (-1.0, -1, None)  # (val accuracy, step, weights)
    loss_avg = acc_avg = None
    start = time.perf_counter()
    batches = train_batches(task, cfg)
    for step in range(cfg.steps):
        loss, acc = step_fn(next(batches), lr_at(step, cfg.steps, cfg.lr, warmup=cfg.warmup))
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
            point.update(on_eval() if on_eval is not None else {})
            curve.append(point)
            shown = {k: f"{v:.3f}" for k, v in point.items() if k.startswith("val_")}
            bar.set_postfix(loss=f"{loss_avg:.3f}", acc=f"{acc_avg:.3f}", **shown)
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
