"""What both training paths of ``mingru train`` share: the task, the fixed evaluation sets, the
training data stream, the learning-rate schedule, the scoring of predictions, the language
model's chunked validation loss and the framework-neutral fit loop (with its checkpoints:
:mod:`mingru_cli._checkpoint`).

:mod:`mingru_cli.train` (PyTorch) and :mod:`mingru_cli.train_jax` (Flax) both import this
module and neither imports the other at module level. Framework-free: the synthetic tasks
(:mod:`mingru_cli.tasks`) generate their data with NumPy.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from mingru_cli._checkpoint import LoopState, ModelSlot, StateFiles, TrainingPaused
from mingru_cli.config import CURRICULUM_ACCURACY, TrainConfig
from mingru_cli.tasks import Batch, ByteText, Task, make_task

__all__ = [
    "Accuracy",
    "TrainStream",
    "build_task",
    "chance_accuracy",
    "chunked_loss",
    "eval_sets",
    "final_scores",
    "fit_loop",
    "lm_eval",
    "lm_metrics",
    "lm_val_chunk",
    "lr_at",
    "next_length",
    "score",
    "split_batch",
]


def lr_at(step: int, steps: int, peak: float, *, warmup: float, schedule: str = "cosine") -> float:
    """The learning rate of step ``step`` (0-based) of a ``steps``-step run.

    ``"cosine"``: linear warm-up over ``warmup·steps`` steps, then cosine decay to 10% of
    ``peak`` at the last step. ``"constant"``: ``peak`` throughout. The schedule depends on
    ``steps``, the run's total, so a run split into jobs follows the same schedule as one job.

    Example:
        >>> lr_at(0, 100, 1.0, warmup=0.1), lr_at(99, 100, 1.0, warmup=0.1, schedule="constant")
        (0.1, 1.0)
    """
    if schedule == "constant":
        return peak
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
        task = make_task("mqar", n_pairs=cfg.mqar_pairs, n_keys=cfg.mqar_keys, n_values=cfg.mqar_values)
    elif cfg.task == "selective-copy":
        task = make_task(cfg.task, n_copy=cfg.copy_tokens, vocab_size=cfg.copy_vocab)
    else:
        task = make_task(cfg.task)
    if cfg.curriculum is not None and cfg.curriculum < task.min_length:
        raise ValueError(f"--curriculum must be ≥ {task.min_length}, the shortest sequence of "
                         f"task {cfg.task!r} as configured; got {cfg.curriculum}")
    return task


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


class TrainStream:
    """The training batches of a run: ``batch_size`` sequences of the length asked for per
    step, from one generator seeded by ``cfg.seed``; :attr:`state` is where it stands
    (JSON-able), and a stream made with that state goes on with the same batches."""

    def __init__(self, task: Task, cfg: TrainConfig, state: dict[str, Any] | None = None) -> None:
        self.task, self.cfg = task, cfg
        self.generator = np.random.default_rng(cfg.seed)
        if state is not None:
            self.generator.bit_generator.state = state

    @property
    def state(self) -> dict[str, Any]:
        return self.generator.bit_generator.state

    def next(self, length: int) -> Batch:
        return self.task.sample(self.cfg.batch_size, length, self.generator)


def next_length(length: int, accuracy: float, cfg: TrainConfig) -> int:
    """The curriculum's training length after a step at ``length`` whose running training
    accuracy is ``accuracy``: doubled (capped at ``cfg.train_len``) once it reaches
    :data:`CURRICULUM_ACCURACY`, else unchanged.

    Example:
        >>> cfg = TrainConfig(task="s5", train_len=256, curriculum=4)
        >>> next_length(4, 0.995, cfg), next_length(4, 0.9, cfg), next_length(200, 1.0, cfg)
        (8, 4, 256)
    """
    if length < cfg.train_len and accuracy >= CURRICULUM_ACCURACY:
        return min(2 * length, cfg.train_len)
    return length


def split_batch(batch: Batch, parts: int) -> list[Batch]:
    """``batch`` cut into ``parts`` micro-batches of consecutive sequences (``parts`` divides
    its size)."""
    size = batch.tokens.shape[0] // parts
    return [Batch(*(a[i * size : (i + 1) * size] for a in (batch.tokens, batch.labels, batch.mask)))
            for i in range(parts)]


def chance_accuracy(task: Task) -> float:
    return task.chance


class Accuracy(NamedTuple):
    """Accuracy over the scored positions (``token``) and over the sequences (``sequence``: the
    fraction whose scored positions are all right, among those with any)."""

    token: float
    sequence: float


def score(predict: Callable[[np.ndarray], np.ndarray], batch: Batch, chunk: int) -> Accuracy:
    """Score ``predict(tokens (b, T)) -> classes (b, T)`` on ``batch``, ``chunk`` sequences at a
    time.

    Example:
        >>> import numpy as np
        >>> labels = np.array([[1, 2, -100], [3, 4, -100]])
        >>> batch = Batch(labels, labels, labels >= 0)
        >>> score(lambda tokens: np.where(tokens == 4, 0, tokens), batch, chunk=1)
        Accuracy(token=0.75, sequence=0.5)
    """
    right = scored = sequences_right = sequences = 0
    for i in range(0, batch.tokens.shape[0], chunk):
        labels, mask = batch.labels[i : i + chunk], batch.mask[i : i + chunk]
        correct = (np.asarray(predict(batch.tokens[i : i + chunk])) == labels) & mask
        right += int(correct.sum())
        scored += int(mask.sum())
        counted = mask.any(axis=1)
        sequences_right += int((correct.sum(axis=1) == mask.sum(axis=1))[counted].sum())
        sequences += int(counted.sum())
    return Accuracy(right / max(1, scored), sequences_right / max(1, sequences))


def final_scores(evaluate: Callable[[Batch], Accuracy],
                 evals: dict[int, Batch]) -> dict[str, dict[str, float]]:
    """A model record's ``accuracy`` and ``sequence_accuracy`` per evaluation length."""
    scores = {str(n): evaluate(b) for n, b in evals.items()}
    return {"accuracy": {n: s.token for n, s in scores.items()},
            "sequence_accuracy": {n: s.sequence for n, s in scores.items()}}


