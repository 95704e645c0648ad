"""MinGRULM: a language model, token embedding → :class:`~mingru.stack.MinGRUStack` → head.

The stack ends in its own LayerNorm, so the head reads normalised features. The model keeps
its recurrent state between calls in the *step* form, one ``(B, S_l)`` tensor per layer
(``S_l = mixer_expansion·d_model``, or ``n_heads·d_k·d_v`` for a ``"delta"`` layer), so the state a parallel
``forward`` returns feeds :meth:`MinGRULM.step` directly and the other way round. The
checkpoint format (``config.json`` + ``model.safetensors``) and the configuration rules are
shared with ``mingru_jax.MinGRULM`` (:mod:`mingru_kernels._lm`).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mingru import _generation, _validate
from mingru.mixers._common import fused_linear, g
from mingru.mixers.log import MinGRU
from mingru.stack import MinGRUStack
from mingru_kernels._lm import (
    CONFIG_NAME,
    EMBEDDING_STD,
    WEIGHTS_NAME,
    LMConfig,
    check_token_bounds,
)

__all__ = ["MinGRULM", "check_tokens"]

State = list[torch.Tensor]


def check_tokens(
    tokens: object, name: str, *, ndim: int, vocab_size: int, device: torch.device,
    read_values: bool = True,
) -> torch.Tensor:
    """``tokens`` must be an integer tensor of rank ``ndim`` (``(B, T)`` with ``B, T ≥ 1``, or
    ``(B,)`` with ``B ≥ 1``) on ``device``, with values in ``[0, vocab_size)``.

    The values are read in ONE device copy (their minimum and maximum), and only when
    ``read_values`` and neither ``torch.compile`` traces nor a CUDA graph captures. Returns
    the tokens as ``int64`` (``nn.Embedding`` takes int32 and int64 only) unless already
    int32 or int64.
    """
    shape = "(B, T)" if ndim == 2 else "(B,)"
    if not isinstance(tokens, torch.Tensor):
        raise TypeError(f"{name} must be an integer torch.Tensor of shape {shape}; "
                        f"got {type(tokens).__name__}")
    dtype = tokens.dtype
    if dtype.is_floating_point or dtype.is_complex or dtype == torch.bool:
        raise TypeError(f"{name} must be an integer tensor (token ids, e.g. int64); got {dtype}")
    if tokens.ndim != ndim or 0 in tokens.shape:
        sizes = "B, T ≥ 1" if ndim == 2 else "B ≥ 1"
        raise ValueError(f"{name} must have shape {shape} with {sizes}; got {tuple(tokens.shape)}")
    if tokens.device != device:
        raise ValueError(f"{name} must be on the model's device {device}; got {tokens.device}")
    if read_values and not _tracing(tokens):
        low, high = torch.stack(list(torch.aminmax(tokens))).tolist()
        check_token_bounds(low, high, vocab_size, name=name)
    return tokens if dtype in (torch.int32, torch.int64) else tokens.long()


def _tracing(tensor: torch.Tensor) -> bool:
    """Whether a device read is impossible now: ``torch.compile`` traces, or a CUDA graph
    captures on the current stream."""
    if torch.compiler.is_compiling():
        return True
    return tensor.is_cuda and torch.cuda.is_current_stream_capturing()


class MinGRULM(nn.Module):
    """A MinGRU language model: ``embedding`` → ``stack`` (:class:`~mingru.stack.MinGRUStack`,
    ending in a LayerNorm) → ``head`` (``nn.Linear(d_model, vocab_size, bias=False)``).

    Args:
        vocab_size: number of token ids.
        d_model: width of the embedding and of every block.
        n_layers: number of blocks.
        mixer: one mixer name for every layer or a list of ``n_layers`` names (see
            :class:`~mingru.stack.MinGRUStack`); time decay is not available (tokens carry no
            time gaps).
        tie_embeddings: the head's weight IS the embedding's (one parameter).
        mlp_expansion: MLP width factor in each block; ``0`` drops the MLPs.
        mixer_kwargs: as in :class:`~mingru.stack.MinGRUStack` (flat for one name, keyed by
            mixer name for a list).
        dropout: dropout on each block's branch outputs.
        learnable_h0: forwarded to the layers whose mixer takes it (``"log"``, ``"signed"``).
        mixer_expansion: width factor ``m`` of every layer's mixer state, projected back to
            ``d_model`` when ``m > 1`` (see :class:`~mingru.block.MinGRUBlock`; not with
            ``"delta"``).

    The validated arguments are kept as ``config`` (a :class:`mingru_kernels._lm.LMConfig`).
    Initialisation: the embedding (and an untied head) ``N(0, 0.02²)``; the stack keeps its
    own (PyTorch's defaults for the linear layers, the mixers' for their ``h0``).

    Shapes (``S_l``: layer ``l``'s state size, ``mixer_expansion·d_model`` or
    ``n_heads·d_k·d_v`` for ``"delta"``; the state is a list of one ``(B, S_l)`` tensor per layer):

    * ``forward(tokens (B, T) int, state=None) -> (logits (B, T, vocab_size), state)``;
    * ``step(token (B,) int, state=None) -> (logits (B, vocab_size), state)``;
    * ``init_state(B) -> state``, the tensors every layer starts from when ``state`` is None;
    * ``generate(prompt (B, T0), max_new_tokens, ...) -> (B, T0 + max_new_tokens)`` samples
      continuations (:func:`mingru._generation.generate`); :meth:`save_pretrained` /
      :meth:`from_pretrained` write and read a checkpoint.

    Example:
        >>> import torch
        >>> from mingru import MinGRULM
        >>> model = MinGRULM(100, 32, 2, mixer=["signed", "givens"],
        ...                  mixer_kwargs={"givens": {"block_size": 4}})
        >>> tokens = torch.randint(0, 100, (2, 12))
        >>> logits, state = model(tokens[:, :8])
        >>> logits.shape, [s.shape for s in state]
        (torch.Size([2, 8, 100]), [torch.Size([2, 32]), torch.Size([2, 32])])
        >>> logits_t, state = model.step(tokens[:, 8], state)   # = model(tokens[:, :9])[0][:, -1]
        >>> model.generate(tokens[:, :4], 5, temperature=0.0).shape
        torch.Size([2, 9])
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
    ) -> None:
        super().__init__()
        mixer = mixer if isinstance(mixer, str) else tuple(mixer)
        self.config = LMConfig(
            vocab_size=vocab_size, d_model=d_model, n_layers=n_layers, mixer=mixer,
            tie_embeddings=tie_embeddings, mlp_expansion=mlp_expansion,
            mixer_kwargs=mixer_kwargs, dropout=dropout, learnable_h0=learnable_h0,
            mixer_expansion=mixer_expansion,
        )
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.stack = MinGRUStack(
            d_model, d_model, n_layers, mlp_expansion=mlp_expansion, dropout=dropout,
            learnable_h0=learnable_h0, mixer=mixer if isinstance(mixer, str) else list(mixer),
            mixer_kwargs=mixer_kwargs, mixer_expansion=mixer_expansion,
        )
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        nn.init.normal_(self.embedding.weight, std=EMBEDDING_STD)
        if tie_embeddings:
            self.head.weight = self.embedding.weight
        else:
            nn.init.normal_(self.head.weight, std=EMBEDDING_STD)
        # Captured decoding graphs of generate(): a plain dict, not a module or buffer, so it
        # is neither in state_dict nor moved by .to() (see mingru._generation).
        self._decode_graphs: dict[Any, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # CUDA graphs cannot be pickled or deep-copied; a copy captures its own.
        state = self.__dict__.copy()
        state["_decode_graphs"] = {}
        return state

    @property
    def state_sizes(self) -> list[int]:
        """``S_l`` of every layer: the size of its state in :meth:`step` form ``(B, S_l)``."""
        return [getattr(block.mixer, "state_size", block.mixer.hidden_size)
                for block in self.stack.blocks]

    def init_state(
        self, batch_size: int, *, device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> State:
        """The state every layer starts from when ``state`` is None, as concrete ``(B, S_l)``
        tensors (default: the model's device and dtype): ``0.5`` for ``"log"`` (``g(h0)``
        with ``learnable_h0``), ``0`` for ``"signed"`` (its ``h0`` with ``learnable_h0``),
        the learned ``h0`` for ``"rotation"`` and ``"givens"``, ``0`` for ``"delta"``.
        ``forward(tokens, init_state(B))`` equals ``forward(tokens)``."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1; got {batch_size!r}")
        weight = self.embedding.weight
        device = weight.device if device is None else torch.device(device)
        dtype = weight.dtype if dtype is None else dtype
        return [_start_state(block.mixer, batch_size, size, device=device, dtype=dtype)
                for block, size in zip(self.stack.blocks, self.state_sizes, strict=True)]

    def _check_state(self, state: object, batch: int) -> list[torch.Tensor | None]:
        """Host-only checks of a step-form state (shapes, not values)."""
        if state is None:
            return [None] * self.config.n_layers
        if not isinstance(state, (list, tuple)) or len(state) != self.config.n_layers:
            raise ValueError(f"state must be None or a list of n_layers={self.config.n_layers} "
                             "tensors (B, S_l), as forward(), step() and init_state() return")
        for i, (entry, size) in enumerate(zip(state, self.state_sizes, strict=True)):
            if entry is None:
                continue
            _validate.float_tensor(entry, f"state[{i}]", 2, shape=f"(B, {size})")
            if tuple(entry.shape) != (batch, size):
                raise ValueError(f"state[{i}] must have shape (B, {size}) = ({batch}, {size}); "
                                 f"got {tuple(entry.shape)}")
        return list(state)

    def _tokens(self, tokens: object, name: str, ndim: int, *, read_values: bool) -> torch.Tensor:
        return check_tokens(tokens, name, ndim=ndim, vocab_size=self.vocab_size,
                            device=self.embedding.weight.device, read_values=read_values)

    def forward(
        self, tokens: torch.Tensor, state: Sequence[torch.Tensor | None] | None = None
    ) -> tuple[torch.Tensor, State]:
        """``(logits (B, T, vocab_size), state)`` for ``tokens (B, T)`` (integer ids in
        ``[0, vocab_size)``), starting from ``state`` (a list of ``(B, S_l)`` tensors, or None
        for every layer's default). Chunking ``tokens`` and carrying ``state`` gives the
        logits of one call (to rounding).

        In eager calls the token values are checked (one device read); a NaN in ``state``
        is a ``ValueError`` (one more)."""
        tokens = self._tokens(tokens, "tokens", 2, read_values=True)
        hidden, state = self._features(tokens, self._check_state(state, tokens.shape[0]))
        return self.head(hidden), state

    def features(
        self, tokens: torch.Tensor, state: Sequence[torch.Tensor | None] | None = None
    ) -> tuple[torch.Tensor, State]:
        """``(features (B, T, d_model), state)``: :meth:`forward` before the head (the stack's
        normalised output), for a loss or a head applied to some positions only. ``tokens``
        are not value-checked here."""
        tokens = self._tokens(tokens, "tokens", 2, read_values=False)
        return self._features(tokens, self._check_state(state, tokens.shape[0]))

    def _features(self, tokens: torch.Tensor, state: list[torch.Tensor | None]
                  ) -> tuple[torch.Tensor, State]:
        """:meth:`features` on checked tokens and state."""
        stack_state = [None if s is None else s[:, None] for s in state]
        hidden, new_state = self.stack(self.embedding(tokens), stack_state)
        # contiguous(): a (B, 1, S) slice of a layer's (B, T, S) output would keep all of it.
        return hidden, [s[:, 0].contiguous() for s in new_state]

    def step(
        self, token: torch.Tensor, state: Sequence[torch.Tensor | None] | None = None
    ) -> tuple[torch.Tensor, State]:
        """``(logits (B, vocab_size), state)`` for one token per row ``token (B,)``.

        Checks shapes, dtypes and devices, never values (a token outside ``[0, vocab_size)``
        is an ``IndexError`` from the embedding on CPU, a device-side assert on CUDA): no
        host synchronisation, so the step can be captured in a CUDA graph or compiled with
        ``torch.compile(fullgraph=True)``."""
        token = self._tokens(token, "token", 1, read_values=False)
        entries = self._check_state(state, token.shape[0])
        hidden, new_state = self.stack.step(self.embedding(token), entries)
        logits = fused_linear(hidden, self.head.weight, self.head.bias)
        return (self.head(hidden) if logits is None else logits), new_state

    generate = _generation.generate

    def save_pretrained(self, directory: str | os.PathLike[str]) -> None:
        """Write ``directory/config.json`` (:class:`~mingru_kernels._lm.LMConfig`) and
        ``directory/model.safetensors`` (every parameter under its ``state_dict`` name, in
        its dtype; with ``tie_embeddings`` the head is not stored: it is the embedding).
        The directory is created if needed; the format is ``mingru_jax.MinGRULM``'s too.

        Example:
            >>> import tempfile
            >>> from mingru import MinGRULM
            >>> model = MinGRULM(50, 16, 1, mixer="delta", mixer_kwargs={"n_heads": 2})
            >>> with tempfile.TemporaryDirectory() as folder:
            ...     model.save_pretrained(folder)
            ...     again = MinGRULM.from_pretrained(folder)
            >>> again.config == model.config
            True
        """
        from safetensors.torch import save_file

        self.config.save(directory)
        tensors = {name: tensor.detach().contiguous()
                   for name, tensor in self.state_dict().items()
                   if name in self._stored_names()}
        save_file(tensors, os.path.join(directory, WEIGHTS_NAME), metadata={"format": "pt"})

    def _stored_names(self) -> set[str]:
        names = set(self.state_dict())
        if self.config.tie_embeddings:
            names.discard("head.weight")
        return names

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike[str], *, device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> MinGRULM:
        """The model :meth:`save_pretrained` wrote to ``directory`` (either frontend's), on
        ``device`` (default CPU) in ``dtype`` (default: the stored one). Strict: a missing
        or unexpected tensor, or one of another shape, is a ``ValueError`` naming it."""
        from safetensors.torch import load_file

        config = LMConfig.load(directory)
        path = os.path.join(directory, WEIGHTS_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no {WEIGHTS_NAME} next to {CONFIG_NAME} in "
                                    f"{os.fspath(directory)!r}")
        tensors = load_file(path)
        model = cls(config.vocab_size, config.d_model, config.n_layers, mixer=config.mixer,
                    tie_embeddings=config.tie_embeddings, mlp_expansion=config.mlp_expansion,
                    mixer_kwargs=config.mixer_kwargs, dropout=config.dropout,
                    learnable_h0=config.learnable_h0, mixer_expansion=config.mixer_expansion)
        expected = model._stored_names()
        missing, unexpected = sorted(expected - set(tensors)), sorted(set(tensors) - expected)
        if missing or unexpected:
            raise ValueError(f"{path} does not match its config: missing {missing}, "
                             f"unexpected {unexpected}")
        own = model.state_dict()
        for name, tensor in tensors.items():
            if tensor.shape != own[name].shape:
                raise ValueError(f"{path}: {name} has shape {tuple(tensor.shape)}, the config "
                                 f"needs {tuple(own[name].shape)}")
        stored = tensors["embedding.weight"].dtype
        model.to(dtype=stored)
        model.load_state_dict(tensors, strict=False)  # the tied head.weight is the embedding
        return model.to(device=device, dtype=dtype)


def _start_state(mixer: nn.Module, batch: int, size: int, *, device: torch.device,
                 dtype: torch.dtype) -> torch.Tensor:
    """``(batch, size)``: what ``mixer`` starts from when its state is None."""
    h0 = getattr(mixer, "h0", None)
    if isinstance(mixer, MinGRU):
        if h0 is None:
            return torch.full((batch, size), 0.5, device=device, dtype=dtype)
        return g(h0.to(device=device, dtype=dtype)).repeat(batch, 1)
    if h0 is None:  # SignedMinGRU without learnable_h0, DeltaMinGRU
        return torch.zeros(batch, size, device=device, dtype=dtype)
    return h0.to(device=device, dtype=dtype).repeat(batch, 1)
