"""mingru_jax.MinGRULM: the default start state, chunked calls carrying the state, ``step``
against the parallel call, the tied and untied heads against a float64 composition of the
model's own parts, bad tokens and states, and the checkpoint round trip (the PyTorch side of
the format: tests/parity/test_lm_checkpoint.py).

One model per mixer (module scope) and few distinct shapes: XLA's compiles, not the runs,
are the cost on CPU.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
pytest.importorskip("safetensors")
import jax.numpy as jnp  # noqa: E402

import mingru_jax  # noqa: E402
from mingru_jax.convert import to_state_dict  # noqa: E402
from mingru_kernels._lm import CONFIG_NAME, WEIGHTS_NAME, LMConfig  # noqa: E402
from tests.helpers import close  # noqa: E402
from tests.jax.lm_cases import D_MODEL, EXPANDED, MIXERS, N_LAYERS, VOCAB, lm_args  # noqa: E402

B, T = 2, 8


def build(mixer: str, seed: int = 0, **extra) -> mingru_jax.MinGRULM:
    """The case of ``mixer`` (a name of :data:`~tests.jax.lm_cases.EXPANDED` too), with every learnable ``h0`` away from its zero start (so a state
    that ignored it would differ)."""
    args, kwargs = lm_args(mixer, **extra)
    model = mingru_jax.MinGRULM(*args, **kwargs, rngs=nnx.Rngs(seed))
    for index, block in enumerate(model.stack.blocks):
        if getattr(block.mixer, "h0", None) is not None:
            key = jax.random.key(100 + index)
            block.mixer.h0[...] = 0.7 * jax.random.normal(key, block.mixer.h0.shape)
    return model


@pytest.fixture(scope="module")
def models():
    return {case: build(case) for case in (*MIXERS, *EXPANDED)}


def tokens(seed: int, shape=(B, T)) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).integers(0, VOCAB, shape), jnp.int32)


def _probe(model, x):
    """Everything the state tests compare, from one compiled function: the call with the
    default state and with ``init_state``, two chunks carrying the state, and ``step`` over
    the second chunk from the first one's state."""
    half = x.shape[1] // 2
    logits, state = model(x)
    logits_0, state_0 = model(x, model.init_state(x.shape[0]))
    first, carried = model(x[:, :half])
    second, chunked = model(x[:, half:], carried)
    stepped, step_state = [], carried
    for t in range(half, x.shape[1]):
        step_logits, step_state = model.step(x[:, t], step_state)
        stepped.append(step_logits)
    step_default, _ = model.step(x[:, 0])
    return dict(
        logits=logits, state=state, logits_0=logits_0, state_0=state_0,
        chunks=jnp.concatenate([first, second], axis=1), chunked=chunked,
        steps=jnp.stack(stepped, axis=1), step_state=step_state, step_default=step_default,
    )


