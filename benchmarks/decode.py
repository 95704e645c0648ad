"""The decode suite: greedy ``generate()`` of a byte-level language model, per token and per
prompt, against its own plain step loop, transformers' GPT-2 and the JAX frontend.

A case is a mixer at ``(B, P, N, d, L)``: batch, prompt bytes, new tokens, width, layers
(vocabulary 256, random weights, the model cast with ``.to(dtype)``). Backends:

* ``ours`` — :meth:`mingru.MinGRULM.generate` replaying its CUDA graph (``cuda_graph=True``;
  on a CPU the step loop, there is no graph); ``eager-step`` — the same graph with every op on
  its eager form (``mingru.use_backend("eager")``: what the fused step kernels buy);
  ``step-loop`` — ``cuda_graph=False``;
* ``gpt2`` — transformers' ``GPT2LMHeadModel`` of the same width and depth (``n_head = d/64``,
  ``n_positions = P + N + 1``), ``model.generate(do_sample=False)`` with its KV cache;
* ``jax`` — :meth:`mingru_jax.MinGRULM.generate` (jitted prefill chunks, one jitted loop);
* ``chunked`` / ``unchunked`` (mode ``prefill``) — ``ours`` with one new token, the default
  ``prefill_chunk`` or ``prefill_chunk=P``: its time and, on CUDA, its peak memory
  (``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, weights included).

ms/token is the decode loop alone: ``t(N + 1 new tokens) − t(1 new token)`` (both prefill the
same prompt and pick the first token) divided by ``N``, the median over rounds that time the
two calls alternately (:func:`mingru_benchmarks.timers.paired`), wall clock with a device sync
per call. ``tokens/s = B · 1000 / (ms/token)``.
"""

from __future__ import annotations

import contextlib
import importlib
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from mingru_benchmarks import timers
from mingru_benchmarks.registry import Case, Skip
from mingru_benchmarks.torch_side import MIXER_KEYS, VOCAB

__all__ = ["measure"]

Generate = Callable[..., Any]  # (new tokens, **generate kwargs) -> (B, P + new) tokens


def measure(case: Case, backend: str, device: str, warmup: int, repeats: int) -> dict[str, Any]:
    """The row fields of ``backend`` on ``case``: ``ms`` (per token; per prefill for
    ``chunked`` / ``unchunked``), ``tokens_per_s``, ``peak_gb``. At most 5 rounds: each
    call generates a whole sequence."""
    B, P, N, _, _ = case.dims
    rounds, warmup = max(1, min(repeats, 5)), max(1, min(warmup, 2))
    if backend in ("chunked", "unchunked"):
        generate, finish = _ours(case, device, device == "cuda")
        chunk = None if backend == "chunked" else P
        call = lambda: finish(generate(1, prefill_chunk=chunk))
        row: dict[str, Any] = {"ms": timers.wall(call, lambda _: None, warmup, rounds)}
        if device == "cuda":
            row["peak_gb"] = _peak_gb(call)
        return row
    maker = {"ours": lambda: _ours(case, device, device == "cuda"),
             "eager-step": lambda: _ours(case, device, device == "cuda", backend="eager"),
             "step-loop": lambda: _ours(case, device, False),
             "gpt2": lambda: _gpt2(case, device), "jax": lambda: _jax(case, device)}[backend]
    generate, finish = maker()
    out = finish(generate(N + 1))
    if tuple(out.shape) != (B, P + N + 1):  # the peer really made every token
        raise RuntimeError(f"{backend} returned {tuple(out.shape)}, not {(B, P + N + 1)}")

    def timed(new: int) -> Callable[[], float]:
        def run() -> float:
            start = time.perf_counter()
            finish(generate(new))
            return (time.perf_counter() - start) * 1e3

        return run

    for _ in range(warmup):
        timed(N + 1)()
        timed(1)()
    times = timers.paired({"long": timed(N + 1), "short": timed(1)}, rounds)
    ms = statistics.median(a - b for a, b in zip(times["long"], times["short"], strict=True)) / N
    return {"ms": ms, "tokens_per_s": B * 1e3 / ms if ms > 0 else None}


