"""MinGRULM: the wiring (embedding → stack → head, tied or not), the state (chunked calls,
step ↔ forward, ``init_state`` = the defaults), a step that never reads the device and
compiles to one graph, checkpoints, and bad inputs naming the argument. Every mixer."""

from __future__ import annotations

import json
import os

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch.overrides import TorchFunctionMode

from mingru import MinGRUBlock, MinGRULM, MinGRUStack
from mingru_kernels._lm import CONFIG_NAME, WEIGHTS_NAME, LMConfig
from tests.helpers import close
from tests.torch._lm_cases import (
    D_MODEL,
    EXPANSIONS,
    MIXER_KWARGS,
    MIXERS,
    VOCAB,
    make_model,
    tokens,
)

B = 3


def _run_steps(model: MinGRULM, toks: torch.Tensor, state=None):
    logits = []
    for t in range(toks.shape[1]):
        out, state = model.step(toks[:, t], state)
        logits.append(out)
    return torch.stack(logits, dim=1), state


@pytest.mark.parametrize(("mixer", "mixer_expansion"), EXPANSIONS)
def test_logits_are_embedding_stack_head(mixer, mixer_expansion):
    model = make_model(mixer, mixer_expansion=mixer_expansion)
    toks = tokens(B, 9)
    logits, state = model(toks)
    # An independent composition of the parts: the stack on the embedded tokens, then the
    # tied head (the embedding matrix itself).
    hidden, stack_state = model.stack(F.embedding(toks, model.embedding.weight))
    close(logits, hidden @ model.embedding.weight.T, 1e-6)
    assert logits.shape == (B, 9, VOCAB)
    sizes = [D_MODEL * D_MODEL // 2 if mixer == "delta" else mixer_expansion * D_MODEL] * 2
    assert [tuple(s.shape) for s in state] == [(B, size) for size in sizes]
    assert model.state_sizes == sizes
    for s, ref in zip(state, stack_state, strict=True):
        assert torch.equal(s, ref[:, 0])


@pytest.mark.parametrize(("mixer", "mixer_expansion"), EXPANSIONS)
def test_chunks_and_steps_carry_the_state(mixer, mixer_expansion):
    model = make_model(mixer, learnable_h0=mixer in ("log", "signed"),
                       mixer_expansion=mixer_expansion)
    toks = tokens(B, 11)
    want, want_state = model(toks)
    first, state = model(toks[:, :4])
    second, state = model(toks[:, 4:], state)
    close(torch.cat([first, second], dim=1), want, 1e-5)
    # step form both ways: a forward's state feeds step, a step's state feeds forward
    stepped, state = _run_steps(model, toks[:, 4:7], model(toks[:, :4])[1])
    close(stepped, want[:, 4:7], 1e-5)
    rest, state = model(toks[:, 7:], state)
    close(rest, want[:, 7:], 1e-5)
    for s, w in zip(state, want_state, strict=True):
        close(s, w, 1e-5)
    all_steps, _ = _run_steps(model, toks)
    close(all_steps, want, 1e-5)


@pytest.mark.parametrize("learnable_h0", [False, True])
@pytest.mark.parametrize("mixer", MIXERS)
def test_init_state_is_what_none_starts_from(mixer, learnable_h0):
    model = make_model(mixer, learnable_h0=learnable_h0)
    toks = tokens(B, 6)
    start = model.init_state(B)
    assert [tuple(s.shape) for s in start] == [(B, size) for size in model.state_sizes]
    assert all(s.dtype == torch.float32 and s.is_contiguous() for s in start)
    for (want, want_state), (got, got_state) in [
        (model(toks), model(toks, start)),
        (model.step(toks[:, 0]), model.step(toks[:, 0], start)),
    ]:
        assert torch.equal(got, want)
        for g, w in zip(got_state, want_state, strict=True):
            assert torch.equal(g, w)
    assert model.init_state(2, dtype=torch.float64)[0].dtype == torch.float64


def test_init_state_values():
    model = MinGRULM(VOCAB, D_MODEL, 4, mixer=["log", "signed", "givens", "delta"],
                     mixer_kwargs={"givens": {"block_size": 4}, "delta": {"n_heads": 2}})
    log, signed, givens, delta = model.init_state(2)
    assert torch.equal(log, torch.full((2, D_MODEL), 0.5))
    assert torch.equal(signed, torch.zeros(2, D_MODEL))
    assert torch.equal(givens, model.stack.blocks[2].mixer.h0.detach().expand(2, -1))
    assert torch.equal(delta, torch.zeros(2, 2 * 8 * 8))
    with pytest.raises(ValueError, match="batch_size"):
        model.init_state(0)


@pytest.mark.parametrize("tie", [True, False])
def test_tied_and_untied_heads(tie):
    model = MinGRULM(VOCAB, D_MODEL, 1, tie_embeddings=tie)
    assert (model.head.weight is model.embedding.weight) == tie
    assert model.head.bias is None
    n_params = sum(p.numel() for p in model.parameters())
    stack = sum(p.numel() for p in model.stack.parameters())
    assert n_params == stack + VOCAB * D_MODEL * (1 if tie else 2)
    assert abs(model.embedding.weight.std().item() - 0.02) < 0.004
    assert model.config == LMConfig(VOCAB, D_MODEL, 1, tie_embeddings=tie)
    assert isinstance(model.stack, MinGRUStack)


def test_config_is_validated():
    with pytest.raises(ValueError, match="vocab_size"):
        MinGRULM(0, D_MODEL, 1)
    with pytest.raises(ValueError, match="decay"):
        MinGRULM(VOCAB, D_MODEL, 1, mixer_kwargs={"decay": "fixed"})
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="mixer_expansion must be an int ≥ 1"):
            MinGRULM(VOCAB, D_MODEL, 1, mixer_expansion=bad)
    with pytest.raises(ValueError, match="mixer_expansion=2 does not apply to the 'delta'"):
        MinGRULM(VOCAB, D_MODEL, 2, mixer=["log", "delta"], mixer_expansion=2)
    # A config written before mixer_expansion existed reads as unexpanded.
    old = LMConfig(VOCAB, D_MODEL, 1).to_dict()
    del old["mixer_expansion"]
    assert LMConfig.from_dict(old).mixer_expansion == 1
    assert MinGRULM(VOCAB, D_MODEL, 2, mixer=["log", "signed"]).config.mixer == ("log", "signed")


