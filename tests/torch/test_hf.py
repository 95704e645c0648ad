"""mingru.hf: the transformers config round trip, checkpoints that load both ways with the
same logits (``MinGRULM`` ↔ ``AutoModelForCausalLM``), the recurrent state as the cache
(chunks and one-token steps equal one call; ``generate()`` feeds one token per step), greedy
and top-1 sampling equal to ``MinGRULM.generate``, the loss, padding refused, and the extra
staying optional."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from safetensors import safe_open

from mingru import MinGRULM
from tests.torch._lm_cases import MIXER_KWARGS, VOCAB, make_model, tokens

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                reason="needs transformers (the [hf] extra)")


@pytest.fixture(scope="module")
def hf() -> SimpleNamespace:
    """transformers' Auto classes and ``mingru.hf``'s (importing it registers them). Imported
    here, not at collection: ``mingru.hf`` imports transformers' model classes, seconds that
    every test worker would pay before its first test."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from mingru.hf import MinGRUConfig, MinGRUForCausalLM

    return SimpleNamespace(AutoConfig=AutoConfig, AutoModelForCausalLM=AutoModelForCausalLM,
                           MinGRUConfig=MinGRUConfig, MinGRUForCausalLM=MinGRUForCausalLM)


def _stored_names(folder: Path) -> set[str]:
    with safe_open(folder / "model.safetensors", framework="pt") as f:
        return set(f.keys())


def _mixed_model(tie_embeddings: bool) -> MinGRULM:
    """Three layers: the log scan, a derived buffer (rotation's ``snap_k``), a matrix state."""
    torch.manual_seed(3)
    mixers = ["log", "rotation", "delta"]
    return MinGRULM(VOCAB, 16, 3, mixer=mixers, tie_embeddings=tie_embeddings,
                    mixer_kwargs={name: MIXER_KWARGS[name] for name in mixers})


def test_config_round_trip(hf, tmp_path):
    config = hf.MinGRUConfig(vocab_size=VOCAB, d_model=16, n_layers=2, mixer=["log", "delta"],
                          mixer_kwargs={"delta": {"n_heads": 2}}, tie_embeddings=False,
                          bos_token_id=1)
    assert (config.hidden_size, config.num_hidden_layers, config.tie_word_embeddings) == (
        16, 2, False)
    config.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == "mingru" and saved["format_version"] == 1
    again = hf.AutoConfig.from_pretrained(tmp_path)
    assert type(again) is hf.MinGRUConfig and again.bos_token_id == 1
    assert again.lm_config == config.lm_config == hf.MinGRUConfig.from_lm_config(
        config.lm_config).lm_config
    assert again.lm_config.mixer == ("log", "delta")


@pytest.mark.parametrize("bad, match", [
    (dict(mixer="nope"), "mixer"),
    (dict(vocab_size=0), "vocab_size"),
    (dict(format_version=99), "format_version"),
])
def test_config_is_validated(hf, bad, match):
    with pytest.raises(ValueError, match=match):
        hf.MinGRUConfig(**{"vocab_size": VOCAB, "d_model": 16, "n_layers": 1, **bad})


@pytest.mark.parametrize("tie_embeddings", [True, False])
def test_checkpoints_load_both_ways_with_equal_logits(hf, tmp_path, tie_embeddings):
    model = _mixed_model(tie_embeddings)
    ids = tokens(2, 9)
    with torch.no_grad():
        expected, _ = model(ids)
    model.save_pretrained(tmp_path / "mingru")
    hf_model = hf.AutoModelForCausalLM.from_pretrained(tmp_path / "mingru")
    assert type(hf_model) is hf.MinGRUForCausalLM
    assert (hf_model.head.weight is hf_model.embedding.weight) == tie_embeddings
    with torch.no_grad():
        assert torch.equal(hf_model(ids).logits, expected)

    hf_model.save_pretrained(tmp_path / "hf")
    assert _stored_names(tmp_path / "hf") == _stored_names(tmp_path / "mingru") == (
        model._stored_names())
    again = MinGRULM.from_pretrained(tmp_path / "hf")
    assert again.config == model.config
    with torch.no_grad():
        assert torch.equal(again(ids)[0], expected)


def test_loading_is_strict(hf, tmp_path):
    from safetensors.torch import load_file, save_file

    make_model("log", learnable_h0=True).save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["stack.blocks.1.mixer.h0"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ValueError, match=r"missing \['stack.blocks.1.mixer.h0'\]"):
        hf.AutoModelForCausalLM.from_pretrained(tmp_path)


