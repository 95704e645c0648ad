"""The JAX path of ``mingru train --framework jax``: the same model (embedding →
``mingru_jax.MinGRUStack`` → linear head), data, schedule and reporting as the PyTorch path in
:mod:`mingru_cli.train`, trained with optax AdamW (same betas, eps and weight decay as
``torch.optim.AdamW`` with the flags given) under ``jax.jit``; for ``--task lm`` a
``mingru_jax.MinGRULM`` (:func:`fit_lm`, :func:`load_lm`, :func:`generate_bytes`).

JAX, Flax and optax are imported only here, so the PyTorch demo never needs them, and nothing
on this path imports torch: a Flax-only install (``pip install ".[jax,cli]"``) runs it. This
module shares the configuration (:mod:`mingru_cli.config`), the NumPy data and the fit loop
(:mod:`mingru_cli._train_common`) with the PyTorch path and never imports
:mod:`mingru_cli.train`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

from mingru_cli._train_common import fit_loop, lm_metrics
from mingru_cli.config import TrainConfig, stack_arguments
from mingru_cli.tasks import Batch, Task

__all__ = ["fit", "fit_jax", "fit_lm", "generate_bytes", "jax_device", "load_lm", "session"]


def _imports() -> tuple[Any, Any, Any, Any, Any]:
    try:
        import jax
        import jax.numpy as jnp
        import optax
        from flax import nnx
    except ImportError as exc:
        raise RuntimeError(
            f"--framework jax needs jax, flax and optax ({exc}); pip install 'mingru-scans[jax]'"
        ) from None
    try:
        import mingru_jax

        stack_cls = mingru_jax.MinGRUStack
    except (ImportError, AttributeError) as exc:
        raise RuntimeError(f"--framework jax needs mingru_jax.MinGRUStack ({exc})") from None
    return jax, jnp, optax, nnx, stack_cls


def jax_device(jax: Any, device: str) -> Any:
    """The JAX device named by ``--device``: ``cpu``, ``cuda``/``gpu`` or ``cuda:N``/``gpu:N``
    (``auto``: the first GPU when JAX sees one, else the CPU). A one-line ``RuntimeError`` when
    it is not there."""
    kind, _, index = device.partition(":")
    if kind == "auto" and not index:
        return jax.devices()[0] if jax.default_backend() == "gpu" else jax.devices("cpu")[0]
    platform = {"cpu": "cpu", "cuda": "gpu", "gpu": "gpu"}.get(kind)
    if platform is None or (index and not index.isdigit()):
        raise RuntimeError(f"--device {device!r} is not a JAX device: use cpu, cuda or cuda:N")
    try:
        devices = jax.devices(platform)
    except RuntimeError:  # no such backend in this jaxlib, or it failed to start
        devices = []
    if not devices:
        raise RuntimeError(f"--device {device} was asked for but JAX sees no GPU")
    i = int(index or 0)
    if i >= len(devices):
        raise RuntimeError(f"--device {device} was asked for but JAX sees only "
                           f"{len(devices)} {platform.upper()} device(s)")
    return devices[i]


@contextlib.contextmanager
def session(cfg: TrainConfig) -> Iterator[None]:
    """Check ``cfg.device`` and make it JAX's default device while the block runs, so the
    model, the optimizer state, every batch and every jitted step live there (``cpu`` really
    runs on the CPU with a GPU present). ``"auto"`` is recorded as the device it chose."""
    jax = _imports()[0]
    device = jax_device(jax, cfg.device)
    if cfg.device == "auto":
        cfg.device = "cuda" if device.platform == "gpu" else "cpu"
    with jax.default_device(device):
        yield


def fit_jax(spec: str, task: Task, cfg: TrainConfig, evals: dict[int, Batch],
            val: Batch | None) -> dict[str, Any]:
    """Train one Flax model for ``spec``; returns the same record as the PyTorch path."""
    jax, jnp, optax, nnx, MinGRUStack = _imports()
    mixer, n_layers, mkw = stack_arguments(spec, cfg)

    class SequenceModel(nnx.Module):
        def __init__(self, rngs: Any) -> None:
            self.embed = nnx.Embed(task.vocab_size, cfg.d_model, rngs=rngs)
            self.stack = MinGRUStack(cfg.d_model, cfg.d_model, n_layers,
                                     mlp_expansion=cfg.mlp_expansion, mixer=mixer,
                                     mixer_kwargs=mkw, rngs=rngs)
            self.head = nnx.Linear(cfg.d_model, task.n_classes, rngs=rngs)

        def __call__(self, tokens: Any) -> Any:
            out, _ = self.stack(self.embed(tokens))
            return self.head(out)

    trainer = _Trainer(SequenceModel(nnx.Rngs(cfg.seed)), lambda model, tokens: model(tokens),
                       cfg)

    def evaluate(batch: Batch, chunk: int = 64) -> float:
        correct = total = 0
        for i in range(0, batch.tokens.shape[0], chunk):
            labels, mask = jnp.asarray(batch.labels[i : i + chunk]), batch.mask[i : i + chunk]
            pred = trainer.logits(trainer.state["params"], jnp.asarray(batch.tokens[i : i + chunk]))
            correct += int(((pred.argmax(-1) == labels) & mask).sum())
            total += int(mask.sum())
        return correct / max(1, total)

    record = trainer.fit(spec, task, cfg, val=val, evaluate=evaluate)
    record["accuracy"] = {str(n): evaluate(b) for n, b in evals.items()}
    record["framework"] = "jax"
    return record


def fit_lm(spec: str, task: Task, cfg: TrainConfig, val: Batch) -> tuple[dict[str, Any], Any]:
    """Train a :class:`mingru_jax.MinGRULM` for ``spec`` on ``task`` (``--task lm``),
    reporting the loss on the windows ``val`` at every evaluation point; ``(record, model)``
    with the trained parameters."""
    jax, jnp, optax, nnx, _ = _imports()
    from mingru_jax import MinGRULM

    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    model = MinGRULM(task.vocab_size, cfg.d_model, n_layers, mixer=mixer, mixer_kwargs=mkw,
                     mlp_expansion=cfg.mlp_expansion, rngs=nnx.Rngs(cfg.seed))
    trainer = _Trainer(model, lambda lm, tokens: lm(tokens)[0], cfg)

    def val_loss() -> dict[str, float]:
        total = 0.0
        for i in range(0, val.tokens.shape[0], 64):
            out = trainer.logits(trainer.state["params"], jnp.asarray(val.tokens[i : i + 64]))
            labels = jnp.asarray(val.labels[i : i + 64])
            total += float(optax.softmax_cross_entropy_with_integer_labels(
                out.astype(jnp.float32), labels).sum())
        return lm_metrics(total / val.labels.size)

    record = trainer.fit(spec, task, cfg, val=None, evaluate=lambda b: 0.0, on_eval=val_loss)
    record["framework"] = "jax"
    return record, trainer.model()


class _Trainer:
    """AdamW on a Flax model's parameters under ``jax.jit``; ``logits_of(model, tokens)`` is
    its output. Learning rate 1 inside, the schedule multiplies the updates: with decoupled
    weight decay this equals adamw(lr) step by step, and keeps one compiled step for every lr."""

    def __init__(self, model: Any, logits_of: Callable[[Any, Any], Any], cfg: TrainConfig) -> None:
        jax, jnp, optax, nnx, _ = _imports()
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        tx = optax.chain(
            *([optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip else []),
            optax.adamw(1.0, b1=0.9, b2=0.999, eps=1e-8, weight_decay=cfg.weight_decay),
        )
        self.state = {"params": params, "opt": tx.init(params)}
        self.model = lambda: nnx.merge(graphdef, self.state["params"], rest)

        def logits_fn(p: Any, tokens: Any) -> Any:
            return logits_of(nnx.merge(graphdef, p, rest), tokens)

        @jax.jit
        def train_step(p: Any, opt_state: Any, tokens: Any, labels: Any, mask: Any, lr: Any):
            def loss_fn(p: Any):
                logits = logits_fn(p, tokens)
                safe = jnp.where(mask, labels, 0)
                nll = optax.softmax_cross_entropy_with_integer_labels(logits, safe)
                n = jnp.maximum(mask.sum(), 1)
                loss = jnp.where(mask, nll, 0.0).sum() / n
                acc = jnp.where(mask, logits.argmax(-1) == safe, False).sum() / n
                return loss, acc

            (loss, acc), grads = jax.value_and_grad(loss_fn, has_aux=True)(p)
            updates, opt_state = tx.update(grads, opt_state, p)
            updates = jax.tree.map(lambda u: lr * u, updates)
            return optax.apply_updates(p, updates), opt_state, loss, acc

        self.logits = jax.jit(logits_fn)
        self._train_step, self._jnp = train_step, jnp

    def step(self, batch: Batch, lr: float) -> tuple[float, float]:
        jnp, state = self._jnp, self.state
        state["params"], state["opt"], loss, acc = self._train_step(
            state["params"], state["opt"], jnp.asarray(batch.tokens),
            jnp.asarray(batch.labels), jnp.asarray(batch.mask), jnp.float32(lr))
        return float(loss), float(acc)

    def fit(self, spec: str, task: Task, cfg: TrainConfig, val: Batch | None,
            evaluate: Callable[[Batch], float],
            on_eval: Callable[[], dict[str, float]] | None = None) -> dict[str, Any]:
        """:func:`fit_loop` with this trainer's steps; the record counts the parameters."""
        record = fit_loop(spec, task, cfg, val=val, step_fn=self.step, evaluate=evaluate,
                          snapshot=lambda: self.state["params"],
                          restore=lambda p: self.state.update(params=p), on_eval=on_eval)
        jax = _imports()[0]
        record["parameters"] = int(sum(x.size for x in jax.tree.leaves(self.state["params"])))
        return record


def load_lm(directory: str, device: str) -> Any:
    """The :class:`mingru_jax.MinGRULM` checkpoint in ``directory`` (on JAX's default device:
    :func:`session` places it)."""
    _imports()
    from mingru_jax import MinGRULM

    return MinGRULM.from_pretrained(directory)


def generate_bytes(model: Any, prompt: bytes, max_new_tokens: int, **sampling: Any) -> bytes:
    """The ``max_new_tokens`` bytes ``model.generate`` continues ``prompt`` with."""
    import numpy as np

    jnp = _imports()[1]
    out = model.generate(jnp.asarray([list(prompt)], jnp.int32), max_new_tokens, **sampling)
    return bytes(np.asarray(out[0, len(prompt):]).tolist())


fit = fit_jax
