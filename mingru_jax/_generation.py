"""Autoregressive generation for :class:`mingru_jax.MinGRULM`: the twin of
:mod:`mingru._generation`, with the same arguments and the same token selection.

``generate`` prefills the prompt with the parallel scan in chunks (carrying the recurrent
state; the head runs on the last position only), then decodes one token per step with the
recurrent ``step`` inside one jitted ``lax.while_loop``, compiled once per batch size, number
of new tokens and sampling settings and cached by ``jax.jit``. The loop stops as soon as every
row has emitted ``eos_token_id``; the rest of the output is filled with it.

Token selection (:func:`select_tokens`), the same in both frontends: ``temperature == 0`` is
greedy (argmax); otherwise the logits are divided by ``temperature``, cut to the ``top_k``
largest, then to the nucleus (the smallest set of top tokens whose probability reaches
``top_p``; the top token is always kept), and one token is drawn by inverse-CDF sampling with
ONE uniform per row and step. The uniforms, ``(max_new_tokens, B)`` float32, are drawn up
front from the key, so a seed fixes the whole output (the same seed draws other numbers than
PyTorch's generator: sampled tokens agree across frameworks in law, greedy ones exactly).
"""

from __future__ import annotations

import functools
import secrets

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mingru_kernels._lm import (
    Sampling,
    check_generate_args,
    check_token_bounds,
    default_prefill_chunk,
)

__all__ = ["Sampling", "check_tokens", "generate", "select_tokens"]


def check_tokens(tokens: object, name: str, dims: tuple[str, ...], *, vocab_size: int,
                 read_values: bool = True) -> jax.Array:
    """Token ids: an integer array with one axis per name in ``dims`` (``("B", "T")`` or
    ``("B",)``), none empty, every value in ``[0, vocab_size)``. The values are checked only
    when ``read_values`` and on concrete arrays (one small device read; not under
    ``jax.jit``): out of range, ``nnx.Embed`` would read NaN rows silently."""
    shape = f"({dims[0]},)" if len(dims) == 1 else f"({', '.join(dims)})"
    if not isinstance(tokens, (jax.Array, np.ndarray)):
        raise TypeError(f"{name} must be an integer jax.Array of shape {shape}; got "
                        f"{type(tokens).__name__}")
    if not jnp.issubdtype(tokens.dtype, jnp.integer):
        raise TypeError(f"{name} must hold integer token ids (int32 or int64); got dtype "
                        f"{tokens.dtype}")
    if tokens.ndim != len(dims) or 0 in tokens.shape:
        raise ValueError(f"{name} must have shape {shape} with no empty dimension; got "
                         f"{tuple(tokens.shape)}")
    tokens = jnp.asarray(tokens)
    if read_values and not isinstance(tokens, jax.core.Tracer):
        low, high = jax.device_get((tokens.min(), tokens.max()))
        check_token_bounds(int(low), int(high), vocab_size, name=name)
    return tokens


def select_tokens(logits: jax.Array, uniform: jax.Array | None,
                  sampling: Sampling) -> jax.Array:
    """The next token ``(B,)`` int32 of each row of ``logits (B, V)``.

    Greedy (``temperature == 0``): the argmax (``uniform`` unused). Otherwise in float32:
    ``logits / temperature``, sorted (descending; ties keep the lower id first); the
    ``top_k`` first kept; softmax; of those, the shortest prefix whose probability reaches
    ``top_p`` (the token before which the cumulative probability is below ``top_p`` is kept,
    so the first always is); then the inverse CDF at ``uniform (B,)`` in ``[0, 1)``: the
    first token whose cumulative probability exceeds ``uniform`` times the kept mass.

    Example:
        >>> import jax.numpy as jnp
        >>> from mingru_jax._generation import Sampling, select_tokens
        >>> logits = jnp.log(jnp.array([[0.1, 0.6, 0.3]]))
        >>> select_tokens(logits, None, Sampling(0.0, None, None, None)).tolist()
        [1]
        >>> select_tokens(logits, jnp.array([0.8]), Sampling(1.0, None, None, None)).tolist()
        [2]
        >>> select_tokens(logits, jnp.array([0.95]), Sampling(1.0, None, 0.5, None)).tolist()
        [1]
    """
    if sampling.greedy:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits.astype(jnp.float32) / sampling.temperature
    vocab = scaled.shape[-1]
    # Sorted, largest first (lax.top_k keeps the lower id first among equal logits, as
    # argmax does, so top_k=1 is greedy); with top_k only those are sorted.
    values, order = jax.lax.top_k(scaled, min(sampling.top_k or vocab, vocab))
    probs = jax.nn.softmax(values, axis=-1)
    if sampling.top_p is not None and sampling.top_p < 1:
        before = jnp.cumsum(probs, axis=-1) - probs  # mass of the more likely tokens
        probs = jnp.where(before < sampling.top_p, probs, 0.0)  # the first has 0 before it
    cdf = jnp.cumsum(probs, axis=-1)
    target = uniform[:, None].astype(jnp.float32) * cdf[:, -1:]
    index = jnp.sum(cdf <= target, axis=-1)
    # The sorted probabilities end in the dropped (zero) ones: never pick past the last kept
    # token, which float rounding of the target could otherwise do.
    index = jnp.minimum(index, jnp.sum(probs > 0, axis=-1) - 1)
    return jnp.take_along_axis(order, index[:, None], axis=-1)[:, 0].astype(jnp.int32)


@functools.partial(jax.jit, static_argnums=(0,))
def _prefill(graphdef: nnx.GraphDef, params: nnx.State, tokens: jax.Array,
             state: list[jax.Array]) -> tuple[jax.Array, list[jax.Array]]:
    """One prefill chunk: ``(last hidden (B, d_model), state)``, no head."""
    model = nnx.merge(graphdef, params)
    hidden, state = model.features(tokens, state)
    return hidden[:, -1], state


