"""The ``mingru train`` demo: train small models on synthetic tasks and measure accuracy at
lengths beyond the training length.

Model: token embedding → :class:`mingru.MinGRUStack` → linear head, one label per position.
Each requested mixer spec trains its own model on the same data stream (same seed), so the
final per-length table compares mixers side by side. ``--task lm`` trains a
:class:`mingru.MinGRULM` instead (:func:`fit_lm`; :func:`load_lm` and :func:`generate_bytes`
serve ``mingru generate``). The PyTorch path lives here; the JAX
path (``framework="jax"``) is in :mod:`mingru_cli.train_jax`. Both share the configuration
(:mod:`mingru_cli.config`) and the data, schedule and fit loop
(:mod:`mingru_cli._train_common`); neither imports the other. :func:`mingru_cli.runner.run`
runs either path (it imports this module only for ``framework="torch"``).

Example:
    >>> from mingru_cli.runner import TrainConfig, run
    >>> cfg = TrainConfig(task="parity", mixers=["signed"], steps=5, batch_size=8,
    ...                   eval_lens=[16], eval_size=8, progress=False, verbose=False)
    >>> result = run(cfg)
    >>> sorted(result["models"][0]["accuracy"])
    ['16']
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from mingru_cli._checkpoint import ModelSlot
from mingru_cli._train_common import (
    Accuracy,
    chunked_loss,
    final_scores,
    fit_loop,
    lm_eval,
    lr_at,
    score,
    split_batch,
)
from mingru_cli.config import (
    MIXER_NAMES,
    TASK_DEFAULTS,
    TrainConfig,
    check_precision,
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
    "autocast",
    "check_device",
    "fit",
    "fit_lm",
    "fit_model",
    "fit_torch",
    "generate_bytes",
    "load_lm",
    "lr_at",
    "parse_mixer_spec",
    "session",
    "stack_arguments",
    "validation_loss",
]


class SequenceModel(nn.Module):
    """Embedding → :class:`mingru.MinGRUStack` → linear head; logits ``(B, T, n_classes)``.

    ``dropout``, ``learnable_h0`` and ``mixer_expansion`` go to the stack (dropout on each
    block's mixer and MLP outputs)."""

    def __init__(
        self,
        vocab_size: int,
        n_classes: int,
        d_model: int,
        n_layers: int,
        mixer: str | list[str],
        mixer_kwargs: dict[str, Any] | None = None,
        mlp_expansion: int = 2,
        dropout: float = 0.0,
        learnable_h0: bool = False,
        mixer_expansion: int = 1,
    ) -> None:
        super().__init__()
        from mingru.stack import MinGRUStack

        self.embed = nn.Embedding(vocab_size, d_model)
        self.stack = MinGRUStack(
            d_model, d_model, n_layers, mlp_expansion=mlp_expansion, dropout=dropout,
            learnable_h0=learnable_h0, mixer=mixer, mixer_kwargs=mixer_kwargs,
            mixer_expansion=mixer_expansion,
        )
        self.head = nn.Linear(d_model, n_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.stack(self.embed(tokens))
        return self.head(out)


def autocast(device: str | torch.device,
             precision: str) -> contextlib.AbstractContextManager[Any]:
    """The compute precision ``precision`` (a :data:`mingru_cli.config.PRECISIONS` name) on the
    torch ``device``: ``"bf16"`` is ``torch.autocast`` to bfloat16 (the matmuls and the mixers'
    projections in bfloat16, the weights float32), ``"fp32"`` changes nothing.

    Example:
        >>> with autocast("cpu", "bf16"):
        ...     (torch.ones(2, 3) @ torch.ones(3, 4)).dtype
        torch.bfloat16
    """
    check_precision(precision)
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def torch_accuracy(model: nn.Module, batch: Batch, device: str, *, chunk: int = 64,
                   precision: str = "fp32") -> Accuracy:
    """Token and sequence accuracy of ``model`` (in eval mode, at ``precision``:
    :func:`autocast`) over the scored positions of ``batch``, ``chunk`` sequences per
    forward."""

    def predict(tokens: Any) -> Any:
        with autocast(device, precision):
            logits = model(torch.from_numpy(tokens).to(device))
        return logits.argmax(-1).cpu().numpy()

    model.eval()
    try:
        with torch.no_grad():
            return score(predict, batch, chunk)
    finally:
        model.train()


def fit_torch(spec: str, task: Task, cfg: TrainConfig, evals: dict[int, Batch],
              val: Batch | None, slot: ModelSlot | None = None) -> dict[str, Any]:
    """Train one PyTorch model for ``spec`` (from ``slot``'s saved state, if any, saving
    there); returns its result record."""
    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    torch.manual_seed(cfg.seed)
    model = SequenceModel(task.vocab_size, task.n_classes, cfg.d_model, n_layers=n_layers,
                          mixer=mixer, mixer_kwargs=mkw, mlp_expansion=cfg.mlp_expansion,
                          dropout=cfg.dropout, learnable_h0=cfg.learnable_h0,
                          mixer_expansion=cfg.mixer_expansion)
    model = model.to(cfg.device)

    def evaluate(batch: Batch) -> Accuracy:
        return torch_accuracy(model, batch, cfg.device, chunk=cfg.eval_batch_size,
                              precision=cfg.precision)

    record = fit_model(model, model, spec, task=task, cfg=cfg, val=val, evaluate=evaluate,
                       slot=slot)
    record.update(final_scores(evaluate, evals))
    return record


def fit_lm(spec: str, task: Task, cfg: TrainConfig, val: Batch,
           slot: ModelSlot | None = None) -> tuple[dict[str, Any], nn.Module]:
    """Train a :class:`mingru.MinGRULM` for ``spec`` on ``task`` (``--task lm``), reporting
    the training loss and the loss on the validation stretches ``val`` (:func:`validation_loss`)
    at every evaluation point; ``(record, model)``, the model in eval mode with the weights of
    the point of lowest validation loss (``record["selected_step"]``)."""
    from mingru.lm import MinGRULM

    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    torch.manual_seed(cfg.seed)
    model = MinGRULM(task.vocab_size, cfg.d_model, n_layers, mixer=mixer, mixer_kwargs=mkw,
                     mlp_expansion=cfg.mlp_expansion, dropout=cfg.dropout,
                     learnable_h0=cfg.learnable_h0,
                     mixer_expansion=cfg.mixer_expansion).to(cfg.device)

    def logits(tokens: torch.Tensor) -> torch.Tensor:  # no token read-back: no sync per step
        return model.head(model.features(tokens)[0])

    on_eval = lm_eval(lambda batch, chunk: validation_loss(model, batch, chunk,
                                                          precision=cfg.precision), val, cfg)
    record = fit_model(model, logits, spec, task=task, cfg=cfg, val=None,
                       evaluate=lambda b: Accuracy(0.0, 0.0), on_eval=on_eval,
                       select_lowest="val_loss", slot=slot)
    model.eval()
    return record, model


def validation_loss(model: nn.Module, batch: Batch, chunk: int, *,
                    precision: str = "fp32") -> float:
    """The mean cross-entropy (nats per byte, from float32 logits) of the
    :class:`mingru.MinGRULM` ``model`` (run in eval mode, without gradients, at ``precision``:
    :func:`autocast`) over the scored positions of ``batch`` (int64 ``(R, W)``
    tokens and labels, ``-100`` where unscored, as :meth:`ByteText.validation` gives): each row
    from the default state, in chunks of ``chunk`` bytes with the state carried, so the result
    is that of one forward per row whatever ``chunk`` is."""
    device = model.embedding.weight.device

    def chunk_loss(tokens: Any, labels: Any, state: Any) -> tuple[torch.Tensor, Any]:
        # features + head, not forward: forward reads the tokens back to check them.
        hidden, state = model.features(torch.from_numpy(tokens).to(device), state)
        logits = model.head(hidden).float().flatten(0, 1)
        labels = torch.from_numpy(labels).to(device).flatten()
        return F.cross_entropy(logits, labels, ignore_index=-100, reduction="sum"), state

    training = model.training
    model.eval()
    try:
        with torch.no_grad(), autocast(device, precision):
            return chunked_loss(batch, chunk_loss, chunk)
    finally:
        model.train(training)


class _TorchState:
    """The tensor file of a PyTorch run (``torch.save``): model and optimizer state dicts,
    the best validation point's weights and torch's random state (CPU, and the CUDA device's
    when training there)."""

    suffix = ".pt"

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer, device: str) -> None:
        self.model, self.optimizer = model, optimizer
        self.cuda = torch.device(device) if torch.device(device).type == "cuda" else None

    def save(self, path: Path, best: Any) -> None:
        state = {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                 "best": best, "rng": torch.get_rng_state()}
        if self.cuda is not None:
            state["cuda_rng"] = torch.cuda.get_rng_state(self.cuda)
        torch.save(state, path)

    def load(self, path: Path) -> Any:
        state = torch.load(path, map_location="cpu", weights_only=True)
        try:
            self.model.load_state_dict(state["model"])
            self.optimizer.load_state_dict(state["optimizer"])
        except (RuntimeError, ValueError, KeyError) as exc:
            raise ValueError(f"--resume: {path} does not fit this model: {exc}") from None
        torch.set_rng_state(state["rng"])
        if self.cuda is not None and "cuda_rng" in state:
            torch.cuda.set_rng_state(state["cuda_rng"], self.cuda)
        return state["best"]


def fit_model(model: nn.Module, logits_of: Callable[[torch.Tensor], torch.Tensor], spec: str,
              *, task: Task, cfg: TrainConfig, val: Batch | None,
              evaluate: Callable[[Batch], Accuracy],
              on_eval: Callable[[float], dict[str, float]] | None = None,
              select_lowest: str | None = None, slot: ModelSlot | None = None,
              timed: bool = False,
              stop_when: Callable[[dict[str, Any]], bool] | None = None) -> dict[str, Any]:
    """AdamW on ``model`` through :func:`fit_loop` (``slot``, ``timed``, ``stop_when`` as
    there); ``logits_of(tokens)`` is its output.
    Each step averages the gradients of ``cfg.grad_accum`` micro-batches (each one's loss is
    the mean over its scored positions), then clips their norm to ``cfg.grad_clip``. The
    forward runs at ``cfg.precision`` (:func:`autocast`), the loss in float32 from the
    logits; the weights and the optimizer stay float32."""
    # Fused AdamW on CUDA: one kernel family for the whole update instead of foreach's
    # several per parameter group, which a small model's step notices.
    fused = torch.device(cfg.device).type == "cuda"
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay,
                            fused=fused or None)
    loss_fn = nn.CrossEntropyLoss(ignore_index=-100)

    def step_fn(batch: Batch, lr: float) -> tuple[float, float]:
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        losses, accuracies = [], []
        # Backward on this thread, not the autograd engine's device thread: a small model's
        # step is bound by host time, and the hand-off to that thread is host time.
        with torch.autograd.set_multithreading_enabled(mode=False):
            for part in split_batch(batch, cfg.grad_accum):
                tok = torch.from_numpy(part.tokens).to(cfg.device)
                lab = torch.from_numpy(part.labels).to(cfg.device)
                with autocast(cfg.device, cfg.precision):
                    logits = logits_of(tok).float()
                    loss = loss_fn(logits.reshape(-1, logits.shape[-1]), lab.reshape(-1))
                (loss / cfg.grad_accum).backward()
                with torch.no_grad():
                    m = torch.from_numpy(part.mask).to(cfg.device)
                    accuracies.append(((logits.argmax(-1) == lab) & m).sum() / m.sum().clamp_min(1))
                losses.append(loss.detach())
        if cfg.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        return float(torch.stack(losses).mean()), float(torch.stack(accuracies).mean())

    snapshot = lambda: {k: v.detach().clone() for k, v in model.state_dict().items()}
    record = fit_loop(spec, task, cfg, val=val, step_fn=step_fn, evaluate=evaluate,
                      snapshot=snapshot, restore=model.load_state_dict, on_eval=on_eval,
                      select_lowest=select_lowest, slot=slot,
                      files=_TorchState(model, opt, cfg.device), timed=timed, stop_when=stop_when)
    record["parameters"] = sum(p.numel() for p in model.parameters())
    return record


