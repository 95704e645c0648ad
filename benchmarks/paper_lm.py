"""The language-model peer run of ``python -m mingru_benchmarks.paper gpt``: transformers'
``GPT2LMHeadModel`` on bytes, trained by ``mingru train --task lm``'s own loop on its own data,
and scored on the same validation bytes.

What the GPT shares with our ``MinGRULM`` run (``mingru train --task lm``):

* **Data.** :class:`mingru_cli.tasks.ByteText` (the same split of ``--data``) and the same
  training windows (:class:`mingru_cli._train_common.TrainStream`: same ``--seed``, same
  batches).
* **Optimisation.** The training step of ``mingru train`` itself (:func:`mingru_cli.train.fit_model`:
  AdamW, fused on CUDA, ``--lr`` with the schedule of ``--lr-schedule`` over ``--steps``,
  ``--weight-decay``, ``--clip-norm``, ``--grad-accum``), its evaluation cadence
  (``--eval-every``) and its choice of the weights of lowest validation loss.
* **The wall-time budget.** ``--max-minutes M`` is time spent in training steps (data
  included, evaluation excluded), the same for both sides. The learning-rate schedule is set by
  the run's total ``--steps``, and ``mingru train --max-minutes`` only pauses a job, so each
  side gets ``--steps = ⌊60·M / t⌋`` from a timing probe of its own step (:func:`probe_steps`:
  ``t`` = the seconds per step of a short run after a warm-up run): both finish their schedule
  at about the budget. ``--steps N`` instead gives both the same number of steps.
* **Parameter counts.** :func:`count_parameters` counts both models the same way.

What differs, by design: the GPT cannot carry a state, so the validation split is scored in
windows of ``--train-len`` bytes (its ``n_positions``) with a stride (:func:`sliding_windows`),
each byte once, within the same stretches our model reads from a fresh state (see
:meth:`mingru_cli.tasks.ByteText.validation`). A byte past a stretch's first ``--train-len``
bytes is predicted from at least ``train_len − stride + 1`` and at most ``train_len`` bytes of
context by the GPT, from the whole stretch before it by our model: longer context favours our
model; its being as long as the training windows, no longer, favours the GPT, which never sees
positions it was not trained on.

Example:
    >>> from mingru_cli.tasks import ByteText
    >>> val = ByteText(b"abcdefghijklmnopqrstuvwxyz", val_fraction=0.5).validation(rows=1)
    >>> windows, starts = sliding_windows(val, window=4, stride=2)
    >>> [bytes(row[row >= 0].tolist()) for row in windows.labels]  # each byte once
    [b'opqr', b'st', b'uv', b'wx', b'yz']
    >>> starts[:, 1].tolist()  # where each window's input starts in its stretch
    [0, 2, 4, 6, 8]
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from mingru_cli._train_common import Accuracy, build_task, lm_metrics
from mingru_cli.config import TrainConfig
from mingru_cli.tasks import Batch, ByteText
from mingru_cli.train import autocast, fit_model

__all__ = ["VOCAB", "count_parameters", "gpt_config", "gpt_validation_loss", "gpt_width_for",
           "probe_steps", "run_gpt", "run_ours", "sliding_windows", "transformers_gpt2"]

VOCAB = 256  # bytes
# The probe's runs: a warm-up run (compilation, autotuning, allocator) and the timed run.
PROBE_WARMUP_STEPS = 5
WINDOW_RULE = ("sliding windows of train_len bytes within each validation stretch: the first "
               "window scores its first train_len bytes, each next window ends stride bytes "
               "later and scores those stride bytes; each byte is scored once")


def count_parameters(model: nn.Module) -> dict[str, int]:
    """``total``: every parameter tensor of ``model`` once (a tied head and embedding count
    once, as ``model.parameters()`` yields them); ``embedding``: those of its ``nn.Embedding``
    modules (token and position tables); ``non_embedding``: the rest. Works on a model built
    on the ``meta`` device.

    Example:
        >>> count_parameters(nn.Sequential(nn.Embedding(10, 4), nn.Linear(4, 2)))
        {'total': 50, 'embedding': 40, 'non_embedding': 10}
    """
    total = sum(p.numel() for p in model.parameters())
    tables = {id(p): p for module in model.modules() if isinstance(module, nn.Embedding)
              for p in module.parameters()}
    embedding = sum(p.numel() for p in tables.values())
    return {"total": total, "embedding": embedding, "non_embedding": total - embedding}


def transformers_gpt2() -> tuple[Any, Any]:
    """``(GPT2Config, GPT2LMHeadModel)`` from transformers; a ``RuntimeError`` naming the
    package and the extra when it is missing."""
    try:
        # mingru.hf first: it keeps a checkout's kernels/ from shadowing the `kernels` package
        # that transformers imports.
        importlib.import_module("mingru.hf")
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as exc:
        raise RuntimeError("the gpt command needs transformers: pip install 'mingru-scans[hf]' "
                           f"(or pip install 'transformers>=4.49'); {exc}") from None
    return GPT2Config, GPT2LMHeadModel


def gpt_config(*, d_model: int, layers: int, heads: int, train_len: int, dropout: float) -> Any:
    """A byte-level ``GPT2Config``: ``vocab_size`` 256, ``n_positions = train_len``, every
    dropout ``dropout`` (transformers' default is 0.1; ``mingru train``'s ``--dropout`` is
    0), GELU MLP of ``4·d_model``, tied head (as ``MinGRULM``'s)."""
    if heads < 1 or d_model % heads:
        raise ValueError(f"--heads must be ≥ 1 and divide --d-model {d_model}; got {heads}")
    config_class, _ = transformers_gpt2()
    return config_class(vocab_size=VOCAB, n_embd=d_model, n_layer=layers, n_head=heads,
                        n_positions=train_len, resid_pdrop=dropout, embd_pdrop=dropout,
                        attn_pdrop=dropout, bos_token_id=0, eos_token_id=0, pad_token_id=0)


def _gpt_parameters(config: Any) -> dict[str, int]:
    _, model_class = transformers_gpt2()
    with torch.device("meta"):  # shapes only: no memory, no initialisation work
        return count_parameters(model_class(config))


def gpt_width_for(params: int, *, layers: int, train_len: int, head_dim: int = 64) -> int:
    """The ``d_model`` (a multiple of ``head_dim``; ``heads = d_model / head_dim``) whose GPT of
    ``layers`` layers and ``n_positions = train_len`` has the total parameter count
    (:func:`count_parameters`) nearest ``params``."""
    if params < 1 or head_dim < 1:
        raise ValueError(f"--params and --head-dim must be ≥ 1; got {params} and {head_dim}")
    counts: list[int] = []
    while not counts or counts[-1] < params:
        width = head_dim * (len(counts) + 1)
        counts.append(_gpt_parameters(gpt_config(
            d_model=width, layers=layers, heads=width // head_dim, train_len=train_len,
            dropout=0.0))["total"])
    nearest = min(range(len(counts)), key=lambda i: abs(counts[i] - params))
    return head_dim * (nearest + 1)


def sliding_windows(stretches: Batch, *, window: int, stride: int) -> tuple[Batch, np.ndarray]:
    """The validation ``stretches`` (:meth:`ByteText.validation`: rows of inputs and labels,
    ``-100`` and mask False past each row's end) as windows a model of context ``window``
    reads, each scored byte of each stretch scored once.

    In a stretch of ``L`` scored bytes (positions ``0 … L−1``) the scored segments are ``[0,
    min(window, L))``, then ``[window + k·stride, min(window + (k+1)·stride, L))``; the window
    of segment ``[a, e)`` reads the inputs ``[max(0, e − window), e)`` and scores ``[a, e)``,
    so a byte at position ``p`` has at least ``min(p + 1, window − stride + 1)`` bytes of
    context, none from before its stretch. ``stride = window``: non-overlapping windows (the
    last one of a stretch reaches back to be full); ``stride = 1``: every byte with the
    ``window`` latest bytes.

    Returns ``(windows, starts)``: ``windows`` a :class:`Batch` of ``(N, window)`` inputs
    (0-padded past a short stretch's end) and labels (``-100`` where not scored), its mask the
    scored positions (``windows.mask.sum() == stretches.mask.sum()``); ``starts (N, 2)`` the
    stretch and the position in it of each window's first input.
    """
    if not 1 <= stride <= window:
        raise ValueError(f"--val-stride must be in [1, --train-len {window}]; got {stride}")
    origins = []  # (row, input start, first scored, end) per window
    for row, length in enumerate(stretches.mask.sum(axis=1).tolist()):
        first, end = 0, min(window, length)
        while first < end:
            origins.append((row, max(0, end - window), first, end))
            first, end = end, min(end + stride, length)
    rows, starts, firsts, ends = (np.array(column, dtype=np.int64).reshape(-1, 1)
                                  for column in zip(*origins, strict=True))
    positions = starts + np.arange(window)
    inside = positions < ends
    scored = inside & (positions >= firsts)
    taken = np.minimum(positions, stretches.tokens.shape[1] - 1)
    tokens = np.where(inside, stretches.tokens[rows, taken], 0)
    labels = np.where(scored, stretches.labels[rows, taken], -100)
    return Batch(tokens, labels, scored), np.concatenate([rows, starts], axis=1)


def gpt_validation_loss(model: nn.Module, windows: Batch, *, rows: int,
                        precision: str = "fp32") -> float:
    """The mean cross-entropy (nats per byte) of the transformers causal LM ``model`` (run in
    eval mode, without gradients, at ``precision``: :func:`mingru_cli.train.autocast`) over
    the scored positions of ``windows`` (:func:`sliding_windows`), ``rows`` windows per
    forward, logits in float32."""
    device = next(model.parameters()).device
    training = model.training
    model.eval()
    total = torch.zeros((), device=device)
    try:
        with torch.no_grad(), autocast(device, precision):
            for i in range(0, windows.tokens.shape[0], rows):
                tokens = torch.from_numpy(windows.tokens[i : i + rows]).to(device)
                labels = torch.from_numpy(windows.labels[i : i + rows]).to(device)
                logits = model(input_ids=tokens).logits.float()
                total += F.cross_entropy(logits.flatten(0, 1), labels.flatten(),
                                         ignore_index=-100, reduction="sum")
    finally:
        model.train(training)
    return float(total) / max(1, int(windows.mask.sum()))


def probe_steps(seconds_per_run: Callable[[int], float], *, minutes: float, steps: int,
                warmup: int = PROBE_WARMUP_STEPS) -> dict[str, Any]:
    """The ``--steps`` that fill ``minutes`` of training-step time: ``seconds_per_run(n)``
    trains a fresh ``n``-step run and returns its seconds in training steps; a ``warmup``-step
    run first (not timed), then a ``steps``-step run gives ``t`` seconds per step, and the
    budget ``⌊60·minutes / t⌋`` steps (at least 1).

    Example:
        >>> probe_steps(lambda n: 0.5 * n, minutes=1.0, steps=10)["steps"]
        120
    """
    if not (minutes > 0 and math.isfinite(minutes)) or steps < 1:
        raise ValueError(f"--max-minutes must be > 0 and --probe-steps ≥ 1; got {minutes}, {steps}")
    if warmup > 0:
        seconds_per_run(warmup)
    per_step = seconds_per_run(steps) / steps
    return {"max_minutes": minutes, "probe_steps": steps, "warmup_steps": warmup,
            "seconds_per_step": round(per_step, 6),
            "steps": max(1, int(60.0 * minutes // max(per_step, 1e-9)))}


def _probe_config(cfg: TrainConfig, steps: int) -> TrainConfig:
    """A short run of ``cfg``: ``steps`` steps, one evaluation at the end, no files."""
    return dataclasses.replace(cfg, steps=steps, eval_every=steps, progress=False).resolved()


def _tiny_validation(task: ByteText, cfg: TrainConfig) -> Batch:
    """One byte per stretch: the probe's one evaluation point costs next to nothing."""
    return task.validation(cfg.eval_batch_size, cfg.eval_batch_size)


def run_gpt(cfg: TrainConfig, *, heads: int, stride: int, minutes: float | None,
            probe: int) -> tuple[dict[str, Any], nn.Module]:
    """Train the GPT of ``cfg`` (``d_model``, ``layers``, ``train_len``, ``dropout``,
    ``precision``: the forward under bf16 autocast for ``"bf16"``, as ours; an
    unresolved ``--task lm`` configuration inside :func:`mingru_cli.train.session`) as
    ``mingru train --task lm`` trains ours, ``cfg.steps`` steps or, with ``minutes``, the
    steps :func:`probe_steps` gives (``probe`` timed steps); score the selected weights on the
    whole validation split. Returns ``(summary, model)``."""
    _, model_class = transformers_gpt2()
    config = gpt_config(d_model=cfg.d_model, layers=cfg.layers or 1, heads=heads,
                        train_len=cfg.train_len, dropout=cfg.dropout)
    task = build_task(cfg.resolved())

    def fit(run_cfg: TrainConfig, val: Batch) -> tuple[dict[str, Any], nn.Module]:
        torch.manual_seed(run_cfg.seed)
        model = model_class(config).to(run_cfg.device).train()
        windows, _ = sliding_windows(val, window=run_cfg.train_len, stride=stride)

        def logits(tokens: torch.Tensor) -> torch.Tensor:  # fit_model sets the precision
            return model(input_ids=tokens).logits

        def on_eval(train_loss: float) -> dict[str, float]:
            loss = gpt_validation_loss(model, windows, rows=run_cfg.eval_batch_size,
                                       precision=run_cfg.precision)
            return lm_metrics(train_loss, loss)

        record = fit_model(model, logits, "gpt2", task=task, cfg=run_cfg, val=None,
                           evaluate=lambda batch: Accuracy(0.0, 0.0), on_eval=on_eval,
                           select_lowest="val_loss")
        return record, model.eval()

    budget = None
    if minutes is not None:
        budget = probe_steps(lambda n: fit(_probe_config(cfg, n), _tiny_validation(task, cfg))[0]
                             ["step_seconds"], minutes=minutes, steps=probe)
        cfg = dataclasses.replace(cfg, steps=budget["steps"])
    cfg = cfg.resolved()
    val = task.validation(cfg.eval_batch_size, cfg.val_bytes)
    whole = task.validation(cfg.eval_batch_size)
    record, model = fit(cfg, val)
    windows, _ = sliding_windows(whole, window=cfg.train_len, stride=stride)
    final = gpt_validation_loss(model, windows, rows=cfg.eval_batch_size,
                                precision=cfg.precision)
    validation = {"stretches": int(whole.tokens.shape[0]), "window": cfg.train_len,
                  "stride": stride, "rule": WINDOW_RULE,
                  "bytes_per_evaluation": int(val.mask.sum()),
                  "final_bytes": int(windows.mask.sum())}
    gpt = {"d_model": cfg.d_model, "layers": cfg.layers, "heads": heads,
           "n_positions": cfg.train_len, "dropout": cfg.dropout}
    summary = summarize("gpt2", cfg, record, count_parameters(model), final_loss=final,
                        validation=validation, split=task.split(), budget=budget)
    summary["config"] = {k: v for k, v in summary["config"].items()
                         if k not in ("mixers", "mlp_expansion", "mixer_expansion")}
    return {**summary, "gpt": gpt}, model


def run_ours(cfg: TrainConfig, *, minutes: float | None, probe: int,
             command: str | None) -> dict[str, Any]:
    """``mingru train --task lm`` on ``cfg`` (its ``out`` gets the usual files), after a
    :func:`probe_steps` of its own step when ``minutes`` is given; the summary in
    :func:`run_gpt`'s form (parameters counted on the saved model), with the sample generated
    at the end (``sample``: prompt, text, sampling settings)."""
    from mingru_cli import runner, train

    budget = None
    if minutes is not None:
        placed = dataclasses.replace(cfg)
        with train.session(placed):  # resolves placed.device ("auto") and the CPU threads
            task = build_task(placed.resolved())

            def seconds(n: int) -> float:
                run_cfg = _probe_config(placed, n)
                record, _ = train.fit_lm(run_cfg.mixers[0], task, run_cfg,
                                         val=_tiny_validation(task, run_cfg))
                return record["step_seconds"]

            budget = probe_steps(seconds, minutes=minutes, steps=probe)
        cfg = dataclasses.replace(cfg, steps=budget["steps"])
    result = runner.run(cfg, command)
    record, run_cfg = result["model"], result["config"]
    model = train.load_lm(str(cfg.out), "cpu")
    validation = {**result["validation"], "window": None, "stride": None,
                  "rule": "each stretch read from a fresh state, the state carried to its end"}
    summary = summarize("mingru", TrainConfig(**{k: v for k, v in run_cfg.items()
                                                 if k in TrainConfig.__dataclass_fields__}),
                        record, count_parameters(model), final_loss=record["final"]["val_loss"],
                        validation=validation, split=result["split"], budget=budget)
    return {**summary, "sample": result["sample"], "out": str(Path(cfg.out))}


def summarize(name: str, cfg: TrainConfig, record: dict[str, Any], params: dict[str, int], *,
              final_loss: float, validation: dict[str, Any], split: dict[str, Any],
              budget: dict[str, Any] | None) -> dict[str, Any]:
    """One side's JSON: the fields both ``gpt.json`` and ``ours.json`` hold."""
    steps = int(cfg.steps or 0)
    return {
        "model": name, "params": params, "steps": steps,
        "train_seconds": record["train_seconds"], "step_seconds": record["step_seconds"],
        "eval_seconds": record["eval_seconds"],
        "tokens_per_second": round(steps * cfg.batch_size * cfg.train_len
                                   / max(record["step_seconds"], 1e-9), 1),
        "selected_step": record["selected_step"],
        "val_loss": round(final_loss, 5), "val_bpb": round(final_loss / math.log(2), 5),
        "val_bytes": validation["final_bytes"], "validation": validation, "split": split,
        "budget": budget, "curve": record["curve"],
        "config": {k: v for k, v in dataclasses.asdict(cfg).items()
                   if k in ("data", "seed", "steps", "batch_size", "grad_accum", "train_len",
                            "lr", "schedule", "warmup", "weight_decay", "grad_clip", "dropout",
                            "d_model", "layers", "mlp_expansion", "mixer_expansion", "mixers",
                            "eval_every", "eval_batch_size", "val_bytes", "val_fraction",
                            "precision", "device")},
    }
