"""Framework-free rules of the language model and its generation, shared by ``mingru`` and
``mingru_jax``: the checkpoint format, the configuration, and the argument checks of
``generate()``. Imports neither torch, jax nor triton.

A checkpoint is a folder with two files, the same for both frontends:

* ``config.json`` — :class:`LMConfig` as JSON, plus ``"model_type": "mingru"`` and
  ``"format_version"`` (readable by transformers' ``PretrainedConfig`` as well);
* ``model.safetensors`` — every parameter under its PyTorch ``state_dict`` name, in PyTorch's
  layout (``nn.Linear.weight`` is ``(out, in)``), float32 unless saved otherwise. With
  ``tie_embeddings`` the head has no entry of its own.

Example:
    >>> from mingru_kernels._lm import LMConfig
    >>> cfg = LMConfig(vocab_size=256, d_model=64, n_layers=2, mixer="signed")
    >>> LMConfig.from_dict(cfg.to_dict()) == cfg
    True
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, NamedTuple

from mingru_kernels._spec import check_mixer_expansion, check_size, stack_layer_specs

__all__ = [
    "CONFIG_NAME",
    "EMBEDDING_STD",
    "FORMAT_VERSION",
    "MODEL_TYPE",
    "PREFILL_TOKENS",
    "WEIGHTS_NAME",
    "LMConfig",
    "Sampling",
    "check_generate_args",
    "check_token_bounds",
    "default_prefill_chunk",
]

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
MODEL_TYPE = "mingru"
FORMAT_VERSION = 1
# Standard deviation of the embedding (and untied head) initialisation, as in GPT-2: with a
# tied head and unit-variance features the first logits are near zero, so training starts
# from an almost uniform next-token distribution.
EMBEDDING_STD = 0.02
# Tokens (batch × chunk) one prefill chunk processes by default: the chunk's activations, not
# the prompt's length, bound the prefill's peak memory. At 2^16 (1024 tokens at batch 64) the
# chunks keep the GPU busy: see docs/explanation/tuning.md § Decode step.
PREFILL_TOKENS = 1 << 16


@dataclasses.dataclass(frozen=True)
class LMConfig:
    """The constructor arguments of ``MinGRULM`` (both frontends), validated.

    ``mixer`` is one mixer name or a tuple of ``n_layers`` names; ``mixer_kwargs`` as in
    ``MinGRUStack`` (flat for one name, keyed by mixer name for a list); ``mixer_expansion``
    widens every layer's mixer state to ``mixer_expansion·d_model`` (see ``MinGRUBlock``; a
    checkpoint without it has ``1``). Time decay is not available in a language model (tokens
    carry no time gaps).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    mixer: str | tuple[str, ...] = "log"
    tie_embeddings: bool = True
    mlp_expansion: int = 4
    mixer_kwargs: dict[str, Any] | None = None
    dropout: float = 0.0
    learnable_h0: bool = False
    mixer_expansion: int = 1

    def __post_init__(self) -> None:
        check_size(self.vocab_size, "vocab_size")
        check_size(self.d_model, "d_model")
        check_size(self.n_layers, "n_layers")
        if not isinstance(self.tie_embeddings, bool):
            raise TypeError(f"tie_embeddings must be a bool; got {self.tie_embeddings!r}")
        if isinstance(self.mixer, list):
            object.__setattr__(self, "mixer", tuple(self.mixer))
        specs = self.layer_specs()
        check_mixer_expansion(self.mixer_expansion, [name for name, _ in specs])
        for _, kwargs in specs:
            if kwargs.get("decay") is not None:
                raise ValueError(
                    "MinGRULM takes no time gaps, so mixer_kwargs must not set decay "
                    f"(got decay={kwargs['decay']!r}); use MinGRUStack for decayed mixers"
                )

    def __hash__(self) -> int:
        # Hashable despite the mixer_kwargs dict: a Flax module keeps its config as a static
        # attribute, and jit hashes the module's static structure.
        return hash(json.dumps(self.to_dict(), sort_keys=True, default=repr))

    def layer_specs(self) -> list[tuple[str, dict[str, Any]]]:
        """Each layer's ``(mixer name, kwargs)``; raises on a bad mixer or kwargs."""
        mixer = list(self.mixer) if isinstance(self.mixer, tuple) else self.mixer
        return stack_layer_specs(mixer, self.mixer_kwargs, self.n_layers, decay_layers="all")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the fields plus ``model_type`` and ``format_version``."""
        out = dataclasses.asdict(self)
        if isinstance(self.mixer, tuple):
            out["mixer"] = list(self.mixer)
        return {"model_type": MODEL_TYPE, "format_version": FORMAT_VERSION, **out}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMConfig:
        """The inverse of :meth:`to_dict`; keys it does not know (transformers' own, such as
        ``architectures`` or ``torch_dtype``) are ignored, a wrong ``model_type`` or a newer
        ``format_version`` is a ``ValueError``."""
        model_type = data.get("model_type", MODEL_TYPE)
        if model_type != MODEL_TYPE:
            raise ValueError(f"config model_type must be {MODEL_TYPE!r}; got {model_type!r}")
        version = data.get("format_version", FORMAT_VERSION)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ValueError(
                f"checkpoint format_version {version!r} is newer than this library reads "
                f"({FORMAT_VERSION}): upgrade mingru-scans"
            )
        names = {field.name for field in dataclasses.fields(cls)}
        missing = [n for n in ("vocab_size", "d_model", "n_layers") if n not in data]
        if missing:
            raise ValueError(f"config is missing {', '.join(missing)}")
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, directory: str | os.PathLike[str], **extra: Any) -> str:
        """Write ``config.json`` into ``directory`` (created); ``extra`` keys are added."""
        os.makedirs(directory, exist_ok=True)
        path = os.path.join(directory, CONFIG_NAME)
        with open(path, "w", encoding="utf-8") as f:
            json.dump({**self.to_dict(), **extra}, f, indent=2, sort_keys=True)
            f.write("\n")
        return path

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> LMConfig:
        """Read ``directory/config.json``; a missing file is a ``FileNotFoundError`` naming it."""
        path = os.path.join(directory, CONFIG_NAME)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"no {CONFIG_NAME} in {os.fspath(directory)!r}: not a "
                                    "MinGRULM checkpoint (save one with save_pretrained)")
        with open(path, encoding="utf-8") as f:
            return cls.from_dict(json.load(f))


def check_generate_args(
    *,
    max_new_tokens: object,
    temperature: object,
    top_k: object,
    top_p: object,
    eos_token_id: object,
    prefill_chunk: object,
    vocab_size: int,
) -> None:
    """The scalar arguments of ``generate()``: a ``ValueError`` / ``TypeError`` naming the
    first bad one."""
    if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int):
        raise TypeError(f"max_new_tokens must be an int; got {max_new_tokens!r}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0; got {max_new_tokens}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a float; got {temperature!r}")
    if not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be finite and >= 0 (0 is greedy); got {temperature}")
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, int):
            raise TypeError(f"top_k must be an int or None; got {top_k!r}")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1; got {top_k}")
    if top_p is not None:
        if isinstance(top_p, bool) or not isinstance(top_p, (int, float)):
            raise TypeError(f"top_p must be a float in (0, 1] or None; got {top_p!r}")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1]; got {top_p}")
    if eos_token_id is not None:
        if isinstance(eos_token_id, bool) or not isinstance(eos_token_id, int):
            raise TypeError(f"eos_token_id must be an int or None; got {eos_token_id!r}")
        if not 0 <= eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id must be in [0, vocab_size={vocab_size}); "
                             f"got {eos_token_id}")
    if prefill_chunk is not None:
        if isinstance(prefill_chunk, bool) or not isinstance(prefill_chunk, int):
            raise TypeError(f"prefill_chunk must be an int or None; got {prefill_chunk!r}")
        if prefill_chunk < 1:
            raise ValueError(f"prefill_chunk must be >= 1; got {prefill_chunk}")


def check_token_bounds(low: int, high: int, vocab_size: int, *, name: str) -> None:
    """Tokens whose minimum is ``low`` and maximum ``high`` must lie in ``[0, vocab_size)``."""
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} holds token {bad}, outside [0, vocab_size={vocab_size})")


def default_prefill_chunk(batch_size: int) -> int:
    """Tokens per prefill chunk when ``prefill_chunk=None``: :data:`PREFILL_TOKENS` per call
    across the batch, at least 64 (a power of two, so chunks reuse the scans' tiles)."""
    chunk = max(64, PREFILL_TOKENS // max(1, batch_size))
    return 1 << (chunk.bit_length() - 1)


class Sampling(NamedTuple):
    """How ``generate()`` picks each token, the same in both frontends: ``temperature == 0``
    is greedy (argmax); otherwise the logits are divided by ``temperature``, cut to the
    ``top_k`` largest, then to the nucleus (the smallest set of most probable tokens whose
    probability reaches ``top_p``; the most probable is always kept), and ONE uniform number
    per row and token picks by inverse CDF. ``eos_token_id``: a row that emitted it keeps
    emitting it. Hashable: it keys compiled decoding loops and captured graphs."""

    temperature: float
    top_k: int | None
    top_p: float | None
    eos_token_id: int | None

    @classmethod
    def of(cls, temperature: float, top_k: int | None, top_p: float | None,
           *, eos_token_id: int | None) -> Sampling:
        """From ``generate()``'s (checked) arguments, numbers as Python floats."""
        return cls(float(temperature), top_k, None if top_p is None else float(top_p),
                   eos_token_id)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0
