"""mingru_jax.MinGRULM.generate: greedy decoding against an argmax loop over the parallel
model on the growing sequence, chunked prefill, end of sequence, seeded sampling, top-k and
top-p against a NumPy inverse-CDF oracle, the compile cache, dropout and bad arguments.

One model per mixer (module scope) and few distinct shapes: XLA's compiles are the cost on
CPU.
"""

from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
nnx = pytest.importorskip("flax.nnx")
import jax.numpy as jnp  # noqa: E402

import mingru_jax  # noqa: E402
from mingru_jax import _generation  # noqa: E402
from mingru_jax._generation import Sampling, select_tokens  # noqa: E402
from tests.jax.lm_cases import MIXERS, VOCAB, lm_args  # noqa: E402

B, T0, NEW = 2, 5, 64


@pytest.fixture(scope="module")
def models():
    out = {}
    for mixer in MIXERS:
        args, kwargs = lm_args(mixer)
        out[mixer] = mingru_jax.MinGRULM(*args, **kwargs, rngs=nnx.Rngs(0))
    return out


def prompt(seed: int = 0, shape=(B, T0)) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).integers(0, VOCAB, shape), jnp.int32)


def argmax_loop(model, start: jax.Array, new: int) -> np.ndarray:
    """Greedy decoding by the definition: each next token is the argmax of the parallel
    model's logits at the last position of the sequence so far. The sequence lives in a
    fixed-size buffer (the positions past it do not affect the earlier logits of a causal
    model), so one compiled call serves every length."""
    graphdef, params = nnx.split(model)
    logits_of = jax.jit(lambda params, seq: nnx.merge(graphdef, params)(seq)[0])
    length = start.shape[1]
    seq = np.zeros((start.shape[0], length + new), np.int32)
    seq[:, :length] = np.asarray(start)
    for t in range(length, length + new):
        logits = np.asarray(logits_of(params, jnp.asarray(seq)))
        seq[:, t] = logits[:, t - 1].argmax(-1)
    return seq


@pytest.mark.parametrize("mixer", MIXERS)
def test_greedy_is_the_argmax_loop(models, mixer):
    model = models[mixer]
    start = prompt(1)
    out = model.generate(start, NEW, temperature=0.0)
    assert out.shape == (B, T0 + NEW) and out.dtype == jnp.int32
    np.testing.assert_array_equal(out, argmax_loop(model, start, NEW))
    # Prefill in chunks of 2 (the state carried through three calls) gives the same tokens.
    np.testing.assert_array_equal(model.generate(start, NEW, temperature=0.0, prefill_chunk=2),
                                  out)


def test_sampling_is_seeded(models):
    model = models["signed"]
    start = prompt(2)
    first = model.generate(start, NEW, temperature=1.5, seed=7)
    np.testing.assert_array_equal(model.generate(start, NEW, temperature=1.5, seed=7), first)
    np.testing.assert_array_equal(
        model.generate(start, NEW, temperature=1.5, key=jax.random.key(7)), first)
    assert not np.array_equal(model.generate(start, NEW, temperature=1.5, seed=8), first)
    assert not np.array_equal(model.generate(start, NEW, temperature=1.5, seed=7 + 2**32),
                              first)
    # A chunked prefill samples the same tokens from the same uniforms.
    np.testing.assert_array_equal(
        model.generate(start, NEW, temperature=1.5, seed=7, prefill_chunk=3), first)
    np.testing.assert_array_equal(first[:, :T0], start)
    # A near-uniform model at a high temperature uses much of the vocabulary.
    assert len(np.unique(np.asarray(first[:, T0:]))) > VOCAB // 3
    unseeded = [model.generate(start, NEW, temperature=1.5) for _ in range(2)]
    assert not np.array_equal(*unseeded)
    # top_k=1 leaves one token to sample: greedy, whatever the seed and temperature.
    np.testing.assert_array_equal(model.generate(start, NEW, temperature=1.5, top_k=1, seed=3),
                                  model.generate(start, NEW, temperature=0.0))