def test_state_is_the_cache_and_labels_give_the_shifted_loss(hf):
    model = make_model("givens")
    hf_model = hf.MinGRUForCausalLM(hf.MinGRUConfig.from_lm_config(model.config))
    hf_model.load_state_dict(model.state_dict())
    ids = tokens(3, 11)
    whole = hf_model(ids, labels=ids)
    reference, reference_state = model(ids)
    torch.testing.assert_close(whole.logits, reference, rtol=0, atol=0)
    expected_loss = torch.nn.functional.cross_entropy(
        reference[:, :-1].reshape(-1, VOCAB), ids[:, 1:].reshape(-1))
    torch.testing.assert_close(whole.loss, expected_loss)
    # Chunks carrying the state, then one-token steps: the logits of one call.
    first = hf_model(ids[:, :6])
    chunk = hf_model(ids[:, 6:9], state=first.state)
    step = hf_model(ids[:, 9:10], state=chunk.state)
    last = hf_model(ids[:, 10:], state=step.state)
    pieces = torch.cat([first.logits, chunk.logits, step.logits, last.logits], dim=1)
    torch.testing.assert_close(pieces, reference, rtol=1e-5, atol=1e-5)
    for got, want in zip(last.state, reference_state, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    # Tuples, no state without use_cache, the last position only.
    loss, logits = hf_model(ids, labels=ids, use_cache=False, return_dict=False)
    assert torch.equal(loss, whole.loss) and torch.equal(logits, whole.logits)
    torch.testing.assert_close(hf_model(ids, logits_to_keep=1).logits, whole.logits[:, -1:])


@pytest.mark.parametrize("mixer", ["log", "delta"])
def test_generate_greedy_equals_mingru_generate_one_token_per_step(hf, mixer):
    model = make_model(mixer)
    hf_model = hf.MinGRUForCausalLM(hf.MinGRUConfig.from_lm_config(model.config))
    hf_model.load_state_dict(model.state_dict())
    lengths: list[int] = []
    hf_model.register_forward_pre_hook(
        lambda module, args, kwargs: lengths.append(kwargs["input_ids"].shape[1]),
        with_kwargs=True)
    prompt, new = tokens(3, 7), 12
    got = hf_model.generate(prompt, max_new_tokens=new, do_sample=False)
    assert torch.equal(got, model.generate(prompt, new, temperature=0.0))
    assert lengths == [7] + [1] * (new - 1)
    # top_k=1 sampling is greedy: the same tokens through the sampling path.
    sampled = hf_model.generate(prompt, max_new_tokens=new, do_sample=True, top_k=1)
    assert torch.equal(sampled, got)


def test_padding_is_refused(hf):
    hf_model = hf.MinGRUForCausalLM(hf.MinGRUConfig(vocab_size=VOCAB, d_model=16, n_layers=1))
    prompt = tokens(2, 5)
    left_padded = torch.ones_like(prompt)
    left_padded[1, :2] = 0
    with pytest.raises(ValueError, match="attention_mask has zeros"):
        hf_model(prompt, attention_mask=left_padded)
    with pytest.raises(ValueError, match="attention_mask has zeros"):
        hf_model.generate(prompt, attention_mask=left_padded, max_new_tokens=3)
    with pytest.raises(ValueError, match=r"attention_mask must be None or a \(B, L\)"):
        hf_model(prompt, attention_mask=torch.ones(3, 5))
    ones = torch.ones_like(prompt)
    assert hf_model.generate(prompt, attention_mask=ones, max_new_tokens=3).shape == (2, 8)
    with pytest.raises(ValueError, match="inputs_embeds"):
        hf_model(prompt, inputs_embeds=torch.zeros(2, 5, 16))
    with pytest.raises(ValueError, match="outside"):
        hf_model(torch.full((1, 3), VOCAB))


def test_the_extra_stays_optional():
    """``import mingru`` imports no transformers; without it ``import mingru.hf`` says what
    to install."""
    code = (
        "import sys, mingru\n"
        "mingru.MinGRULM\n"
        "assert 'transformers' not in sys.modules\n"
        "sys.modules['transformers'] = None\n"
        "try:\n"
        "    import mingru.hf\n"
        "except ImportError as error:\n"
        "    print(error)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "pip install '.[hf]'" in done.stdout