def _dtype(case: Case) -> torch.dtype:
    return torch.bfloat16 if case.precision == "bf16" else torch.float32


def _prompt(case: Case) -> np.ndarray:
    B, P = case.dims[:2]
    return np.random.default_rng(1).integers(0, VOCAB, (B, P))


def _mixer(case: Case) -> tuple[str, dict[str, Any] | None]:
    key = MIXER_KEYS[case.name]
    return key, ({"n_heads": max(1, case.dims[3] // 64)} if key == "delta" else None)


def _sync(device: str) -> Callable[[Any], Any]:
    wait = timers.torch_sync(device)
    return lambda out: wait(out) or out


def _ours(case: Case, device: str, graph: bool,
          backend: str = "auto") -> tuple[Generate, Callable[[Any], Any]]:
    import mingru

    _, _, _, d, layers = case.dims
    mixer, kwargs = _mixer(case)
    torch.manual_seed(0)
    model = mingru.MinGRULM(VOCAB, d, layers, mixer=mixer, mixer_kwargs=kwargs)
    model = model.to(device=device, dtype=_dtype(case)).eval()
    prompt = torch.from_numpy(_prompt(case)).to(device)

    def generate(new: int, **kwargs: Any) -> torch.Tensor:
        with mingru.use_backend(backend):
            return model.generate(prompt, new, temperature=0.0, cuda_graph=graph, **kwargs)

    return generate, _sync(device)


def _gpt2(case: Case, device: str) -> tuple[Generate, Callable[[Any], Any]]:
    try:
        # mingru.hf first: it keeps a checkout's kernels/ from shadowing the `kernels` package
        # that transformers imports.
        importlib.import_module("mingru.hf")
        from transformers import GPT2Config, GPT2LMHeadModel
    except ImportError as exc:
        raise Skip(f"transformers not importable: {type(exc).__name__}: {exc}") from None
    _, P, N, d, layers = case.dims
    # Token 0 as the end token, held off by min_new_tokens: every row makes N tokens.
    config = GPT2Config(vocab_size=VOCAB, n_embd=d, n_layer=layers, n_head=max(1, d // 64),
                        n_positions=P + N + 1, bos_token_id=0, eos_token_id=0, pad_token_id=0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config).to(device=device, dtype=_dtype(case)).eval()
    prompt = torch.from_numpy(_prompt(case)).to(device)
    mask = torch.ones_like(prompt)

    def generate(new: int) -> torch.Tensor:
        with torch.no_grad():
            return model.generate(prompt, attention_mask=mask, do_sample=False,
                                  min_new_tokens=new, max_new_tokens=new, pad_token_id=0)

    return generate, _sync(device)


def _jax(case: Case, device: str) -> tuple[Generate, Callable[[Any], Any]]:
    try:
        import jax
        import jax.numpy as jnp
        from flax import nnx

        import mingru_jax
    except ImportError as exc:
        raise Skip(f"jax / mingru_jax not importable: {exc}") from None
    place = (jax.default_device(jax.devices("cpu")[0]) if device == "cpu"
             else contextlib.nullcontext())
    _, _, _, d, layers = case.dims
    mixer, kwargs = _mixer(case)
    dtype = jnp.bfloat16 if case.precision == "bf16" else jnp.float32
    with place:
        model = mingru_jax.MinGRULM(VOCAB, d, layers, mixer=mixer, mixer_kwargs=kwargs,
                                    dtype=dtype, param_dtype=dtype, rngs=nnx.Rngs(0))
        prompt = jnp.asarray(_prompt(case), jnp.int32)

    def generate(new: int) -> Any:
        with place:
            return model.generate(prompt, new, temperature=0.0)

    return generate, jax.block_until_ready


def _peak_gb(call: Callable[[], Any]) -> float:
    """Peak CUDA memory allocated during ``call()``, in GB."""
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    call()
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / 1e9
