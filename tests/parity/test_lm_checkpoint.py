"""Cross-framework checkpoints of the language model: a folder written by
``mingru.MinGRULM.save_pretrained`` loads in ``mingru_jax.MinGRULM.from_pretrained`` and the
other way round, with the same logits (float32, 1e-5 relative), the same final states and the
same greedy continuation (64 tokens), for every mixer and with widened mixer states
(``mixer_expansion``). Needs both frameworks and both
language models: skipped when either is missing.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
pytest.importorskip("safetensors")
torch_lm = pytest.importorskip("mingru.lm")
import jax.numpy as jnp  # noqa: E402

import mingru_jax  # noqa: E402
from tests.helpers import assert_rel  # noqa: E402
from tests.jax.lm_cases import EXPANDED, MIXERS, VOCAB, lm_args  # noqa: E402

B, T, NEW = 2, 7, 64


def _tokens(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, (B, T)).astype(np.int64)


def _torch_model(mixer: str) -> torch.nn.Module:
    torch.manual_seed(0)
    args, kwargs = lm_args(mixer)
    model = torch_lm.MinGRULM(*args, **kwargs)
    with torch.no_grad():  # every learned h0 away from its start, so ignoring it shows
        for name, param in model.named_parameters():
            if name.endswith("h0"):
                param.normal_(0.0, 0.7)
    return model


def _jax_model(mixer: str) -> mingru_jax.MinGRULM:
    args, kwargs = lm_args(mixer)
    model = mingru_jax.MinGRULM(*args, **kwargs, rngs=nnx.Rngs(3))
    for index, block in enumerate(model.stack.blocks):
        if getattr(block.mixer, "h0", None) is not None:
            key = jax.random.key(200 + index)
            block.mixer.h0[...] = 0.7 * jax.random.normal(key, block.mixer.h0.shape)
    return model


def _compare(pt: torch.nn.Module, fx: mingru_jax.MinGRULM, seed: int) -> None:
    """Logits, final states and greedy tokens of the two frontends' models."""
    tokens = _tokens(seed)
    with torch.no_grad():
        logits_pt, state_pt = pt.eval()(torch.from_numpy(tokens))
    logits_fx, state_fx = fx(jnp.asarray(tokens, jnp.int32))
    assert_rel(logits_fx, logits_pt.numpy(), 1e-5, "logits")
    for layer, (got, want) in enumerate(zip(state_fx, state_pt, strict=True)):
        assert_rel(got, want.numpy(), 1e-5, f"state[{layer}]")
    greedy_pt = pt.generate(torch.from_numpy(tokens), NEW, temperature=0.0)
    greedy_fx = fx.generate(jnp.asarray(tokens, jnp.int32), NEW, temperature=0.0)
    np.testing.assert_array_equal(np.asarray(greedy_fx), greedy_pt.numpy())


@pytest.mark.usefixtures("on_host")
@pytest.mark.parametrize("saved_by", ["torch", "jax"])
@pytest.mark.parametrize("mixer", [*MIXERS, *EXPANDED])
def test_checkpoint_loads_in_the_other_frontend(mixer, saved_by, tmp_path):
    if saved_by == "torch":
        pt = _torch_model(mixer)
        pt.save_pretrained(tmp_path)
        fx = mingru_jax.MinGRULM.from_pretrained(tmp_path)
    else:
        fx = _jax_model(mixer)
        fx.save_pretrained(tmp_path)
        pt = torch_lm.MinGRULM.from_pretrained(tmp_path)
    as_json = lambda config: json.loads(json.dumps(config.to_dict()))  # tuples → lists
    assert as_json(fx.config) == as_json(pt.config)
    assert (fx.head is None) == pt.config.tie_embeddings
    _compare(pt, fx, seed=1 if saved_by == "torch" else 2)


@pytest.mark.usefixtures("on_host")
def test_untied_head_round_trips(tmp_path):
    """An untied head is stored (``head.weight``, PyTorch's ``(vocab, d_model)``) and read
    back by both sides."""
    args, kwargs = lm_args("signed", tie_embeddings=False)
    fx = mingru_jax.MinGRULM(*args, **kwargs, rngs=nnx.Rngs(4))
    fx.save_pretrained(tmp_path / "jax")
    pt = torch_lm.MinGRULM.from_pretrained(tmp_path / "jax")
    np.testing.assert_array_equal(pt.head.weight.detach().numpy(),
                                  np.asarray(fx.head.kernel[...]).T)
    pt.save_pretrained(tmp_path / "torch")
    again = mingru_jax.MinGRULM.from_pretrained(tmp_path / "torch")
    np.testing.assert_array_equal(again.head.kernel[...], fx.head.kernel[...])
    np.testing.assert_array_equal(again.embedding.embedding[...], fx.embedding.embedding[...])
