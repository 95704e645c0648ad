"""The selective-copying peer run of ``python -m mingru_benchmarks.paper peer-selective-copy``:
lucidrains' ``minGRU-pytorch`` (``minGRU_pytorch.minGRU``) in the model of the paper's run,
trained with ``mingru train --preset paper-selective-copy``'s data, loop and settings until its
validation accuracy reaches a target; ``--ours`` runs our model through the same loop.

The model (:class:`PeerCopyModel`) is ours (:class:`mingru_cli.train.SequenceModel` with the
preset's 3 layers, d_model 64, mixer expansion 6, no MLP) with the peer's ``minGRU`` in place of
our mixer and its ``out_proj``: embedding → layers of ``x + Dropout(minGRU(LayerNorm(x)))`` →
LayerNorm → linear head. The peer's module takes an initial state ``prev_hidden``: it gets
ours, ``g(h0)`` with a learned ``h0`` starting at 0 (with ``learnable_h0``), else the constant
``0.5 = g(0)``, so both models compute the same function of their weights. The peer's
projections have no biases (ours have): the parameter counts differ by those (both are
reported).

Both sides train through :func:`mingru_cli.train.fit_model` (the preset's AdamW, constant lr, weight
decay, clipping, 2 × 32 accumulation, dropout; the same training batches for the same
``--seed``) and are scored every ``--eval-every`` steps on the same fixed validation set (token
accuracy at the query positions). Timing (:func:`time_to_target`): a few warm-up steps and one
evaluation batch first, on a copy that is then thrown away (compilation and autotuning are not
timed); then the clock runs from the first step. The headline, ``seconds_to_target``, is the
time spent training (the steps, data included, as ``mingru train``'s ``step_seconds``) until the
first evaluation point at or above the target; ``seconds_to_target_with_eval`` adds the
evaluations up to and including that one. Both are measured at evaluation points only, so
their resolution is ``--eval-every`` steps, the same for both sides. A run split into jobs
(``--job-minutes``, ``--resume``) adds up its jobs' times; each job warms up again, untimed.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

import torch
from torch import nn

from mingru_benchmarks.paper_lm import count_parameters
from mingru_cli._checkpoint import RunCheckpoint, TrainingPaused
from mingru_cli._train_common import Accuracy, eval_sets
from mingru_cli.config import TrainConfig, stack_arguments
from mingru_cli.tasks import Batch, SelectiveCopyTask
from mingru_cli.train import SequenceModel, fit_model, torch_accuracy

__all__ = ["PeerCopyModel", "build_model", "parameter_counts", "peer_module", "time_to_target",
           "validation_set"]

PEER_PACKAGE = "mingru-pytorch"
PEER_INSTALL = "pip install mingru-pytorch==0.2.1 --no-deps"


def peer_module() -> Any:
    """``minGRU_pytorch.minGRU``; a ``RuntimeError`` naming the package and its install command
    when it is missing."""
    try:
        return importlib.import_module("minGRU_pytorch.minGRU")
    except ImportError as exc:
        raise RuntimeError(f"peer-selective-copy needs the {PEER_PACKAGE} package (minGRU_pytorch): "
                           f"{PEER_INSTALL}; {exc}") from None


class PeerCopyModel(nn.Module):
    """Embedding → ``n_layers`` × ``x + Dropout(minGRU(LayerNorm(x)))`` → LayerNorm → head, with
    the peer's ``minGRU(d_model, expansion_factor=mixer_expansion)``; logits ``(B, T, n_classes)``
    for tokens ``(B, T)``. Each layer starts from ``g(h0)`` (``h0``: learned per layer with
    ``learnable_h0``, else zero; a ``(layers, mixer_expansion·d_model)`` tensor).

    Example:
        >>> model = PeerCopyModel(peer_module(), vocab_size=16, n_classes=16, d_model=8,
        ...                       n_layers=2, mixer_expansion=3, dropout=0.0, learnable_h0=True)
        >>> model(torch.randint(0, 16, (2, 5))).shape
        torch.Size([2, 5, 16])
    """

    def __init__(self, peer: Any, *, vocab_size: int, n_classes: int, d_model: int,
                 n_layers: int, mixer_expansion: int, dropout: float, learnable_h0: bool) -> None:
        super().__init__()
        self.g = peer.g
        self.embed = nn.Embedding(vocab_size, d_model)
        self.norms = nn.ModuleList(nn.LayerNorm(d_model, eps=1e-5) for _ in range(n_layers))
        self.mixers = nn.ModuleList(peer.minGRU(d_model, expansion_factor=mixer_expansion)
                                    for _ in range(n_layers))
        h0 = torch.zeros(n_layers, mixer_expansion * d_model)
        if learnable_h0:
            self.h0 = nn.Parameter(h0)
        else:
            self.register_buffer("h0", h0)
        self.dropout = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(d_model, eps=1e-5)
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)
        for norm, mixer, h0 in zip(self.norms, self.mixers, self.h0, strict=True):
            start = self.g(h0).to(x.dtype).expand(x.shape[0], 1, -1)
            x = x + self.dropout(mixer(norm(x), prev_hidden=start))
        return self.head(self.norm(x))


def build_model(cfg: TrainConfig, task: SelectiveCopyTask, *, ours: bool) -> nn.Module:
    """The model of ``cfg`` (resolved) on ``cfg.device``, seeded by ``cfg.seed``: ours
    (:class:`mingru_cli.train.SequenceModel`, as ``mingru train`` builds it) or the peer's."""
    torch.manual_seed(cfg.seed)
    shared = {"mlp_expansion": cfg.mlp_expansion, "dropout": cfg.dropout,
              "learnable_h0": cfg.learnable_h0, "mixer_expansion": cfg.mixer_expansion}
    if ours:
        mixer, n_layers, kwargs = stack_arguments(cfg.mixers[0], cfg)
        model: nn.Module = SequenceModel(task.vocab_size, task.n_classes, cfg.d_model, n_layers,
                                         mixer, kwargs, **shared)
    else:
        if cfg.mlp_expansion:
            raise ValueError("peer-selective-copy builds the paper's model, without an MLP: "
                             f"--mlp-expansion must be 0; got {cfg.mlp_expansion}")
        shared.pop("mlp_expansion")
        model = PeerCopyModel(peer_module(), vocab_size=task.vocab_size,
                              n_classes=task.n_classes, d_model=cfg.d_model,
                              n_layers=cfg.layers or 1, **shared)
    return model.to(cfg.device)