class NoHostSync(TorchFunctionMode):
    """Raise on every call that copies a tensor's values to the host (a CUDA sync)."""

    SYNCS = {
        torch.Tensor.item, torch.Tensor.tolist, torch.Tensor.__bool__, torch.Tensor.__int__,
        torch.Tensor.__float__, torch.Tensor.__index__, torch.Tensor.__complex__,
        torch.Tensor.numpy, torch.Tensor.cpu, torch.Tensor.nonzero, torch.nonzero,
        torch.Tensor.masked_select, torch.masked_select, torch.Tensor.unique, torch.unique,
    }

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in self.SYNCS:
            raise AssertionError(f"step() read the device: {func}")
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mixer", MIXERS)
def test_step_never_reads_the_device(mixer):
    model = make_model(mixer, learnable_h0=mixer in ("log", "signed"))
    toks = tokens(B, 2)
    _, state = model(toks[:, :1])
    with NoHostSync():
        logits, fresh = model.step(toks[:, 0])
        model.step(toks[:, 1], state)
        block = model.stack.blocks[0]
        block.step(torch.randn(B, D_MODEL), state[0])
        block.mixer.step(torch.randn(B, D_MODEL), state[0])
    assert logits.shape == (B, VOCAB)
    with pytest.raises(AssertionError, match="read the device"), NoHostSync():
        model(toks)  # the mode does catch a device read: forward checks the token values


@pytest.mark.parametrize("mixer", MIXERS)
def test_decayed_mixer_step_never_reads_the_device(mixer):
    block = MinGRUBlock(D_MODEL, mixer=mixer,
                        mixer_kwargs={**MIXER_KWARGS[mixer], "decay": "learnable"})
    x, gaps = torch.randn(B, D_MODEL), torch.tensor([0.5, float("nan"), float("inf")])
    _, state = block(x[:, None], delta_t=gaps[:, None].nan_to_num(0.0, 1.0))
    with NoHostSync():
        block.step(x, state[:, 0], gaps)
        block.mixer.step(block.norm1(x), None, gaps)


@pytest.mark.parametrize("mixer", MIXERS)
def test_step_compiles_to_one_graph(mixer):
    torch._dynamo.reset()
    model = make_model(mixer)
    toks = tokens(B, 2)
    state = model.init_state(B)
    compiled = torch.compile(model.step, fullgraph=True, backend="aot_eager")
    with torch.no_grad():
        want, want_state = model.step(toks[:, 0], state)
        got, got_state = compiled(toks[:, 0], state)
    close(got, want, 1e-6)
    for g, w in zip(got_state, want_state, strict=True):
        close(g, w, 1e-6)


def test_mingru_step_checks_shapes_not_values():
    model = make_model("log", n_layers=1)
    state = [torch.full((B, D_MODEL), -1.0)]  # not a MinGRU state: only forward can tell
    model.step(tokens(B, 1)[:, 0], state)
    with pytest.raises(ValueError, match="non-negative"):
        model(tokens(B, 2), state)