def _oracle(logits: np.ndarray, uniform: np.ndarray, temperature, top_k, top_p) -> np.ndarray:
    """Inverse-CDF sampling by the definition, in float64, one row at a time."""
    out = []
    for row, u in zip(logits.astype(np.float64) / temperature, uniform, strict=True):
        order = np.argsort(-row, kind="stable")[: top_k or row.size]
        probs = np.exp(row[order] - row[order].max())
        probs /= probs.sum()
        if top_p is not None:
            keep = 1 + int(np.searchsorted(np.cumsum(probs), top_p))  # reaches top_p
            probs = probs[:keep] / probs[:keep].sum()
        out.append(order[min(int(np.searchsorted(np.cumsum(probs), u, side="right")),
                              probs.size - 1)])
    return np.array(out)


@pytest.mark.parametrize("top_k, top_p", [(None, None), (5, None), (None, 0.6), (8, 0.5)])
def test_select_tokens_is_the_inverse_cdf(top_k, top_p):
    rng = np.random.default_rng(3)
    rows = 400
    logits = rng.standard_normal((rows, 23)).astype(np.float32) * 2
    # Uniforms away from the CDF's steps, where float32 and float64 could pick neighbours.
    uniform = rng.uniform(0, 1, rows).astype(np.float32)
    sampling = Sampling(0.7, top_k, top_p, None)
    got = np.asarray(select_tokens(jnp.asarray(logits), jnp.asarray(uniform), sampling))
    want = _oracle(logits, uniform, 0.7, top_k, top_p)
    assert (got != want).mean() < 0.01, (got != want).sum()
    if top_k is not None:  # only the top_k largest logits are ever chosen
        rank = (logits > logits[np.arange(rows), got][:, None]).sum(-1)
        assert rank.max() < top_k
    greedy = select_tokens(jnp.asarray(logits), None, Sampling(0.0, None, None, None))
    np.testing.assert_array_equal(greedy, logits.argmax(-1))
    one = select_tokens(jnp.asarray(logits), jnp.asarray(uniform), Sampling(0.7, 1, top_p, None))
    np.testing.assert_array_equal(one, logits.argmax(-1))


def test_top_p_keeps_the_nucleus():
    """Probabilities 0.5, 0.3, 0.2: top_p=0.5 keeps one token, 0.6 two, 1.0 all three; the
    uniforms span the kept mass."""
    logits = jnp.log(jnp.array([[0.3, 0.5, 0.2]] * 5))
    uniform = jnp.array([0.0, 0.3, 0.62, 0.63, 0.999])
    pick = lambda p: select_tokens(logits, uniform, Sampling(1.0, None, p, None)).tolist()
    assert pick(0.5) == [1, 1, 1, 1, 1]
    assert pick(0.6) == [1, 1, 1, 0, 0]  # 0.5 / 0.8 = 0.625 is the boundary
    assert pick(1.0) == [1, 1, 0, 0, 2]


def test_end_of_sequence(models):
    """The sampled tokens up to a row's first eos are those of the same seed without eos;
    from there the row is eos. (Shapes and settings of the tests above: their compiles.)"""
    model = models["signed"]
    start = prompt(2)
    free = np.asarray(model.generate(start, NEW, temperature=1.5, seed=7))
    eos = int(free[0, T0 + 3])  # row 0 emits it at step 3 (or sooner)
    out = np.asarray(model.generate(start, NEW, temperature=1.5, seed=7, eos_token_id=eos))
    assert out.shape == free.shape
    for row, want in zip(out, free, strict=True):
        new, want_new = row[T0:], want[T0:]
        hits = np.flatnonzero(want_new == eos)
        end = hits[0] if hits.size else len(new)
        np.testing.assert_array_equal(new[:end + 1], want_new[:end + 1])
        assert (new[end:] == eos).all()  # keeps emitting it
    assert (out[0, T0 + 4:] == eos).all()
    # Every row done at the first token (equal rows, greedy): the output is full of eos.
    same = jnp.broadcast_to(start[:1], start.shape)
    first = int(model.generate(same, NEW, temperature=0.0)[0, T0])
    done = np.asarray(model.generate(same, NEW, temperature=0.0, eos_token_id=first))
    np.testing.assert_array_equal(done[:, :T0], same)
    assert (done[:, T0:] == first).all()


