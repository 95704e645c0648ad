"""MinGRULM (Flax NNX): a token language model on :class:`~mingru_jax.MinGRUStack`, with
jitted generation and checkpoints in the format shared with the PyTorch twin
:class:`mingru.MinGRULM` (:mod:`mingru_kernels._lm`).

    tokens → Embed → MinGRUStack (n_layers blocks, final LayerNorm) → head → logits

With ``tie_embeddings`` the head is the embedding matrix itself (``logits = h Eᵀ``, no
parameter of its own). The recurrent state is a list of one ``(B, S_l)`` array per layer, the
same for the parallel ``__call__`` and the recurrent ``step``, so a prompt's state feeds
``step()`` and a long sequence may be processed in chunks.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax import _validate
from mingru_jax._generation import check_tokens, generate
from mingru_jax.convert import from_state_dict, to_state_dict
from mingru_jax.mixers._common import check_dtypes
from mingru_jax.stack import MinGRUStack
from mingru_kernels._lm import CONFIG_NAME, EMBEDDING_STD, WEIGHTS_NAME, LMConfig
from mingru_kernels._spec import check_stack_state

__all__ = ["MinGRULM"]

State = list[jax.Array]


def _safetensors_numpy() -> Any:
    try:
        import safetensors.numpy
    except ImportError as exc:
        raise ImportError("MinGRULM checkpoints need safetensors: pip install 'safetensors>=0.4' "
                          "(part of the '.[jax]' extra)") from exc
    return safetensors.numpy


class MinGRULM(nnx.Module):
    """A MinGRU language model: embedding, :class:`~mingru_jax.MinGRUStack`, head.

    Args:
        vocab_size: number of token ids.
        d_model: width of the embedding and every block.
        n_layers: number of blocks.
        mixer: one mixer name for every layer, or a list of ``n_layers`` names.
        tie_embeddings: the head reuses the embedding matrix (no ``head`` parameter).
        mlp_expansion: MLP width factor in each block; ``0`` drops the MLPs.
        mixer_kwargs: as in :class:`~mingru_jax.MinGRUStack` (no time decay: tokens carry
            no time gaps).
        dropout: dropout on each block's branch outputs (off in :meth:`generate`, and after
            ``model.eval()``).
        learnable_h0: forwarded to the layers whose mixer takes it (``"log"``, ``"signed"``).
        mixer_expansion: width factor ``m`` of every layer's mixer state, projected back to
            ``d_model`` when ``m > 1`` (see :class:`~mingru_jax.MinGRUBlock`; not with
            ``"delta"``).
        dtype, param_dtype: as in every layer.
        rngs: :class:`flax.nnx.Rngs`.

    The validated arguments are kept as ``self.config`` (an
    :class:`~mingru_kernels._lm.LMConfig`). Initialisation as in the PyTorch twin: the
    embedding (and an untied head) ``N(0, 0.02²)``; the stack keeps its own.

    Shapes: ``__call__(tokens (B, T) int, state=None) -> (logits (B, T, vocab_size), state)``;
    ``step(token (B,) int, state=None) -> (logits (B, vocab_size), state)``; the state is a
    list of one ``(B, S_l)`` array per layer (``S_l = mixer_expansion·d_model``, or
    ``n_heads·d_k·d_v`` for ``"delta"``), ``None`` for every layer's default start (:meth:`init_state`).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRULM
        >>> model = MinGRULM(100, 16, 2, mixer="signed", rngs=nnx.Rngs(0))
        >>> tokens = jnp.array([[1, 2, 3, 4, 5]])
        >>> logits, state = model(tokens)
        >>> logits.shape, [s.shape for s in state]
        ((1, 5, 100), [(1, 16), (1, 16)])
        >>> next_logits, state = model.step(jnp.argmax(logits[:, -1], axis=-1), state)
        >>> model.generate(tokens, 8, temperature=0.0).shape
        (1, 13)
    """

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        n_layers: int,
        *,
        mixer: str | Sequence[str] = "log",
        tie_embeddings: bool = True,
        mlp_expansion: int = 4,
        mixer_kwargs: dict[str, Any] | None = None,
        dropout: float = 0.0,
        learnable_h0: bool = False,
        mixer_expansion: int = 1,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        if not isinstance(mixer, str):
            mixer = tuple(mixer)
        self.config = LMConfig(
            vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, mixer=mixer,
            tie_embeddings=tie_embeddings, mlp_expansion=mlp_expansion,
            mixer_kwargs=mixer_kwargs, dropout=dropout, learnable_h0=learnable_h0,
            mixer_expansion=mixer_expansion,
        )
        check_dtypes(dtype, param_dtype)
        # States come out of the layers in the compute dtype; init_state matches it so a
        # prefill's state and a fresh one have the same type.
        self._state_dtype = jnp.dtype(param_dtype if dtype is None else dtype)
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        init = nnx.initializers.normal(EMBEDDING_STD)
        self.embedding = nnx.Embed(vocab_size, d_model, embedding_init=init, **kw)
        self.stack = MinGRUStack(d_model, d_model, n_layers, mlp_expansion=mlp_expansion,
                                 dropout=dropout, learnable_h0=learnable_h0,
                                 mixer=list(mixer) if isinstance(mixer, tuple) else mixer,
                                 mixer_kwargs=mixer_kwargs, mixer_expansion=mixer_expansion,
                                 **kw)
        if tie_embeddings:
            self.head = nnx.data(None)
        else:
            # Full float32 products, as every linear layer of the stack (mixers._common.linear).
            self.head = nnx.Linear(d_model, vocab_size, use_bias=False, kernel_init=init,
                                   precision=jax.lax.Precision.HIGHEST, **kw)

    # ----------------------------------------------------------------------------- state

    @property
    def state_sizes(self) -> list[int]:
        """``S_l`` of every layer: the size of its state in step form ``(B, S_l)``."""
        return [block.mixer.state_size for block in self.stack.blocks]

    def init_state(self, batch_size: int, *, dtype: Any = None) -> State:
        """The state every layer starts from when ``state`` is None, as concrete ``(B, S_l)``
        arrays (default dtype: the compute dtype, that of the states the model returns):
        ``0.5`` for ``"log"`` (``g(h0)`` with ``learnable_h0``), ``0`` for ``"signed"`` (its
        ``h0`` with ``learnable_h0``), the learned ``h0`` for ``"rotation"`` and
        ``"givens"``, ``0`` for ``"delta"``. ``model(tokens, init_state(B))`` equals
        ``model(tokens)``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
        dtype = self._state_dtype if dtype is None else dtype
        return [block.mixer.initial_state(batch_size, dtype) for block in self.stack.blocks]

    def _check_state(self, state: object, batch: int) -> list[jax.Array | None]:
        state = check_stack_state(state, self.config.n_layers)
        for index, (entry, size) in enumerate(zip(state, self.state_sizes, strict=True)):
            if entry is None:
                continue
            name, shape = f"state[{index}]", (batch, size)
            entry = _validate.float_array(entry, name, 2, shape=f"(B, {size})")
            if tuple(entry.shape) != shape:
                raise ValueError(f"{name} must have shape (B, {size}) = {shape}; got "
                                 f"{tuple(entry.shape)}")
            state[index] = entry
        return state

    # --------------------------------------------------------------------------- forward

    def features(self, tokens: jax.Array, state: Sequence[jax.Array | None] | None = None
                 ) -> tuple[jax.Array, State]:
        """``(features (B, T, d_model), state)``: ``__call__`` before the head (the stack's
        normalised output), for a loss or a head applied to some positions only. The token
        values are not checked here."""
        tokens = check_tokens(tokens, "tokens", ("B", "T"), vocab_size=self.config.vocab_size,
                              read_values=False)
        return self._features(tokens, self._check_state(state, tokens.shape[0]))

    def _features(self, tokens: jax.Array, state: State) -> tuple[jax.Array, State]:
        """:meth:`features` on checked tokens and state."""
        sequence_state = [None if entry is None else entry[:, None] for entry in state]
        hidden, new_state = self.stack(self.embedding(tokens), sequence_state)
        return hidden, [entry[:, 0] for entry in new_state]

    def _logits(self, hidden: jax.Array) -> jax.Array:
        """``(..., vocab_size)`` logits of ``hidden (..., d_model)``."""
        if self.head is not None:
            return self.head(hidden)
        # embedding.attend, at full float32 precision as every linear layer here.
        hidden, table = self.embedding.promote_dtype((hidden, self.embedding.embedding[...]),
                                                     dtype=self.embedding.dtype)
        return jax.lax.dot_general(hidden, table, (((hidden.ndim - 1,), (1,)), ((), ())),
                                   precision=jax.lax.Precision.HIGHEST)

    def __call__(self, tokens: jax.Array, state: Sequence[jax.Array | None] | None = None
                 ) -> tuple[jax.Array, State]:
        """``(logits (B, T, vocab_size), state)`` for ``tokens (B, T)`` (integer, in
        ``[0, vocab_size)``; the values are checked on concrete arrays only). ``state`` is
        ``None`` or a previous call's state: chunks carried this way give the logits of one
        call on the whole sequence."""
        tokens = check_tokens(tokens, "tokens", ("B", "T"), vocab_size=self.config.vocab_size)
        hidden, state = self._features(tokens, self._check_state(state, tokens.shape[0]))
        return self._logits(hidden), state

    def step(self, token: jax.Array, state: Sequence[jax.Array | None] | None = None
             ) -> tuple[jax.Array, State]:
        """``(logits (B, vocab_size), state)`` for one token per row, ``token (B,)``
        (integer, in ``[0, vocab_size)``: checked on concrete arrays only, so a jitted step
        never reads values back)."""
        token = check_tokens(token, "token", ("B",), vocab_size=self.config.vocab_size)
        state = self._check_state(state, token.shape[0])
        hidden, state = self.stack.step(self.embedding(token), state)
        return self._logits(hidden), state

    # The decoding entry point, its signature and documentation: mingru_jax._generation.
    generate = generate

    # ----------------------------------------------------------------------- checkpoints

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created): every
        parameter under its PyTorch ``state_dict`` name and in PyTorch's layout, in its own
        dtype, so :meth:`mingru.MinGRULM.from_pretrained` reads it too."""
        safetensors_numpy = _safetensors_numpy()
        self.config.save(directory)
        # "pt": the names and layout are PyTorch's, which is what transformers checks for.
        safetensors_numpy.save_file(to_state_dict(self), os.path.join(directory, WEIGHTS_NAME),
                                    metadata={"format": "pt"})

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike[str], *, dtype: Any = None,
                        param_dtype: Any = None) -> MinGRULM:
        """A model read from a checkpoint folder written by ``save_pretrained`` (either
        frontend's). ``param_dtype=None`` keeps the stored dtype; ``dtype`` is the compute
        dtype, as in the constructor.

        Raises:
            FileNotFoundError: the folder lacks ``config.json`` or ``model.safetensors``.
            ValueError: the weights do not fit the config (missing or unexpected names,
                shapes), naming them.

        Example:
            >>> import tempfile
            >>> from flax import nnx
            >>> from mingru_jax import MinGRULM
            >>> model = MinGRULM(50, 16, 1, rngs=nnx.Rngs(0))
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     model.save_pretrained(folder)
            ...     again = MinGRULM.from_pretrained(folder)
            >>> again.config == model.config
            True
        """
        config = LMConfig.load(directory)
        path = os.path.join(directory, WEIGHTS_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no {WEIGHTS_NAME} beside the {CONFIG_NAME} in "
                                    f"{os.fspath(directory)!r}")
        weights = _safetensors_numpy().load_file(path)
        if param_dtype is None:  # the stored dtype
            stored = weights.get("embedding.weight", next(iter(weights.values())))
            param_dtype = stored.dtype
        model = cls(
            config.vocab_size, config.d_model, config.n_layers,
            mixer=config.mixer, tie_embeddings=config.tie_embeddings,
            mlp_expansion=config.mlp_expansion, mixer_kwargs=config.mixer_kwargs,
            dropout=config.dropout, learnable_h0=config.learnable_h0,
            mixer_expansion=config.mixer_expansion,
            dtype=dtype, param_dtype=param_dtype, rngs=nnx.Rngs(0),
        )
        return from_state_dict(model, weights, source="checkpoint")