@pytest.mark.parametrize(("mixer", "mixer_expansion"), EXPANSIONS)
def test_checkpoint_round_trip(mixer, mixer_expansion, tmp_path):
    model = make_model(mixer, learnable_h0=mixer == "signed", mixer_expansion=mixer_expansion)
    model.save_pretrained(tmp_path)
    assert sorted(os.listdir(tmp_path)) == sorted([CONFIG_NAME, WEIGHTS_NAME])
    stored = load_file(tmp_path / WEIGHTS_NAME)
    assert "head.weight" not in stored  # tied: it is the embedding
    assert set(stored) == set(model.state_dict()) - {"head.weight"}
    config = json.loads((tmp_path / CONFIG_NAME).read_text())
    assert config["model_type"] == "mingru" and config["mixer"] == mixer
    assert config["mixer_expansion"] == mixer_expansion
    again = MinGRULM.from_pretrained(tmp_path)
    assert again.config == model.config
    assert again.head.weight is again.embedding.weight
    for name, tensor in model.state_dict().items():
        assert torch.equal(again.state_dict()[name], tensor), name
    toks = tokens(B, 5)
    assert torch.equal(again(toks)[0], model(toks)[0])


def test_checkpoint_untied_dtype_and_layers(tmp_path):
    model = MinGRULM(VOCAB, D_MODEL, 2, mixer=["signed", "givens"], tie_embeddings=False,
                     mixer_kwargs={"givens": {"block_size": 4}}).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "ckpt")
    stored = load_file(tmp_path / "ckpt" / WEIGHTS_NAME)
    assert torch.equal(stored["head.weight"], model.head.weight)
    assert stored["embedding.weight"].dtype == torch.bfloat16
    again = MinGRULM.from_pretrained(tmp_path / "ckpt")
    assert again.embedding.weight.dtype == torch.bfloat16
    assert again.head.weight is not again.embedding.weight
    assert torch.equal(again.head.weight, model.head.weight)
    wide = MinGRULM.from_pretrained(tmp_path / "ckpt", dtype=torch.float64)
    assert wide.embedding.weight.dtype == torch.float64
    assert torch.equal(wide.embedding.weight, model.embedding.weight.double())


def test_checkpoint_must_match_its_config(tmp_path):
    model = make_model("log", n_layers=1)
    model.save_pretrained(tmp_path)
    path = tmp_path / WEIGHTS_NAME
    stored = load_file(path)
    name = "stack.blocks.0.mixer.linear_z.weight"
    save_file({k: v for k, v in stored.items() if k != name}, path)
    with pytest.raises(ValueError, match=r"missing \['stack.blocks.0.mixer.linear_z.weight'\]"):
        MinGRULM.from_pretrained(tmp_path)
    save_file({**stored, "extra.weight": torch.zeros(2)}, path)
    with pytest.raises(ValueError, match=r"unexpected \['extra.weight'\]"):
        MinGRULM.from_pretrained(tmp_path)
    save_file({**stored, name: torch.zeros(3, 3)}, path)
    with pytest.raises(ValueError, match=name):
        MinGRULM.from_pretrained(tmp_path)
    os.remove(path)
    with pytest.raises(FileNotFoundError, match=WEIGHTS_NAME):
        MinGRULM.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match=CONFIG_NAME):
        MinGRULM.from_pretrained(tmp_path / "nowhere")


def test_bad_tokens_name_the_argument():
    model = make_model("signed", n_layers=1)
    toks = tokens(B, 4)
    with pytest.raises(TypeError, match="tokens must be an integer tensor"):
        model(toks.float())
    with pytest.raises(TypeError, match="tokens"):
        model(toks.bool())
    with pytest.raises(TypeError, match="tokens must be an integer torch.Tensor"):
        model(toks.tolist())
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\)"):
        model(toks[0])
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\)"):
        model(toks[:, :0])
    with pytest.raises(ValueError, match=r"tokens holds token 37, outside \[0, vocab_size=37\)"):
        model(toks.index_fill(1, torch.tensor([2]), VOCAB))
    with pytest.raises(ValueError, match="tokens holds token -1"):
        model(toks.index_fill(1, torch.tensor([2]), -1))
    with pytest.raises(TypeError, match="token must be an integer tensor"):
        model.step(toks[:, 0].double())
    with pytest.raises(ValueError, match=r"token must have shape \(B,\)"):
        model.step(toks)
    assert model(toks.to(torch.int16))[0].shape == (B, 4, VOCAB)  # any integer dtype


def test_bad_state_names_the_layer():
    model = make_model("givens")
    toks = tokens(B, 4)
    _, state = model(toks)
    with pytest.raises(ValueError, match="n_layers=2"):
        model(toks, state[:1])
    with pytest.raises(ValueError, match=r"state\[1\] must have shape \(B, 16\)"):
        model(toks, [state[0], state[1][:, None]])
    with pytest.raises(ValueError, match=r"state\[0\] must have shape \(B, 16\) = \(2, 16\)"):
        model.step(toks[:2, 0], state)
    with pytest.raises(TypeError, match=r"state\[1\]"):
        model.step(toks[:, 0], [state[0], state[1].long()])


def test_mixer_kwargs_reach_the_layers():
    model = make_model("givens", n_layers=1)
    assert model.stack.blocks[0].mixer.block_size == MIXER_KWARGS["givens"]["block_size"]