def test_decode_is_compiled_once(models):
    model = models["log"]
    start = prompt(5)
    model.generate(start, 6, temperature=0.8, top_k=4, seed=0)
    size = _generation._decode._cache_size()
    again = model.generate(prompt(6), 6, temperature=0.8, top_k=4, seed=1)  # new values
    assert _generation._decode._cache_size() == size
    longer = model.generate(prompt(6, (B, T0 + 3)), 6, temperature=0.8, top_k=4, seed=1)
    assert _generation._decode._cache_size() == size  # the prompt length is the prefill's
    assert again.shape == (B, T0 + 6) and longer.shape == (B, T0 + 9)
    assert model.generate(start, 0).tolist() == start.tolist()


def test_dropout_is_off_while_generating():
    args, kwargs = lm_args("signed", dropout=0.5)
    model = mingru_jax.MinGRULM(*args, **kwargs, rngs=nnx.Rngs(0))
    start = prompt(7)
    out = model.generate(start, 8, temperature=0.0)
    np.testing.assert_array_equal(model.generate(start, 8, temperature=0.0), out)
    assert model.stack.blocks[0].dropout.deterministic is False  # the model's mode is kept
    model.eval()
    np.testing.assert_array_equal(argmax_loop(model, start, 8), out)


def test_bad_arguments(models):
    model = models["log"]
    start = prompt(8)
    cases = [
        (TypeError, "prompt must hold integer", dict(prompt=start.astype(jnp.float32))),
        (TypeError, "prompt must be an integer jax.Array", dict(prompt=[[1, 2]])),
        (ValueError, r"prompt must have shape \(B, T\)", dict(prompt=start[0])),
        (ValueError, r"prompt must have shape \(B, T\)", dict(prompt=start[:, :0])),
        (ValueError, "prompt holds token 37", dict(prompt=start.at[0, 1].set(VOCAB))),
        (ValueError, "prompt holds token -2", dict(prompt=start.at[0, 1].set(-2))),
        (ValueError, "max_new_tokens must be >= 0", dict(max_new_tokens=-1)),
        (TypeError, "max_new_tokens must be an int", dict(max_new_tokens=2.0)),
        (ValueError, "temperature must be finite and >= 0", dict(temperature=-0.5)),
        (ValueError, "temperature must be finite", dict(temperature=float("nan"))),
        (ValueError, r"top_p must be in \(0, 1\]", dict(top_p=0.0)),
        (ValueError, r"top_p must be in \(0, 1\]", dict(top_p=1.5)),
        (ValueError, "top_k must be >= 1", dict(top_k=0)),
        (ValueError, "eos_token_id must be in", dict(eos_token_id=VOCAB)),
        (ValueError, "prefill_chunk must be >= 1", dict(prefill_chunk=0)),
        (ValueError, "seed or key, not both", dict(seed=1, key=jax.random.key(1))),
        (ValueError, r"seed must be in \[0, 2\*\*64\)", dict(seed=-1)),
        (TypeError, "seed must be an int", dict(seed=1.5)),
        (TypeError, "key must be a jax.random key", dict(key=3)),
    ]
    for error, message, change in cases:
        kwargs = {"prompt": start, "max_new_tokens": 4, **change}
        with pytest.raises(error, match=message):
            model.generate(kwargs.pop("prompt"), kwargs.pop("max_new_tokens"), **kwargs)
