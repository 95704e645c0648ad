"""The JAX path of ``mingru train --framework jax``: the same model (embedding →
``mingru_jax.MinGRUStack`` → linear head), data, schedule and reporting as the PyTorch path in
:mod:`mingru_cli.train`, trained with optax AdamW (same betas, eps and weight decay as
``torch.optim.AdamW`` with the flags given) under ``jax.jit``.

JAX, Flax and optax are imported only here, so the PyTorch demo never needs them. This module
shares the configuration (:mod:`mingru_cli.config`) and the data and fit loop
(:mod:`mingru_cli._train_common`) with the PyTorch path and never imports
:mod:`mingru_cli.train`. The synthetic tasks (:mod:`mingru_cli.tasks`) generate their data
with torch on CPU, so this path needs torch installed too (a CPU build is enough).
"""

from __future__ import annotations

from typing import Any

from mingru_cli._train_common import fit_loop
from mingru_cli.config import TrainConfig, stack_arguments
from mingru_cli.tasks import Batch, Task

__all__ = ["fit_jax"]


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

    model = SequenceModel(nnx.Rngs(cfg.seed))
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    # Learning rate 1 inside, the schedule multiplies the updates: with decoupled weight decay
    # this equals adamw(lr) step by step, and keeps one compiled step for every lr.
    tx = optax.chain(
        *([optax.clip_by_global_norm(cfg.grad_clip)] if cfg.grad_clip else []),
        optax.adamw(1.0, b1=0.9, b2=0.999, eps=1e-8, weight_decay=cfg.weight_decay),
    )
    state = {"params": params, "opt": tx.init(params)}

    def logits_fn(p: Any, tokens: Any) -> Any:
        return nnx.merge(graphdef, p, rest)(tokens)

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

    @jax.jit
    def predict(p: Any, tokens: Any) -> Any:
        return logits_fn(p, tokens).argmax(-1)

    def as_jax(b: Batch) -> tuple[Any, Any, Any]:
        return (jnp.asarray(b.tokens.numpy()), jnp.asarray(b.labels.numpy()),
                jnp.asarray(b.mask.numpy()))

    def step_fn(batch: Batch, lr: float) -> tuple[float, float]:
        tokens, labels, mask = as_jax(batch)
        state["params"], state["opt"], loss, acc = train_step(
            state["params"], state["opt"], tokens, labels, mask, jnp.float32(lr))
        return float(loss), float(acc)

    def evaluate(batch: Batch, chunk: int = 64) -> float:
        correct = total = 0
        for i in range(0, batch.tokens.shape[0], chunk):
            part = Batch(batch.tokens[i : i + chunk], batch.labels[i : i + chunk],
                         batch.mask[i : i + chunk])
            tokens, labels, mask = as_jax(part)
            pred = predict(state["params"], tokens)
            correct += int(((pred == labels) & mask).sum())
            total += int(mask.sum())
        return correct / max(1, total)

    def restore(p: Any) -> None:
        state["params"] = p

    record = fit_loop(spec, task, cfg, val, step_fn, evaluate,
                       snapshot=lambda: state["params"], restore=restore)
    record["parameters"] = int(sum(x.size for x in jax.tree.leaves(state["params"])))
    record["accuracy"] = {str(n): evaluate(b) for n, b in evals.items()}
    record["framework"] = "jax"
    return record
