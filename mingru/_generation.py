"""``MinGRULM.generate`` (``model`` below is a :class:`mingru.lm.MinGRULM`, which imports
this module): chunked prefill, then one step per token, eagerly or replaying one
captured CUDA graph per token.

Both decoding paths run the same function per token (:func:`decode_step`: the model's step,
then :func:`select_tokens`, then the end-of-sequence rule) on the same uniform numbers, drawn
up front, and inside a :class:`~mingru._step_fusion.StepFusion` (the same kernels), so they
give the same tokens. The step reads nothing back to the host; the host
asks whether every row has ended only every :data:`DONE_CHECK_EVERY` tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from mingru._step_fusion import StepFusion
from mingru._validate import trusted_states
from mingru.dispatch import scan_mode
from mingru_kernels._lm import Sampling, check_generate_args, default_prefill_chunk

__all__ = ["DONE_CHECK_EVERY", "Sampling", "decode_step", "generate", "select_tokens"]

# Tokens between two host reads of "has every row emitted eos?" (each read is a sync).
DONE_CHECK_EVERY = 16


def select_tokens(logits: torch.Tensor, uniform: torch.Tensor | None,
                  sampling: Sampling) -> torch.Tensor:
    """The next token ``(B,)`` int64 of each row of ``logits (B, V)``.

    Greedy (``temperature == 0``): the argmax. Otherwise in float32: ``logits /
    temperature``, sorted (descending, stable: ties keep the lower id first); the ``top_k``
    first kept; softmax; of those, the shortest prefix whose probability reaches ``top_p``
    (the token before which the cumulative probability is below ``top_p`` is kept, so the
    first always is); then the inverse CDF at ``uniform (B,)`` in ``[0, 1)``: the first token
    whose cumulative probability exceeds ``uniform`` times the kept mass. One uniform number
    per row, no device read.
    """
    if sampling.greedy:
        return logits.argmax(dim=-1)
    scores = logits.float() / sampling.temperature
    scores, order = torch.sort(scores, dim=-1, descending=True, stable=True)
    vocab = scores.shape[-1]
    if sampling.top_k is not None and sampling.top_k < vocab:
        rank = torch.arange(vocab, device=scores.device)
        scores = scores.masked_fill(rank >= sampling.top_k, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    if sampling.top_p is not None and sampling.top_p < 1:
        before = probs.cumsum(dim=-1) - probs
        probs = probs.masked_fill(before >= sampling.top_p, 0.0)
    cdf = probs.cumsum(dim=-1)
    threshold = uniform[:, None].to(cdf.dtype) * cdf[:, -1:]
    index = torch.searchsorted(cdf, threshold, right=True)
    # Sorted probabilities end in the dropped (zero) ones: never pick past the last kept
    # token, which float rounding of the threshold could otherwise do.
    kept = (probs > 0).sum(dim=-1, keepdim=True)
    index = torch.minimum(index, kept - 1)
    return order.gather(-1, index)[:, 0]


def _end_rows(token: torch.Tensor, done: torch.Tensor | None,
              sampling: Sampling) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A row that emitted ``eos_token_id`` keeps emitting it: ``(token, done)`` updated."""
    if done is None:
        return token, None
    eos = sampling.eos_token_id
    token = token.masked_fill(done, eos)
    return token, done | (token == eos)


def decode_step(
    model: nn.Module, token: torch.Tensor, state: list[torch.Tensor],
    *,
    uniform: torch.Tensor | None, done: torch.Tensor | None, sampling: Sampling,
) -> tuple[torch.Tensor, list[torch.Tensor], torch.Tensor | None]:
    """Feed ``token (B,)`` and pick the next: ``(next (B,), state, done)``. No device read."""
    logits, state = model.step(token, state)
    nxt, done = _end_rows(select_tokens(logits, uniform, sampling), done, sampling)
    return nxt, state, done