def _progress(total: int, desc: str, enabled: bool, initial: int = 0):
    """A tqdm bar when tqdm is installed and wanted; otherwise a silent stand-in."""
    if enabled:
        try:
            from tqdm.auto import tqdm

            return tqdm(total=total, desc=desc, leave=True, dynamic_ncols=True, file=sys.stderr,
                        initial=initial)
        except ImportError:
            pass

    class _Silent:
        def update(self, n: int = 1) -> None: ...
        def set_postfix(self, **kw: Any) -> None: ...
        def close(self) -> None: ...

    return _Silent()


def lm_metrics(train_loss: float, val_loss: float) -> dict[str, float]:
    """A language model's evaluation point: ``train_loss`` (the mean of the batch losses since
    the previous point) and ``val_loss`` (over the validation bytes), both mean cross-entropy
    in nats per byte, and each in bits per byte (``_bpb``: loss / ln 2).

    Example:
        >>> lm_metrics(math.log(2), 2 * math.log(2))
        {'train_loss': 0.69315, 'train_bpb': 1.0, 'val_loss': 1.38629, 'val_bpb': 2.0}
    """
    return {"train_loss": round(train_loss, 5), "train_bpb": round(train_loss / math.log(2), 5),
            "val_loss": round(val_loss, 5), "val_bpb": round(val_loss / math.log(2), 5)}


# Bytes per row of one validation forward (at least --train-len): long enough that a forward
# is large work on a GPU, short enough that its logits (rows × chunk × 256) stay small.
LM_VAL_CHUNK = 1024


def lm_val_chunk(cfg: TrainConfig) -> int:
    """The bytes per row of one validation forward of ``--task lm``."""
    return max(LM_VAL_CHUNK, cfg.train_len)


