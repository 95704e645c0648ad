"""Hugging Face ``transformers`` integration (extra ``[hf]``): :class:`MinGRUConfig` and
:class:`MinGRUForCausalLM`, registered with ``AutoConfig`` and ``AutoModelForCausalLM`` when
this module is imported (``import mingru`` does not import it).

A folder written by :meth:`mingru.MinGRULM.save_pretrained` loads with
``AutoModelForCausalLM.from_pretrained(folder)``, and one written by the Hugging Face model's
``save_pretrained`` loads with :meth:`mingru.MinGRULM.from_pretrained`: the same
``config.json`` fields and the same ``model.safetensors`` tensor names (``MinGRULM``'s
``state_dict`` names; a tied head is not stored). ``generate()`` carries the recurrent state
between calls (the model kwarg ``state``, as transformers' RWKV does), so after the prompt
each new token costs one :meth:`mingru.MinGRULM.step`.

Example:
    >>> import tempfile, torch
    >>> import mingru.hf
    >>> from mingru import MinGRULM
    >>> from transformers import AutoModelForCausalLM
    >>> model = MinGRULM(50, 16, 2)
    >>> prompt = torch.randint(0, 50, (2, 5))
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     model.save_pretrained(folder)
    ...     hf_model = AutoModelForCausalLM.from_pretrained(folder)
    >>> out = hf_model.generate(prompt, max_new_tokens=6, do_sample=False)
    >>> torch.equal(out, model.generate(prompt, 6, temperature=0.0))
    True
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional

import mingru_kernels
from mingru.lm import MinGRULM, check_tokens
from mingru.mixers.rotation import RotationMinGRU
from mingru_kernels._lm import FORMAT_VERSION, MODEL_TYPE, LMConfig
from mingru_kernels._spec import snap_per_block

__all__ = ["MinGRUCausalLMOutput", "MinGRUConfig", "MinGRUForCausalLM"]


def _import_hub_kernels() -> None:
    """transformers imports Hugging Face's ``kernels`` package when it is installed (it is a
    dependency of transformers 5). In a checkout of this repository the folder ``kernels/``
    (the source of ``mingru_kernels``) is a package of the same name, found first whenever the
    checkout's root is on ``sys.path`` (``python -m pytest``, a script run from the root).
    Import the installed one with the root left out, so ``sys.modules["kernels"]`` is it."""
    if "kernels" in sys.modules:
        return
    own = Path(mingru_kernels.__file__).resolve().parent
    try:
        spec = importlib.util.find_spec("kernels")
    except (ImportError, ValueError):
        return
    if spec is None or spec.origin is None or Path(spec.origin).resolve().parent != own:
        return
    saved = list(sys.path)
    sys.path[:] = [entry for entry in saved if Path(entry or os.curdir).resolve() != own.parent]
    try:
        importlib.import_module("kernels")
    except ImportError:
        pass  # not installed: transformers does not use it either
    finally:
        sys.path[:] = saved


_import_hub_kernels()
try:
    import transformers
    from transformers import (
        AutoConfig,
        AutoModelForCausalLM,
        GenerationMixin,
        PretrainedConfig,
        PreTrainedModel,
    )
    from transformers.utils import ModelOutput
except ImportError as error:
    raise ImportError(
        "mingru.hf needs Hugging Face transformers: install the extra with "
        "pip install '.[hf]' from a checkout of this repository"
    ) from error

# transformers 5 names the tied weights as {target: source}; 4.x lists the targets.
_TRANSFORMERS_5 = int(transformers.__version__.split(".")[0]) >= 5
_LM_FIELDS = tuple(field.name for field in dataclasses.fields(LMConfig))


class MinGRUConfig(PretrainedConfig):
    """A :class:`mingru.MinGRULM`'s configuration as a transformers config: the fields of
    :class:`mingru_kernels._lm.LMConfig` (validated by it), ``use_cache`` (``forward``
    returns the recurrent state by default) and transformers' own keys. ``hidden_size``,
    ``num_hidden_layers`` and ``tie_word_embeddings`` read ``d_model``, ``n_layers`` and
    ``tie_embeddings``. ``vocab_size``, ``d_model`` and ``n_layers`` default to a small
    byte-level model because transformers builds ``MinGRUConfig()`` to compare against.

    ``config.json`` also carries ``format_version``: a newer one than this library reads is a
    ``ValueError``, as in :meth:`mingru.MinGRULM.from_pretrained`.

    Example:
        >>> from mingru.hf import MinGRUConfig
        >>> config = MinGRUConfig(vocab_size=100, d_model=32, n_layers=2, mixer=["log", "delta"],
        ...                       mixer_kwargs={"delta": {"n_heads": 2}})
        >>> config.lm_config.mixer, config.hidden_size
        (('log', 'delta'), 32)
    """

    model_type = MODEL_TYPE
    attribute_map = {
        "hidden_size": "d_model",
        "num_hidden_layers": "n_layers",
        "tie_word_embeddings": "tie_embeddings",
    }

    def __init__(
        self,
        vocab_size: int = 256,
        d_model: int = 64,
        n_layers: int = 2,
        *,
        use_cache: bool = True,
        **kwargs: Any,
    ) -> None:
        """``kwargs``: the other fields of :class:`~mingru_kernels._lm.LMConfig` (``mixer``,
        ``tie_embeddings``, ``mlp_expansion``, ``mixer_kwargs``, ``dropout``,
        ``learnable_h0``, ``mixer_expansion``, with its defaults) and transformers' own keys."""
        fields = {name: kwargs.pop(name) for name in _LM_FIELDS if name in kwargs}
        tie_word_embeddings = kwargs.pop("tie_word_embeddings", None)
        if tie_word_embeddings is not None:
            fields.setdefault("tie_embeddings", tie_word_embeddings)
        lm = LMConfig.from_dict({
            **fields, "vocab_size": vocab_size, "d_model": d_model, "n_layers": n_layers,
            "model_type": kwargs.pop("model_type", MODEL_TYPE),
            "format_version": kwargs.pop("format_version", FORMAT_VERSION),
        })
        super().__init__(**kwargs)
        # After the base class, whose defaults (tie_word_embeddings=True in 4.x) would win.
        for name, value in lm.to_dict().items():
            if name != "model_type":
                setattr(self, name, value)
        self.use_cache = use_cache

    @property
    def lm_config(self) -> LMConfig:
        """The fields as a (re-validated) :class:`~mingru_kernels._lm.LMConfig`."""
        return LMConfig.from_dict({name: getattr(self, name) for name in _LM_FIELDS})

    @classmethod
    def from_lm_config(cls, config: LMConfig, **kwargs: Any) -> MinGRUConfig:
        """The config of a :class:`mingru.MinGRULM` (its ``config``); ``kwargs`` are
        transformers' own keys (``bos_token_id``, ...)."""
        fields = config.to_dict()
        return cls(**{**{name: fields[name] for name in _LM_FIELDS}, **kwargs})