class _DecodeGraph:
    """One captured :func:`decode_step` on static buffers, which it updates in place: a
    replay feeds ``token``, ``state`` and ``uniform`` and leaves the next token, state and
    ``done`` in the same buffers. It is captured inside a :class:`StepFusion` (the mixers'
    projection weights joined once, the residual adds fused into the norms). The graph reads
    the weights where they are, and :meth:`load` refreshes the joined copies: in-place updates
    are seen; new weight tensors (``.to()``, a new dtype) need a new graph."""

    def __init__(self, model: nn.Module, token: torch.Tensor, state: list[torch.Tensor],
                 uniform: torch.Tensor | None, done: torch.Tensor | None,
                 sampling: Sampling) -> None:
        self.model, self.sampling = model, sampling
        self.token = token.clone()
        self.state = [s.clone() for s in state]
        self.uniform = None if uniform is None else uniform.clone()
        self.done = None if done is None else done.clone()
        self.weights = _weights_key(model)
        self.fusion = StepFusion()
        with self.fusion:
            self.graph = _capture(self.advance, token.device)

    def advance(self) -> None:
        """One token, from the buffers into the buffers (what the graph holds)."""
        nxt, state, done = decode_step(self.model, self.token, self.state, uniform=self.uniform,
                                       done=self.done, sampling=self.sampling)
        self.token.copy_(nxt)
        for buffer, value in zip(self.state, state, strict=True):
            buffer.copy_(value)
        if self.done is not None:
            self.done.copy_(done)

    def load(self, token: torch.Tensor, state: list[torch.Tensor],
             done: torch.Tensor | None) -> None:
        self.fusion.refresh()
        self.token.copy_(token)
        for buffer, value in zip(self.state, state, strict=True):
            buffer.copy_(value)
        if self.done is not None:
            self.done.copy_(done)

    def replay(self, uniform: torch.Tensor | None) -> None:
        if self.uniform is not None:
            self.uniform.copy_(uniform)
        self.graph.replay()