def lm_eval(validation_loss: Callable[[Batch, int], float], val: Batch,
            cfg: TrainConfig) -> Callable[[float], dict[str, float]]:
    """:func:`fit_loop`'s ``on_eval`` for ``--task lm``: the point's :func:`lm_metrics`, the
    validation loss ``validation_loss(val, chunk)`` read in chunks of :func:`lm_val_chunk`."""
    chunk = lm_val_chunk(cfg)
    return lambda train_loss: lm_metrics(train_loss, validation_loss(val, chunk))


def chunked_loss(batch: Batch, chunk_loss: Callable[[np.ndarray, np.ndarray, Any], tuple[Any, Any]],
                 chunk: int, state: Any = None) -> float:
    """The mean loss per scored position of ``batch`` (e.g. :meth:`ByteText.validation`), each
    row read in chunks of ``chunk`` positions with the state carried from one to the next.

    ``chunk_loss(tokens (B, c), labels (B, c), state) -> (summed loss over the labels ≥ 0,
    state)``, starting from ``state``. The rows are padded at their end (label ``-100``) to a
    multiple of ``chunk``, so every call has one shape; padding after a row's last scored
    position changes none of its losses (the model is causal).

    Example:
        >>> labels = np.array([[1, 2, 3, -100]])
        >>> batch = Batch(labels.clip(0), labels, labels >= 0)
        >>> chunked_loss(batch, lambda t, l, s: (float((l >= 0).sum()), s), chunk=3)
        1.0
    """
    width = batch.tokens.shape[1]
    chunk = min(chunk, width)
    pad = ((0, 0), (0, -width % chunk))
    tokens, labels = np.pad(batch.tokens, pad), np.pad(batch.labels, pad, constant_values=-100)
    total: Any = 0.0
    for start in range(0, tokens.shape[1], chunk):
        part, state = chunk_loss(tokens[:, start : start + chunk], labels[:, start : start + chunk],
                                 state)
        total = total + part  # on the device: one read at the end
    return float(total) / max(1, int(batch.mask.sum()))