@pytest.mark.parametrize("mixer", [*MIXERS, *EXPANDED])
def test_state_chunks_and_steps(models, mixer):
    """``state=None`` is ``init_state``; chunks carrying the state and ``step`` from a
    prefix's state give one call's logits and final state."""
    model = models[mixer]
    start = model.init_state(B)
    assert [s.shape for s in start] == [(B, b.mixer.state_size) for b in model.stack.blocks]
    name, expansion = EXPANDED.get(mixer, (mixer, 1))
    if name != "delta":  # the state-output mixers' state is mixer_expansion · d_model wide
        assert [s.shape for s in start] == [(B, expansion * D_MODEL)] * N_LAYERS
    assert all(isinstance(s, jax.Array) and s.dtype == jnp.float32 for s in start)
    graphdef, params = nnx.split(model)
    out = jax.jit(lambda params, x: _probe(nnx.merge(graphdef, params), x))(params, tokens(1))
    logits = out["logits"]
    assert logits.shape == (B, T, VOCAB) and logits.dtype == jnp.float32
    close(out["logits_0"], logits, 1e-6)
    close(out["chunks"], logits, 1e-5)
    close(out["steps"], logits[:, T // 2:], 1e-5)
    close(out["step_default"], logits[:, 0], 1e-5)
    for name in ("state_0", "chunked", "step_state"):
        for layer, (got, want) in enumerate(zip(out[name], out["state"], strict=True)):
            assert got.shape == (B, model.stack.blocks[layer].mixer.state_size)
            close(got, want, 1e-5)


def test_init_state_values():
    """The documented starts, from the mixers' definitions: MinGRU 0.5 = g(0) or g(h0),
    Signed 0 or h0, Rotation/Givens their h0, Delta zeros."""
    plain = mingru_jax.MinGRULM(VOCAB, 8, 1, mixer="log", rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(plain.init_state(3)[0], np.full((3, 8), 0.5, np.float32))
    signed = mingru_jax.MinGRULM(VOCAB, 8, 1, mixer="signed", rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(signed.init_state(3)[0], np.zeros((3, 8), np.float32))
    delta = mingru_jax.MinGRULM(VOCAB, 8, 1, mixer="delta", mixer_kwargs={"n_heads": 2},
                                rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(delta.init_state(3)[0], np.zeros((3, 32), np.float32))
    learned = build("log")
    h0 = np.asarray(learned.stack.blocks[1].mixer.h0[...], np.float64)
    g_h0 = np.where(h0 >= 0, h0 + 0.5, 1 / (1 + np.exp(-h0)))
    close(learned.init_state(2)[1], np.broadcast_to(g_h0, (2, 8)), 1e-6)
    rotation = build("rotation")
    np.testing.assert_array_equal(rotation.init_state(2)[0][1],
                                  rotation.stack.blocks[0].mixer.h0[...])


@pytest.mark.parametrize("tie", [True, False])
def test_logits_are_the_head_of_the_stack(models, tie):
    """Embedding lookup, stack, head: the logits against a float64 composition of the parts
    (the tied head is ``h Eᵀ``; an untied one has its own weight and no tie)."""
    model = models["signed"] if tie else build("signed", tie_embeddings=False)
    x = tokens(3)
    logits, _ = model(x)
    table = np.asarray(model.embedding.embedding[...], np.float64)
    hidden, _ = model.stack(jnp.asarray(table[np.asarray(x)], jnp.float32))
    weight = table if tie else np.asarray(model.head.kernel[...], np.float64).T
    close(logits, np.asarray(hidden, np.float64) @ weight.T, 1e-5)
    assert (model.head is None) == tie


def test_config_and_mixed_mixers():
    model = mingru_jax.MinGRULM(VOCAB, 8, 2, mixer=["signed", "givens"],
                                mixer_kwargs={"givens": {"block_size": 4}}, rngs=nnx.Rngs(0))
    assert model.config == LMConfig(VOCAB, 8, 2, mixer=("signed", "givens"),
                                    mixer_kwargs={"givens": {"block_size": 4}})
    assert [b.mixer_name for b in model.stack.blocks] == ["signed", "givens"]
    with pytest.raises(ValueError, match="decay"):
        mingru_jax.MinGRULM(VOCAB, 8, 1, mixer_kwargs={"decay": "fixed"}, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="vocab_size"):
        mingru_jax.MinGRULM(0, 8, 1, rngs=nnx.Rngs(0))


def test_bad_tokens_and_states(models):
    model = models["log"]
    x = tokens(4)
    with pytest.raises(TypeError, match="tokens must hold integer"):
        model(x.astype(jnp.float32))
    with pytest.raises(TypeError, match="tokens must be an integer jax.Array"):
        model([[1, 2]])
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\)"):
        model(x[0])
    with pytest.raises(ValueError, match=r"tokens must have shape \(B, T\)"):
        model(x[:, :0])
    with pytest.raises(ValueError, match=r"tokens holds token 37, outside \[0, vocab_size=37\)"):
        model(x.at[1, 3].set(VOCAB))
    with pytest.raises(ValueError, match="tokens holds token -1"):
        model(x.at[0, 0].set(-1))
    with pytest.raises(ValueError, match="token holds token 40"):
        model.step(jnp.array([1, 40]))
    with pytest.raises(TypeError, match="token must hold integer"):
        model.step(jnp.array([1.0, 2.0]))
    with pytest.raises(ValueError, match=r"token must have shape \(B,\)"):
        model.step(x)
    with pytest.raises(ValueError, match="n_layers=2"):
        model(x, model.init_state(B)[:1])
    with pytest.raises(ValueError, match=r"state\[1\] must have shape \(B, 8\) = \(2, 8\)"):
        model(x, [None, jnp.zeros((B + 1, 8))])
    with pytest.raises(ValueError, match=r"state\[0\] must have shape \(B, 8\) \(2 dims\)"):
        model.step(x[:, 0], [jnp.zeros((B, 1, 8)), None])
    with pytest.raises(ValueError, match="batch_size"):
        model.init_state(0)


def test_checkpoint_round_trip(models, tmp_path):
    """Save and load every case's model: the same config and bit-identical parameters; the
    loaded model's logits (one case: the logits are a function of those two)."""
    for case, model in models.items():
        folder = tmp_path / case
        model.save_pretrained(folder)
        assert sorted(os.listdir(folder)) == [CONFIG_NAME, WEIGHTS_NAME]
        with open(folder / CONFIG_NAME) as f:
            assert json.load(f)["model_type"] == "mingru"
        loaded = mingru_jax.MinGRULM.from_pretrained(folder)
        assert isinstance(loaded, mingru_jax.MinGRULM)
        as_json = lambda config: json.loads(json.dumps(config.to_dict()))  # tuples → lists
        assert as_json(loaded.config) == as_json(model.config)
        got, want = to_state_dict(loaded), to_state_dict(model)
        assert got.keys() == want.keys()
        for name, value in want.items():
            assert got[name].dtype == value.dtype
            np.testing.assert_array_equal(got[name], value, err_msg=name)
    x = tokens(5)
    np.testing.assert_array_equal(loaded(x)[0], model(x)[0])


def test_checkpoint_layout_and_errors(tmp_path):
    from safetensors.numpy import load_file, save_file

    model = build("log", tie_embeddings=False)
    model.save_pretrained(tmp_path)
    weights = load_file(tmp_path / WEIGHTS_NAME)
    # PyTorch names and layout: nn.Embedding (vocab, d), nn.Linear (out, in), LayerNorm.
    np.testing.assert_array_equal(weights["embedding.weight"], model.embedding.embedding[...])
    np.testing.assert_array_equal(weights["head.weight"], np.asarray(model.head.kernel[...]).T)
    np.testing.assert_array_equal(weights["stack.blocks.0.mixer.linear_z.weight"],
                                  np.asarray(model.stack.blocks[0].mixer.linear_z.kernel[...]).T)
    np.testing.assert_array_equal(weights["stack.blocks.1.mlp.2.bias"],
                                  model.stack.blocks[1].mlp.layers[2].bias[...])
    assert "stack.norm.weight" in weights and "stack.blocks.0.mixer.h0" in weights
    tied = build("log")
    tied.save_pretrained(tmp_path / "tied")
    assert "head.weight" not in load_file(tmp_path / "tied" / WEIGHTS_NAME)

    half = mingru_jax.MinGRULM.from_pretrained(tmp_path, param_dtype=jnp.bfloat16)
    assert half.embedding.embedding[...].dtype == jnp.bfloat16

    del weights["stack.norm.bias"]
    weights["extra"] = np.zeros(3, np.float32)
    save_file(weights, str(tmp_path / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"unexpected keys\): \['extra'\]"):
        mingru_jax.MinGRULM.from_pretrained(tmp_path)
    del weights["extra"]
    save_file(weights, str(tmp_path / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"missing keys\): \['stack.norm.bias'\]"):
        mingru_jax.MinGRULM.from_pretrained(tmp_path)
    weights["stack.norm.bias"] = np.zeros(5, np.float32)
    save_file(weights, str(tmp_path / WEIGHTS_NAME))
    with pytest.raises(ValueError, match=r"stack.norm.bias: shape \(5,\)"):
        mingru_jax.MinGRULM.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError, match=CONFIG_NAME):
        mingru_jax.MinGRULM.from_pretrained(tmp_path / "nothing")
    os.remove(tmp_path / WEIGHTS_NAME)
    with pytest.raises(FileNotFoundError, match=WEIGHTS_NAME):
        mingru_jax.MinGRULM.from_pretrained(tmp_path)