def load_lm(directory: str, device: str) -> nn.Module:
    """The :class:`mingru.MinGRULM` checkpoint in ``directory``, on ``device``."""
    from mingru.lm import MinGRULM

    return MinGRULM.from_pretrained(directory, device=device)


def generate_bytes(model: nn.Module, prompt: bytes, max_new_tokens: int, *,
                   precision: str = "fp32", **sampling: Any) -> bytes:
    """The ``max_new_tokens`` bytes ``model.generate`` continues ``prompt`` with, at
    ``precision`` (:func:`autocast`)."""
    device = model.embedding.weight.device
    tokens = torch.tensor([list(prompt)], dtype=torch.long, device=device)
    with autocast(device, precision):
        out = model.generate(tokens, max_new_tokens, **sampling)
    return bytes(out[0, len(prompt):].tolist())


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


@contextlib.contextmanager
def session(cfg: TrainConfig) -> Iterator[None]:
    """Check ``cfg.device`` (``"auto"`` becomes ``cuda`` when available, else ``cpu``) and, on
    the CPU, use ``cfg.threads`` intra-op threads while the block runs."""
    if cfg.device == "auto":
        cfg.device = "cuda" if torch.cuda.is_available() else "cpu"
    check_device(cfg.device)
    threads = torch.get_num_threads()
    if cfg.threads is not None and cfg.device == "cpu":
        # Tiny models train fastest single-threaded: intra-op threads mostly spin-wait, and
        # far worse when other processes share the cores.
        torch.set_num_threads(cfg.threads)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


fit = fit_torch