def validation_set(task: SelectiveCopyTask, cfg: TrainConfig) -> Batch:
    """``mingru train``'s validation set of ``cfg`` (``cfg.eval_size`` sequences at
    ``cfg.val_len``); the per-length evaluation sets made beside it are as short as the task
    allows, since only the validation set is used."""
    _, val = eval_sets(task, dataclasses.replace(cfg, eval_lens=[task.min_length]))
    assert val is not None, "cfg.val_len is set"
    return val


def time_to_target(cfg: TrainConfig, task: SelectiveCopyTask, val: Batch, *, ours: bool,
                   target: float, max_minutes: float | None, warmup: int,
                   checkpoint: RunCheckpoint | None = None) -> dict[str, Any]:
    """Train the model of ``cfg`` (resolved; inside :func:`mingru_cli.train.session`) until its
    token accuracy on ``val`` is at least ``target`` at an evaluation point, its training time
    passes ``max_minutes`` (checked at evaluation points) or ``cfg.steps`` are done. Returns
    the record: the curve (step, accuracies, training and wall seconds at each point), whether
    and when the target was reached, the seconds per step.

    With ``checkpoint`` (this side's :class:`~mingru_cli._checkpoint.RunCheckpoint`, whose
    budget is the job's), the run starts where the saved one stands, its times carried over;
    when the job's budget is spent, the state is saved and the record says where it paused
    (``paused_at_step``), with the curve so far."""
    if warmup > 0:
        spare = build_model(cfg, task, ours=ours)
        warm = dataclasses.replace(cfg, steps=warmup, eval_every=warmup, progress=False)
        fit_model(spare, spare, "warm-up", task=task, cfg=warm, val=None,
                  evaluate=lambda batch: Accuracy(0.0, 0.0))
        torch_accuracy(spare, Batch(*(a[: cfg.eval_batch_size] for a in
                                      (val.tokens, val.labels, val.mask))),
                       cfg.device, chunk=cfg.eval_batch_size, precision=cfg.precision)
        del spare
    model = build_model(cfg, task, ours=ours)
    spec = "ours" if ours else "peer"

    def evaluate(batch: Batch) -> Accuracy:
        return torch_accuracy(model, batch, cfg.device, chunk=cfg.eval_batch_size,
                              precision=cfg.precision)

    def stop_when(point: dict[str, Any]) -> bool:
        return point["val_acc"] >= target or (max_minutes is not None
                                              and point["train_seconds"] >= 60 * max_minutes)

    slot = None if checkpoint is None else checkpoint.slot(0, spec)
    try:
        run = fit_model(model, model, spec, task=task, cfg=cfg, val=val, evaluate=evaluate,
                        slot=slot, timed=True, stop_when=stop_when)
        curve, paused = run["curve"], None
        steps = curve[-1]["step"] if curve else 0
        train_seconds, eval_seconds = run["step_seconds"], run["eval_seconds"]
    except TrainingPaused as stop:
        assert slot is not None and slot.entry is not None
        loop = slot.entry["loop"]
        curve, paused, steps = loop["curve"], stop.step, stop.step
        train_seconds, eval_seconds = loop["step_seconds"], loop["eval_seconds"]
    at = next((p for p in curve if p["val_acc"] >= target), None)
    return {
        "target_accuracy": target, "reached": at is not None,
        "step_at_target": None if at is None else at["step"],
        "seconds_to_target": None if at is None else at["train_seconds"],
        "seconds_to_target_with_eval": None if at is None else at["wall_seconds"],
        "steps": steps, "train_seconds": round(train_seconds, 4),
        "eval_seconds": round(eval_seconds, 4),
        "seconds_per_step": round(train_seconds / max(1, steps), 6),
        "best_val_acc": max((p["val_acc"] for p in curve), default=None),
        "paused_at_step": paused, "curve": curve,
    }


def parameter_counts(cfg: TrainConfig, task: SelectiveCopyTask) -> dict[str, Any]:
    """:func:`~mingru_benchmarks.paper_lm.count_parameters` of ours and of the peer's model at
    ``cfg`` (built on the CPU; the peer's ``None`` when its package is missing)."""
    on_cpu = dataclasses.replace(cfg, device="cpu")
    counts: dict[str, Any] = {}
    for name, ours in (("ours", True), ("peer", False)):
        try:
            counts[name] = count_parameters(build_model(on_cpu, task, ours=ours))
        except RuntimeError:
            counts[name] = None
    return counts