@dataclasses.dataclass
class MinGRUCausalLMOutput(ModelOutput):
    """What :meth:`MinGRUForCausalLM.forward` returns.

    Attributes:
        loss: the mean next-token cross entropy (scalar) when ``labels`` are given.
        logits: ``(B, T, vocab_size)`` (``T`` cut to ``logits_to_keep`` when set).
        state: the recurrent state after the last position, one ``(B, S_l)`` tensor per layer
            (:meth:`mingru.MinGRULM.forward`'s); ``None`` without ``use_cache``.
    """

    loss: torch.Tensor | None = None
    logits: torch.Tensor | None = None
    state: list[torch.Tensor] | None = None


def _check_attention_mask(mask: object, batch: int) -> None:
    """A recurrent state passes through every position, so it cannot skip pad tokens: only
    an all-ones mask (or none) is accepted. One device read."""
    if mask is None:
        return
    if not isinstance(mask, torch.Tensor) or mask.ndim != 2 or mask.shape[0] != batch:
        raise ValueError(f"attention_mask must be None or a (B, L) tensor with B={batch}; got "
                         f"{tuple(mask.shape) if isinstance(mask, torch.Tensor) else mask!r}")
    if not bool(mask.bool().all()):
        raise ValueError(
            "attention_mask has zeros (padding), which MinGRUForCausalLM cannot honour: its "
            "recurrent state passes through every position, so a pad token, left or right, "
            "changes the state. Pass rows of one length without padding (or one row per call)"
        )