def fit_loop(spec: str, task: Task, cfg: TrainConfig, *, val: Batch | None,
             step_fn: Callable[[Batch, float], tuple[float, float]],
             evaluate: Callable[[Batch], Accuracy], snapshot: Callable[[], Any],
             restore: Callable[[Any], Any],
             on_eval: Callable[[float], dict[str, float]] | None = None,
             select_lowest: str | None = None,
             slot: ModelSlot | None = None, files: StateFiles | None = None,
             timed: bool = False,
             stop_when: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """The framework-neutral loop: schedule, progress bar, validation-based checkpoint choice.

    ``step_fn(batch, lr) -> (loss, accuracy)`` trains one step; ``evaluate(val)`` scores the
    validation set at every evaluation point (the best token accuracy is kept: ``snapshot()``
    takes the weights, ``restore(weights)`` puts them back at the end). Each evaluation point
    of the curve holds the running averages (factor 0.9) of the batch losses (``loss``) and
    accuracies (``train_acc``), or, with ``on_eval``, what ``on_eval(mean batch loss since
    the previous point)`` returns (the language model's losses); with ``select_lowest``, a
    key of those, the weights of the point where it is lowest are kept instead (ties keep
    the later). The record's ``step_seconds`` and ``eval_seconds`` are the time spent in
    training steps and at evaluation points. With ``slot``
    (this model's place in the run's checkpoint) and ``files`` (the training path's tensor
    file), the loop starts where the saved state stands, saves it every ``cfg.save_every``
    steps and after the last, and raises :class:`TrainingPaused` once saved when the job's
    budget is spent. With ``timed``, each point also holds ``train_seconds`` (the training
    steps' time up to it, across resumed jobs) and ``wall_seconds`` (that plus the evaluations,
    its own included); ``stop_when(point)`` returning true ends the training at that point.
    With ``cfg.curriculum``, the batches start at that length and :func:`next_length` sets
    each next one from the running accuracy; each point then holds ``train_len``, the length of
    the step that ended at it. Returns the model's record (``curve``, ``selected_step``, ...).
    """
    assert cfg.eval_every is not None and cfg.steps is not None
    loop, best = slot.load(files) if slot is not None and files is not None else (LoopState(), None)
    stream = TrainStream(task, cfg, loop.data)
    if loop.train_len is None:
        loop.train_len = cfg.curriculum or cfg.train_len
    bar = _progress(cfg.steps, f"{cfg.task}/{spec}", cfg.progress, initial=loop.step)
    start, seconds_before, saved_step = time.perf_counter(), loop.seconds, loop.step

    def save() -> None:
        assert slot is not None and files is not None
        loop.seconds, loop.data = seconds_before + time.perf_counter() - start, stream.state
        slot.save(loop, best, files)

    stop = False
    for step in range(loop.step, cfg.steps):
        if slot is not None and slot.budget.spent():
            save()
            bar.close()
            raise TrainingPaused(spec, step, cfg.steps)
        stepped = time.perf_counter()
        lr = lr_at(step, cfg.steps, cfg.lr, warmup=cfg.warmup, schedule=cfg.schedule)
        loss, acc = step_fn(stream.next(loop.train_len), lr)
        loop.step_seconds += time.perf_counter() - stepped
        loop.loss_avg = loss if loop.loss_avg is None else 0.9 * loop.loss_avg + 0.1 * loss
        loop.acc_avg = acc if loop.acc_avg is None else 0.9 * loop.acc_avg + 0.1 * acc
        loop.loss_sum, loop.loss_steps = loop.loss_sum + loss, loop.loss_steps + 1
        loop.step = step + 1
        length_trained, loop.train_len = loop.train_len, next_length(loop.train_len, loop.acc_avg, cfg)
        if loop.step % cfg.eval_every == 0 or loop.step == cfg.steps:
            evaluated = time.perf_counter()
            if on_eval is None:
                point = {"step": loop.step, "loss": round(loop.loss_avg, 5),
                         "train_acc": round(loop.acc_avg, 5)}
            else:
                point = {"step": loop.step, **on_eval(loop.loss_sum / loop.loss_steps)}
            loop.loss_sum, loop.loss_steps = 0.0, 0
            if cfg.curriculum is not None:
                point["train_len"] = length_trained
            score = None
            if val is not None:
                v = evaluate(val)
                point.update(val_acc=round(v.token, 5), val_seq_acc=round(v.sequence, 5))
                score = v.token
            # One score picks the kept checkpoint: the lowest ``select_lowest`` when given, else
            # the best validation token accuracy. Ties keep the later (longer-trained) point.
            if select_lowest is not None:
                score = -point[select_lowest]
            if score is not None and (loop.best_step < 0 or score >= loop.best_val):
                loop.best_val, loop.best_step, best = score, loop.step, snapshot()
            loop.eval_seconds += time.perf_counter() - evaluated
            if timed:
                point.update(train_seconds=round(loop.step_seconds, 4),
                             wall_seconds=round(loop.step_seconds + loop.eval_seconds, 4))
            loop.curve.append(point)
            shown = {k: f"{v:.3f}" for k, v in point.items() if k.startswith("val_")}
            bar.set_postfix(loss=f"{loop.loss_avg:.3f}", acc=f"{loop.acc_avg:.3f}", **shown)
            stop = stop_when is not None and stop_when(point)
        if slot is not None:
            slot.budget.take()
            if cfg.save_every and loop.step % cfg.save_every == 0:
                save()
                saved_step = loop.step
        bar.update(1)
        if stop:
            break
    bar.close()
    if slot is not None and saved_step != loop.step:
        save()
    seconds = seconds_before + time.perf_counter() - start
    record: dict[str, Any] = {"mixer": spec, "train_seconds": round(seconds, 2),
                              "step_seconds": round(loop.step_seconds, 4),
                              "eval_seconds": round(loop.eval_seconds, 4),
                              "curve": loop.curve, "final_loss": round(float(loop.loss_avg or 0.0), 5)}
    if best is not None and (val is not None or select_lowest is not None):
        restore(best)
        record["selected_step"] = loop.best_step
        if val is not None:
            kept = next(p for p in loop.curve if p["step"] == loop.best_step)
            record["val_acc"] = kept["val_acc"]
    else:
        record["selected_step"] = cfg.steps
    return record