def _capture(advance: Callable[[], None], device: torch.device) -> torch.cuda.CUDAGraph:
    """``advance`` captured in a CUDA graph, by the ``torch.cuda.graph`` recipe: two warm-up
    calls on a side stream first (lazy initialisation, kernel compilation and autotuning must
    not happen during capture). The warm-up changes the buffers: the caller loads them after."""
    side = torch.cuda.Stream(device=device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(2):
            advance()
    torch.cuda.current_stream(device).wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        advance()
    return graph


def _weights_key(model: nn.Module) -> tuple[int, ...]:
    # A captured graph holds the weights' addresses: new tensors mean a new graph.
    return tuple(p.data_ptr() for p in model.parameters())


def _decode_graph(model: nn.Module, token: torch.Tensor, state: list[torch.Tensor],
                  *, uniform: torch.Tensor | None, done: torch.Tensor | None,
                  sampling: Sampling) -> _DecodeGraph:
    """The cached graph for this batch size, dtype, device and sampling (captured on first
    use); graphs of replaced weights are dropped."""
    device = token.device
    autocast = (torch.get_autocast_dtype("cuda") if torch.is_autocast_enabled("cuda")
                else None)
    key = (token.shape[0], model.embedding.weight.dtype, device, sampling, scan_mode(),
           autocast)
    cache = model._decode_graphs
    weights = _weights_key(model)
    for stale in [k for k, graph in cache.items() if graph.weights != weights]:
        del cache[stale]
    if key not in cache:
        cache[key] = _DecodeGraph(model, token, state, uniform=uniform, done=done,
                                  sampling=sampling)
    graph = cache[key]
    graph.load(token, state, done)
    return graph


def _check_seed(seed: object) -> None:
    if seed is None:
        return
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int or None; got {seed!r}")
    if not 0 <= seed < 2**64:
        raise ValueError(f"seed must be in [0, 2**64); got {seed}")


def _use_graph(cuda_graph: object, device: torch.device) -> bool:
    if cuda_graph is None:
        return device.type == "cuda"
    if not isinstance(cuda_graph, bool):
        raise TypeError(f"cuda_graph must be a bool or None; got {cuda_graph!r}")
    if cuda_graph and device.type != "cuda":
        raise ValueError(f"cuda_graph=True needs the model on a CUDA device; it is on {device}")
    return cuda_graph


def _uniforms(steps: int, batch: int, seed: int | None,
              *, device: torch.device) -> torch.Tensor:
    """``(steps, batch)`` float32 uniform numbers in ``[0, 1)`` on ``device``."""
    if seed is None:
        seed = int(torch.randint(0, 2**62, ()))  # torch's default (CPU) generator: no sync
    generator = torch.Generator(device=device)
    generator.manual_seed(seed)
    return torch.rand(steps, batch, generator=generator, device=device, dtype=torch.float32)


def _prefill(model: nn.Module, prompt: torch.Tensor,
             chunk: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """Logits of the last prompt position ``(B, V)`` and the state after the prompt, from
    chunks of ``chunk`` tokens (the head only at the last position). Each chunk takes the
    state the previous one returned: no check reads it (a host synchronisation per chunk and
    layer, which left the GPU idle while the next chunk's kernels were launched)."""
    state: list[torch.Tensor] | None = None
    with trusted_states():
        for start in range(0, prompt.shape[1], chunk):
            hidden, state = model.features(prompt[:, start:start + chunk], state)
    return model.head(hidden[:, -1]), state


def generate(
    model: nn.Module,
    prompt: torch.Tensor,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_token_id: int | None = None,
    seed: int | None = None,
    prefill_chunk: int | None = None,
    cuda_graph: bool | None = None,
) -> torch.Tensor:
    """Continue ``prompt (B, T0)`` (integer ids, ``T0 ≥ 1``) by ``max_new_tokens`` tokens:
    ``(B, T0 + max_new_tokens)`` int64, the prompt included. This is the method
    ``MinGRULM.generate`` (``model`` is ``self``).

    The prompt runs through the parallel forward in chunks of ``prefill_chunk`` tokens
    (default :func:`mingru_kernels._lm.default_prefill_chunk`), carrying the state, so memory
    does not grow with ``T0`` (the head sees the last position only); then one ``step`` per
    token. Runs under ``torch.no_grad()`` in eval mode (the training flag is restored).

    Args:
        temperature: ``0`` is greedy (argmax); else the logits are divided by it.
        top_k: keep the ``top_k`` most probable tokens.
        top_p: keep the smallest set of most probable tokens whose probability reaches
            ``top_p`` (nucleus sampling; the most probable token is always kept).
        eos_token_id: a row that emitted it keeps emitting it; once every row has (asked
            every :data:`DONE_CHECK_EVERY` tokens), the rest is filled with it, no more steps.
        seed: seeds the sampling: one uniform number per row and token, ``(max_new_tokens,
            B)`` float32 drawn up front on the model's device; ``None`` draws a seed from
            torch's default generator, so ``torch.manual_seed`` reproduces the output too.
        prefill_chunk: prompt tokens per parallel call.
        cuda_graph: decode by replaying one captured CUDA graph per token (step and
            selection on static buffers); ``None``: on iff the model is on CUDA. The same
            tokens as without it. The graph is captured on first use and cached on the model
            (``model._decode_graphs``, a plain dict) per batch size, dtype, device, backend
            mode and sampling settings; it sees weights updated in place, and a model moved
            or cast (new weight tensors) captures a new one.

    Example:
        >>> import torch
        >>> from mingru import MinGRULM
        >>> model = MinGRULM(50, 16, 1)
        >>> prompt = torch.randint(0, 50, (3, 5))
        >>> out = model.generate(prompt, 8, top_k=10, seed=0)
        >>> out.shape, torch.equal(out, model.generate(prompt, 8, top_k=10, seed=0))
        (torch.Size([3, 13]), True)
    """
    check_generate_args(max_new_tokens=max_new_tokens, temperature=temperature, top_k=top_k,
                        top_p=top_p, eos_token_id=eos_token_id, prefill_chunk=prefill_chunk,
                        vocab_size=model.vocab_size)
    _check_seed(seed)
    device = model.embedding.weight.device
    graph = _use_graph(cuda_graph, device)
    prompt = model._tokens(prompt, "prompt", 2, read_values=True)
    batch, prompt_len = prompt.shape
    out = torch.empty(batch, prompt_len + max_new_tokens, dtype=torch.long, device=device)
    out[:, :prompt_len] = prompt
    if max_new_tokens == 0:
        return out
    sampling = Sampling.of(temperature, top_k, top_p, eos_token_id=eos_token_id)
    chunk = default_prefill_chunk(batch) if prefill_chunk is None else prefill_chunk
    training = model.training
    model.eval()
    try:
        with torch.no_grad():
            _decode(model, prompt, out, sampling=sampling, seed=seed, chunk=chunk, graph=graph)
    finally:
        model.train(training)
    return out


def _decode(model: nn.Module, prompt: torch.Tensor, out: torch.Tensor, sampling: Sampling,
            *, seed: int | None, chunk: int, graph: bool) -> None:
    """Fill ``out[:, T0:]`` with the new tokens."""
    batch, start = prompt.shape
    steps = out.shape[1] - start
    uniforms = None if sampling.greedy else _uniforms(steps, batch, seed, device=out.device)
    logits, state = _prefill(model, prompt, chunk)
    done = (None if sampling.eos_token_id is None
            else torch.zeros(batch, dtype=torch.bool, device=out.device))
    token = select_tokens(logits, None if uniforms is None else uniforms[0], sampling)
    token, done = _end_rows(token, done, sampling)
    out[:, start] = token
    runner: Any = None
    if graph and steps > 1:
        runner = _decode_graph(model, token, state,
                               uniform=None if uniforms is None else uniforms[1], done=done,
                               sampling=sampling)
    # The plain steps run the captured step's kernels too (joined weights, fused norms):
    # both paths give the same tokens.
    with StepFusion():
        for i in range(1, steps):
            if done is not None and i % DONE_CHECK_EVERY == 0 and bool(done.all()):
                out[:, start + i:] = sampling.eos_token_id
                return
            uniform = None if uniforms is None else uniforms[i]
            if runner is None:
                token, state, done = decode_step(model, token, state, uniform=uniform,
                                                 done=done, sampling=sampling)
            else:
                runner.replay(uniform)
                token, done = runner.token, runner.done
            out[:, start + i] = token