class MinGRUForCausalLM(PreTrainedModel, GenerationMixin):
    """A :class:`mingru.MinGRULM` as a transformers causal LM (``AutoModelForCausalLM``).

    Its modules are the wrapped model's ``embedding``, ``stack`` and ``head`` under the same
    names, so ``state_dict`` names (and the safetensors a ``save_pretrained`` writes) are
    ``MinGRULM``'s; ``lm`` is the wrapped :class:`~mingru.MinGRULM` (sharing those modules).

    ``forward(input_ids (B, T), state=None, attention_mask=None, labels=None, use_cache=None,
    logits_to_keep=0) -> MinGRUCausalLMOutput``: with a ``state`` (the ``state`` a previous
    call returned), ``input_ids`` are only the new tokens, continuing from it (one token
    is one :meth:`~mingru.MinGRULM.step`); ``labels (B, T)`` give the loss, shifted inside
    (position ``t`` predicts ``labels[:, t + 1]``; ``-100`` is ignored). An
    ``attention_mask`` must be all ones (padding, left or right, is refused: see
    :func:`_check_attention_mask`); ``inputs_embeds`` are not taken.

    Example:
        >>> import torch
        >>> from mingru.hf import MinGRUConfig, MinGRUForCausalLM
        >>> model = MinGRUForCausalLM(MinGRUConfig(vocab_size=50, d_model=16, n_layers=2))
        >>> ids = torch.randint(0, 50, (2, 7))
        >>> out = model(ids, labels=ids)
        >>> out.logits.shape, out.loss.shape, len(out.state)
        (torch.Size([2, 7, 50]), torch.Size([]), 2)
        >>> step = model(ids[:, -1:], state=model(ids[:, :-1]).state)
        >>> torch.allclose(step.logits[:, -1], out.logits[:, -1], atol=1e-5)
        True
    """

    config_class = MinGRUConfig
    base_model_prefix = ""
    main_input_name = "input_ids"
    _tied_weights_keys = ({"head.weight": "embedding.weight"} if _TRANSFORMERS_5
                          else ["head.weight"])

    def __init__(self, config: MinGRUConfig) -> None:
        super().__init__(config)
        lm_config = config.lm_config
        lm = MinGRULM(**{name: getattr(lm_config, name) for name in _LM_FIELDS})
        self.embedding, self.stack, self.head = lm.embedding, lm.stack, lm.head
        # Not a submodule (its modules are this model's own): state_dict names stay MinGRULM's.
        object.__setattr__(self, "lm", lm)
        self.post_init()

    def _init_weights(self, module: torch.nn.Module) -> None:
        """``MinGRULM`` initialises its weights when built. transformers builds a model it
        loads on the meta device and calls this for what the checkpoint does not hold: the
        buffers derived from the constructor are rebuilt here (weights missing from a
        checkpoint are refused by :meth:`from_pretrained`)."""
        if isinstance(module, RotationMinGRU) and module.snap_k is not None:
            values = [float(k) for k in snap_per_block(module.snap, module.n_blocks)]
            with torch.no_grad():
                module.snap_k.copy_(torch.tensor(values))
            return
        for name in module._non_persistent_buffers_set:
            if getattr(module, name) is not None:
                raise TypeError(f"{type(module).__name__}.{name}: a derived buffer "
                                "MinGRUForCausalLM does not know how to rebuild")

    @classmethod
    def from_pretrained(cls, *args: Any, **kwargs: Any) -> Any:
        """transformers' ``from_pretrained`` (what ``AutoModelForCausalLM.from_pretrained``
        calls), strict like :meth:`mingru.MinGRULM.from_pretrained`: a tensor the checkpoint
        lacks or one the model does not have is a ``ValueError`` naming it."""
        wants_info = kwargs.pop("output_loading_info", False)
        model, info = super().from_pretrained(*args, output_loading_info=True, **kwargs)
        missing, unexpected = sorted(info["missing_keys"]), sorted(info["unexpected_keys"])
        if missing or unexpected:
            raise ValueError(f"checkpoint does not match its config: missing {missing}, "
                             f"unexpected {unexpected}")
        return (model, info) if wants_info else model

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        # The cache is the recurrent state (model kwarg `state`), not an attention Cache.
        return False

    def get_input_embeddings(self) -> torch.nn.Embedding:
        return self.embedding

    def set_input_embeddings(self, value: torch.nn.Embedding) -> None:
        self.embedding = self.lm.embedding = value

    def get_output_embeddings(self) -> torch.nn.Linear:
        return self.head

    def set_output_embeddings(self, value: torch.nn.Linear) -> None:
        self.head = self.lm.head = value

    def forward(
        self,
        input_ids: torch.Tensor,
        state: list[torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        use_cache: bool | None = None,
        return_dict: bool | None = None,
        logits_to_keep: int = 0,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs: Any,
    ) -> MinGRUCausalLMOutput | tuple[Any, ...]:
        """See the class docstring. ``kwargs`` that transformers passes to every model
        (``output_hidden_states``, ...) are accepted and unused."""
        if inputs_embeds is not None:
            raise ValueError("MinGRUForCausalLM takes input_ids, not inputs_embeds")
        if isinstance(logits_to_keep, bool) or not isinstance(logits_to_keep, int) or (
                logits_to_keep < 0):
            raise ValueError(f"logits_to_keep must be an int >= 0 (0: every position); "
                             f"got {logits_to_keep!r}")
        if labels is not None and logits_to_keep:
            raise ValueError("labels need the logits of every position: logits_to_keep=0")
        lm = self.lm
        input_ids = check_tokens(input_ids, "input_ids", ndim=2, vocab_size=lm.vocab_size,
                                 device=self.embedding.weight.device,
                                 read_values=state is None or input_ids.shape[1] > 1)
        _check_attention_mask(attention_mask, input_ids.shape[0])
        if state is not None and input_ids.shape[1] == 1:
            logits, state = lm.step(input_ids[:, 0], state)
            logits = logits[:, None]
        else:
            hidden, state = lm.features(input_ids, state)
            logits = lm.head(hidden[:, -logits_to_keep:] if logits_to_keep else hidden)
        loss = None if labels is None else _shifted_loss(logits, labels)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        output = MinGRUCausalLMOutput(loss=loss, logits=logits,
                                      state=state if use_cache else None)
        return_dict = self.config.return_dict if return_dict is None else return_dict
        return output if return_dict else output.to_tuple()

    def prepare_inputs_for_generation(
        self,
        input_ids: torch.Tensor,
        state: list[torch.Tensor] | None = None,
        attention_mask: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """What ``generate()`` feeds :meth:`forward`: the whole prompt first, then, once a
        state exists, only the last token (one step). The mask is checked on the prompt only:
        ``generate()`` extends it with ones."""
        inputs: dict[str, Any] = {"input_ids": input_ids, "state": state, "use_cache": use_cache}
        if state is None:
            inputs["attention_mask"] = attention_mask
        else:
            inputs["input_ids"] = input_ids[:, -1:]
        if kwargs.get("logits_to_keep") is not None:
            inputs["logits_to_keep"] = kwargs["logits_to_keep"]
        if kwargs.get("inputs_embeds") is not None:
            inputs["inputs_embeds"] = kwargs["inputs_embeds"]  # refused by forward()
        return inputs

    def _update_model_kwargs_for_generation(self, outputs: ModelOutput,
                                            model_kwargs: dict[str, Any], *args: Any,
                                            **kwargs: Any) -> dict[str, Any]:
        # The state is not a field generate() knows; carry it like RWKV's.
        model_kwargs = super()._update_model_kwargs_for_generation(outputs, model_kwargs,
                                                                   *args, **kwargs)
        model_kwargs["state"] = outputs.get("state")
        return model_kwargs


def _shifted_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross entropy of ``logits[:, t]`` against ``labels[:, t + 1]`` (``-100``
    ignored), in float32."""
    if not isinstance(labels, torch.Tensor) or labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must be a (B, T) = {tuple(logits.shape[:2])} tensor of token "
                         f"ids; got {getattr(labels, 'shape', labels)!r}")
    return functional.cross_entropy(logits[:, :-1].flatten(0, 1).float(),
                                    labels[:, 1:].flatten().long(), ignore_index=-100)


AutoConfig.register(MODEL_TYPE, MinGRUConfig, exist_ok=True)
AutoModelForCausalLM.register(MinGRUConfig, MinGRUForCausalLM, exist_ok=True)
