"""The JAX path of ``mingru train --framework jax``: the same model (embedding →
``mingru_jax.MinGRUStack`` → linear head), data, schedule and reporting as the PyTorch path in
:mod:`mingru_cli.train`, trained with optax AdamW (same betas, eps and weight decay as
``torch.optim.AdamW`` with the flags given) under ``jax.jit``; for ``--task lm`` a
``mingru_jax.MinGRULM`` (:func:`fit_lm`, :func:`load_lm`, :func:`generate_bytes`).
``--precision bf16`` builds the model with ``dtype=bfloat16`` over ``param_dtype=float32``
(:func:`compute_dtype`): the forward in bfloat16, the parameters, the optimizer and the loss
(from the logits) in float32.

JAX, Flax and optax are imported only here, so the PyTorch demo never needs them, and nothing
on this path imports torch: a Flax-only install (``pip install ".[jax,cli]"``) runs it. This
module shares the configuration (:mod:`mingru_cli.config`), the NumPy data and the fit loop
(:mod:`mingru_cli._train_common`) with the PyTorch path and never imports
:mod:`mingru_cli.train`.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from mingru_cli._checkpoint import ModelSlot
from mingru_cli._train_common import Accuracy, chunked_loss, final_scores, fit_loop, lm_eval, score
from mingru_cli.config import TrainConfig, check_precision, stack_arguments
from mingru_cli.tasks import Batch, Task

__all__ = ["compute_dtype", "fit", "fit_jax", "fit_lm", "generate_bytes", "jax_device",
           "load_lm", "session", "validation_loss"]


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


def compute_dtype(precision: str) -> Any:
    """The Flax modules' ``dtype`` for ``precision`` (a :data:`mingru_cli.config.PRECISIONS`
    name): ``jnp.bfloat16`` for ``"bf16"``, ``None`` (the parameters' float32) for ``"fp32"``.

    Example:
        >>> compute_dtype("fp32") is None
        True
    """
    check_precision(precision)
    return _imports()[1].bfloat16 if precision == "bf16" else None


def _check_precision(model: Any, precision: str) -> None:
    """A Flax model computes in the dtype it was built with (:func:`fit_lm` builds it from
    ``--precision``; a loaded checkpoint computes in float32): ``precision`` must name it."""
    jnp = _imports()[1]
    built = model.embedding.dtype or model.embedding.param_dtype
    wanted = compute_dtype(precision) or jnp.float32
    if jnp.dtype(built) != jnp.dtype(wanted):
        raise ValueError(f"--precision {precision}: the model computes in {jnp.dtype(built)}, "
                         f"not {jnp.dtype(wanted)}; build it with that dtype")


@functools.cache
def _sequence_model() -> type:
    """The Flax twin of :class:`mingru_cli.train.SequenceModel` (one class per process, so
    that equal models have equal graph definitions)."""
    _, jnp, _, nnx, MinGRUStack = _imports()

    class SequenceModel(nnx.Module):
        """Embedding → ``mingru_jax.MinGRUStack`` → linear head; logits ``(B, T, n_classes)``."""

        def __init__(self, task: Task, cfg: TrainConfig, n_layers: int, mixer: Any,
                     mixer_kwargs: dict[str, Any] | None, rngs: Any) -> None:
            dtypes = {"dtype": compute_dtype(cfg.precision), "param_dtype": jnp.float32}
            self.embed = nnx.Embed(task.vocab_size, cfg.d_model, rngs=rngs, **dtypes)
            self.stack = MinGRUStack(cfg.d_model, cfg.d_model, n_layers,
                                     mlp_expansion=cfg.mlp_expansion, dropout=cfg.dropout,
                                     learnable_h0=cfg.learnable_h0, mixer=mixer,
                                     mixer_kwargs=mixer_kwargs,
                                     mixer_expansion=cfg.mixer_expansion, rngs=rngs, **dtypes)
            self.head = nnx.Linear(cfg.d_model, task.n_classes, rngs=rngs, **dtypes)

        def __call__(self, tokens: Any) -> Any:
            out, _ = self.stack(self.embed(tokens))
            return self.head(out)

    return SequenceModel


def _model_logits(model: Any, tokens: Any) -> Any:
    return model(tokens)


def _lm_logits(lm: Any, tokens: Any) -> Any:
    return lm(tokens)[0]


def fit_jax(spec: str, task: Task, cfg: TrainConfig, evals: dict[int, Batch],
            val: Batch | None, slot: ModelSlot | None = None) -> dict[str, Any]:
    """Train one Flax model for ``spec`` (from ``slot``'s saved state, if any, saving there);
    returns the same record as the PyTorch path."""
    jax, jnp, optax, nnx, _ = _imports()
    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    model = _sequence_model()(task, cfg, n_layers, mixer, mkw, rngs=nnx.Rngs(cfg.seed))
    trainer = _Trainer(model, _model_logits, cfg)

    def evaluate(batch: Batch) -> Accuracy:
        state = trainer.state
        return score(lambda tokens: np.asarray(trainer.predict(state["params"], state["rest"],
                                                               jnp.asarray(tokens))),
                     batch, cfg.eval_batch_size)

    record = trainer.fit(spec, task, cfg, val=val, evaluate=evaluate, slot=slot)
    record.update(final_scores(evaluate, evals))
    record["framework"] = "jax"
    return record


def fit_lm(spec: str, task: Task, cfg: TrainConfig, val: Batch,
           slot: ModelSlot | None = None) -> tuple[dict[str, Any], Any]:
    """Train a :class:`mingru_jax.MinGRULM` for ``spec`` on ``task`` (``--task lm``),
    reporting the training loss and the loss on the validation stretches ``val``
    (:func:`validation_loss`) at every evaluation point; ``(record, model)``, the model in
    eval mode with the parameters of the point of lowest validation loss
    (``record["selected_step"]``)."""
    jax, jnp, optax, nnx, _ = _imports()
    from mingru_jax import MinGRULM

    mixer, n_layers, mkw = stack_arguments(spec, cfg)
    model = MinGRULM(task.vocab_size, cfg.d_model, n_layers, mixer=mixer, mixer_kwargs=mkw,
                     mlp_expansion=cfg.mlp_expansion, dropout=cfg.dropout,
                     learnable_h0=cfg.learnable_h0, mixer_expansion=cfg.mixer_expansion,
                     dtype=compute_dtype(cfg.precision), param_dtype=jnp.float32,
                     rngs=nnx.Rngs(cfg.seed))
    trainer = _Trainer(model, _lm_logits, cfg)

    on_eval = lm_eval(lambda batch, chunk: validation_loss(trainer.model(), batch, chunk,
                                                           precision=cfg.precision), val, cfg)
    record = trainer.fit(spec, task, cfg, val=None, evaluate=lambda b: Accuracy(0.0, 0.0),
                         on_eval=on_eval, select_lowest="val_loss", slot=slot)
    record["framework"] = "jax"
    return record, trainer.model()


@functools.lru_cache(maxsize=8)
def _chunk_loss(graphdef: Any) -> Callable[..., Any]:
    """``(params, rest, tokens, labels, state) -> (summed loss over labels ≥ 0, state)`` of
    the language model of ``graphdef``, jitted once per model structure."""
    jax, jnp, optax, nnx, _ = _imports()

    @jax.jit
    def chunk_loss(params: Any, rest: Any, tokens: Any, labels: Any, state: Any) -> Any:
        logits, state = nnx.merge(graphdef, params, rest)(tokens, state)
        scored = labels >= 0
        nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32),
                                                              jnp.where(scored, labels, 0))
        return jnp.where(scored, nll, 0.0).sum(), state

    return chunk_loss


def validation_loss(model: Any, batch: Batch, chunk: int, *, precision: str = "fp32") -> float:
    """The mean cross-entropy (nats per byte, from float32 logits) of the
    :class:`mingru_jax.MinGRULM` ``model`` (put in eval mode; it computes at ``precision``,
    the dtype it was built with: a different one is a ``ValueError``) over the scored
    positions of ``batch`` (int64 ``(R, W)`` tokens and labels, ``-100`` where unscored, as
    :meth:`ByteText.validation` gives): each row from the default state, in chunks of
    ``chunk`` bytes with the state carried, so the result is that of one forward per row
    whatever ``chunk`` is."""
    jnp, nnx = _imports()[1], _imports()[3]
    _check_precision(model, precision)
    model.eval()
    graphdef, params, rest = nnx.split(model, nnx.Param, ...)
    run = _chunk_loss(graphdef)

    def chunk_loss(tokens: np.ndarray, labels: np.ndarray, state: Any) -> tuple[Any, Any]:
        return run(params, rest, tokens=jnp.asarray(tokens), labels=jnp.asarray(labels),
                   state=state)

    # A concrete first state: every chunk then has one signature, one compilation.
    return chunked_loss(batch, chunk_loss, chunk, state=model.init_state(batch.tokens.shape[0]))


class _Compiled(NamedTuple):
    """The jitted functions of one model structure and optimizer setting."""

    tx: Any  # the optax transformation
    train_step: Callable[..., Any]  # (params, opt, rest, tokens, labels, mask, lr) -> (..., loss, acc)
    logits: Callable[..., Any]  # (params, rest, tokens) -> logits, eval mode
    predict: Callable[..., Any]  # (params, rest, tokens) -> classes, eval mode


@functools.lru_cache(maxsize=8)
def _compiled(graphdef: Any, eval_graphdef: Any, *, logits_of: Callable[[Any, Any], Any],
              grad_clip: float, weight_decay: float, parts: int) -> _Compiled:
    """Built once per process for equal arguments (graph definitions compare by structure),
    so runs of one model structure, a resumed one among them, share the compiled steps."""
    jax, jnp, optax, nnx, _ = _imports()
    tx = optax.chain(
        *([optax.clip_by_global_norm(grad_clip)] if grad_clip else []),
        optax.adamw(1.0, b1=0.9, b2=0.999, eps=1e-8, weight_decay=weight_decay),
    )

    def loss_fn(net: Any, tokens: Any, labels: Any, mask: Any):
        logits = logits_of(net, tokens)
        safe = jnp.where(mask, labels, 0)
        # The loss in float32 from the logits, whatever the compute dtype.
        nll = optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), safe)
        n = jnp.maximum(mask.sum(), 1)
        loss = jnp.where(mask, nll, 0.0).sum() / n
        acc = ((logits.argmax(-1) == safe) & mask).sum() / n
        return loss, acc

    def grad_fn(p: Any, rest: Any, tokens: Any, labels: Any, mask: Any):
        """``(loss, (accuracy, rest after the step)), gradients``: nnx's transform lets the
        dropout streams in ``rest`` advance."""
        net = nnx.merge(graphdef, p, rest)
        (loss, acc), grads = nnx.value_and_grad(loss_fn, has_aux=True)(net, tokens, labels, mask)
        return (loss, (acc, nnx.split(net, nnx.Param, ...)[2])), grads

    def accumulated(p: Any, rest: Any, tokens: Any, labels: Any, mask: Any):
        def micro(carry: Any, part: Any):
            # The parameters ride in the carry: nnx merges only values of the scan's trace.
            params, total, rest = carry
            (loss, (acc, rest)), grads = grad_fn(params, rest, *part)
            return (params, jax.tree.map(jnp.add, total, grads), rest), (loss, acc)

        split = [x.reshape(parts, -1, *x.shape[1:]) for x in (tokens, labels, mask)]
        zeros = jax.tree.map(jnp.zeros_like, p)
        (_, grads, rest), (losses, accs) = jax.lax.scan(micro, (p, zeros, rest), split)
        grads = jax.tree.map(lambda g: g / parts, grads)
        return (losses.mean(), (accs.mean(), rest)), grads

    @jax.jit
    def train_step(p: Any, opt_state: Any, rest: Any, tokens: Any, labels: Any, mask: Any,
                   lr: Any):
        gradients = grad_fn if parts == 1 else accumulated
        (loss, (acc, rest)), grads = gradients(p, rest, tokens, labels, mask)
        updates, opt_state = tx.update(grads, opt_state, p)
        updates = jax.tree.map(lambda u: lr * u, updates)
        return optax.apply_updates(p, updates), opt_state, rest, loss, acc

    def logits(p: Any, rest: Any, tokens: Any) -> Any:
        return logits_of(nnx.merge(eval_graphdef, p, rest), tokens)

    return _Compiled(tx=tx, train_step=train_step, logits=jax.jit(logits),
                     predict=jax.jit(lambda p, rest, tokens: logits(p, rest, tokens).argmax(-1)))


class _Trainer:
    """AdamW on a Flax model's parameters under ``jax.jit``; ``logits_of(model, tokens)`` is
    its output (a module-level function, so that equal runs share compiled steps). Learning
    rate 1 inside, the schedule multiplies the updates: with decoupled weight decay this
    equals adamw(lr) step by step, and keeps one compiled step for every lr.

    ``state``: ``params``, ``opt`` (the optimizer state) and ``rest`` (the model's other
    variables: the dropout random streams, threaded through every step). Training runs the
    model in train mode, :attr:`logits`, :attr:`predict` and :meth:`model` in eval mode (no
    dropout). A step averages the gradients of ``cfg.grad_accum`` micro-batches (a scan over
    them), then clips their norm to ``cfg.grad_clip``."""

    def __init__(self, model: Any, logits_of: Callable[[Any, Any], Any], cfg: TrainConfig) -> None:
        jax, jnp, optax, nnx, _ = _imports()
        model.train()
        graphdef, params, rest = nnx.split(model, nnx.Param, ...)
        model.eval()
        eval_graphdef = nnx.split(model, nnx.Param, ...)[0]
        compiled = _compiled(graphdef, eval_graphdef, logits_of=logits_of,
                             grad_clip=cfg.grad_clip, weight_decay=cfg.weight_decay,
                             parts=cfg.grad_accum)
        self.state = {"params": params, "opt": compiled.tx.init(params), "rest": rest}
        self.model = lambda: nnx.merge(eval_graphdef, self.state["params"], self.state["rest"])
        self.logits, self.predict = compiled.logits, compiled.predict
        self._train_step, self._jnp = compiled.train_step, jnp

    def step(self, batch: Batch, lr: float) -> tuple[float, float]:
        jnp, state = self._jnp, self.state
        state["params"], state["opt"], state["rest"], loss, acc = self._train_step(
            state["params"], state["opt"], state["rest"], jnp.asarray(batch.tokens),
            jnp.asarray(batch.labels), jnp.asarray(batch.mask), jnp.float32(lr))
        return float(loss), float(acc)

    def fit(self, spec: str, task: Task, cfg: TrainConfig, val: Batch | None,
            evaluate: Callable[[Batch], Accuracy],
            on_eval: Callable[[float], dict[str, float]] | None = None,
            select_lowest: str | None = None, slot: ModelSlot | None = None) -> dict[str, Any]:
        """:func:`fit_loop` with this trainer's steps; the record counts the parameters."""
        record = fit_loop(spec, task, cfg, val=val, step_fn=self.step, evaluate=evaluate,
                          snapshot=lambda: self.state["params"],
                          restore=lambda p: self.state.update(params=p), on_eval=on_eval,
                          select_lowest=select_lowest, slot=slot, files=_JaxState(self))
        jax = _imports()[0]
        record["parameters"] = int(sum(x.size for x in jax.tree.leaves(self.state["params"])))
        return record


class _JaxState:
    """The tensor file of a JAX run: a NumPy ``.npz`` of the leaves of the trainer's
    ``params``, ``opt`` and ``rest`` (random keys as their raw key data) and of the best
    validation point's parameters, in ``jax.tree.leaves`` order. Loading puts them into the
    trees of a freshly built trainer, which fix the structure, shapes and dtypes."""

    suffix = ".npz"
    TREES = ("params", "opt", "rest")

    def __init__(self, trainer: _Trainer) -> None:
        self.trainer = trainer
        self.jax = _imports()[0]

    def save(self, path: Path, best: Any) -> None:
        trees = {name: self.trainer.state[name] for name in self.TREES}
        if best is not None:
            trees["best"] = best
        arrays = {f"{name}/{i}": self._raw(leaf) for name, tree in trees.items()
                  for i, leaf in enumerate(self.jax.tree.leaves(tree))}
        with open(path, "wb") as f:
            np.savez(f, **arrays)

    def load(self, path: Path) -> Any:
        state = self.trainer.state
        with np.load(path) as saved:
            arrays = dict(saved)
        for name in self.TREES:
            state[name] = self._fill(state[name], arrays, name=name, path=path)
        has_best = any(key.startswith("best/") for key in arrays)
        return self._fill(state["params"], arrays, name="best", path=path) if has_best else None

    def _raw(self, leaf: Any) -> np.ndarray:
        jax = self.jax
        if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        return np.asarray(leaf)

    def _fill(self, template: Any, arrays: dict[str, np.ndarray], *, name: str, path: Path) -> Any:
        """``template`` with its leaves replaced by the saved ``name/<i>`` arrays."""
        jax = self.jax
        leaves, treedef = jax.tree.flatten(template)
        count = sum(key.startswith(name + "/") for key in arrays)
        filled = []
        for i, leaf in enumerate(leaves):
            raw = arrays.get(f"{name}/{i}")
            expected = self._raw(leaf)
            if count != len(leaves) or raw is None or raw.shape != expected.shape:
                raise ValueError(f"--resume: {path} does not fit this model ({name}: "
                                 f"{count} saved arrays for {len(leaves)})")
            if jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
                filled.append(jax.random.wrap_key_data(raw, impl=jax.random.key_impl(leaf)))
            else:
                filled.append(jax.numpy.asarray(raw, dtype=leaf.dtype))
        return jax.tree.unflatten(treedef, filled)


def load_lm(directory: str, device: str) -> Any:
    """The :class:`mingru_jax.MinGRULM` checkpoint in ``directory`` (on JAX's default device:
    :func:`session` places it)."""
    _imports()
    from mingru_jax import MinGRULM

    return MinGRULM.from_pretrained(directory)


def generate_bytes(model: Any, prompt: bytes, max_new_tokens: int, *, precision: str = "fp32",
                   **sampling: Any) -> bytes:
    """The ``max_new_tokens`` bytes ``model.generate`` continues ``prompt`` with (the model
    computes at ``precision``, the dtype it was built with: a different one is a
    ``ValueError``)."""
    jnp = _imports()[1]
    _check_precision(model, precision)
    out = model.generate(jnp.asarray([list(prompt)], jnp.int32), max_new_tokens, **sampling)
    return bytes(np.asarray(out[0, len(prompt):]).tolist())


fit = fit_jax