@functools.partial(jax.jit, static_argnums=(0, 1))
def _decode(graphdef: nnx.GraphDef, sampling: Sampling, params: nnx.State,
            hidden: jax.Array, state: list[jax.Array], uniforms: jax.Array) -> jax.Array:
    """The new tokens ``(B, steps)`` int32 after the prefill's last hidden state, for
    ``uniforms (steps, B)``."""
    model = nnx.merge(graphdef, params)
    batch = hidden.shape[0]
    steps = uniforms.shape[0]
    eos = sampling.eos_token_id

    def emit(i, logits, done, *, out):
        token = select_tokens(logits, uniforms[i], sampling)
        if eos is not None:
            token = jnp.where(done, eos, token)  # a finished row keeps emitting eos
            done = done | (token == eos)
        return token, done, out.at[:, i].set(token)

    done = jnp.zeros((batch,), bool)
    out = jnp.full((batch, steps), 0 if eos is None else eos, jnp.int32)
    token, done, out = emit(0, model._logits(hidden), done, out=out)

    def cond(carry):
        i, _, _, done, _ = carry
        return (i < steps) & ~jnp.all(done)

    def body(carry):
        i, token, state, done, out = carry
        logits, state = model.step(token, state)
        token, done, out = emit(i, logits, done, out=out)
        return i + 1, token, state, done, out

    carry = (jnp.array(1, jnp.int32), token, state, done, out)
    return jax.lax.while_loop(cond, body, carry)[-1]


def _key(seed: object, key: object) -> jax.Array:
    """The sampling key: ``key``, or one made from ``seed`` (an int in ``[0, 2**64)``; a
    seed below ``2**32`` gives ``jax.random.key(seed)``), or from a fresh random seed."""
    if seed is not None and key is not None:
        raise ValueError("pass seed or key, not both")
    if key is not None:
        if not isinstance(key, jax.Array):
            raise TypeError(f"key must be a jax.random key (jax.random.key(0)); got "
                            f"{type(key).__name__}")
        return key
    if seed is None:  # a fresh draw each call, as PyTorch's unseeded default generator
        seed = secrets.randbits(64)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or None; got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64); got {seed}")
    # 32-bit JAX truncates a seed to its low 32 bits: fold the high ones in.
    made = jax.random.key(seed & 0xFFFFFFFF)
    return made if seed < 2**32 else jax.random.fold_in(made, seed >> 32)


def generate(
    model: nnx.Module,
    prompt: jax.Array,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    seed: int | None = None,
    key: jax.Array | None = None,
    prefill_chunk: int | None = None,
) -> jax.Array:
    """``model.generate(prompt, max_new_tokens, ...)``: ``prompt (B, T0)`` followed by
    ``max_new_tokens`` new tokens, ``(B, T0 + max_new_tokens)`` int32.

    Args:
        prompt: integer token ids in ``[0, vocab_size)``, ``T0 ≥ 1``.
        max_new_tokens: tokens to add (``≥ 0``).
        temperature: ``0`` is greedy (argmax); otherwise the logits are divided by it.
        top_k: sample among the ``top_k`` most likely tokens only (``1`` is greedy).
        top_p: nucleus sampling: among the smallest set of most likely tokens whose
            probability reaches ``top_p`` (in ``(0, 1]``; the top token always stays).
        eos_token_id: a row that emits it keeps emitting it; decoding stops once every
            row has (the output keeps its full length, filled with it).
        seed, key: the randomness, an int or a ``jax.random`` key (not both); neither
            draws a fresh seed. One uniform per row and step, drawn up front.
        prefill_chunk: prompt tokens per parallel prefill call (default
            :func:`~mingru_kernels._lm.default_prefill_chunk`); the state is carried.

    Decoding runs the recurrent ``model.step`` in one jitted loop, compiled once per batch
    size, ``max_new_tokens`` and settings; dropout is off (the model's own mode is left
    as it is).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRULM
        >>> model = MinGRULM(50, 16, 1, rngs=nnx.Rngs(0))
        >>> out = model.generate(jnp.array([[3, 1, 4]]), 5, top_k=10, seed=0)
        >>> out.shape, out.dtype.name
        ((1, 8), 'int32')
    """
    vocab_size = model.config.vocab_size
    check_generate_args(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                        top_p=top_p, eos_token_id=eos_token_id, prefill_chunk=prefill_chunk,
                        vocab_size=vocab_size)
    key = _key(seed, key)
    prompt = check_tokens(prompt, "prompt", ("B", "T"), vocab_size=vocab_size).astype(jnp.int32)
    if max_new_tokens == 0:
        return prompt
    batch, length = prompt.shape
    # Dropout off: an eval copy of the module graph (the arrays are shared, not copied), so
    # the caller's model keeps its mode.
    graphdef, params = nnx.split(model)
    evaluated = nnx.merge(graphdef, params)
    evaluated.eval()
    graphdef, params = nnx.split(evaluated)

    chunk = prefill_chunk or default_prefill_chunk(batch)
    state = model.init_state(batch)
    for start in range(0, length, chunk):
        hidden, state = _prefill(graphdef, params, prompt[:, start:start + chunk], state=state)
    uniforms = jax.random.uniform(key, (max_new_tokens, batch), jnp.float32)
    sampling = Sampling.of(temperature, top_k, top_p, eos_token_id=eos_token_id)
    new = _decode(graphdef, sampling, params, hidden=hidden, state=state, uniforms=uniforms)
    return jnp.concatenate([prompt, new], axis=1)
