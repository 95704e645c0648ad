"""MinGRULM.generate: greedy decoding equals an argmax loop over the parallel forward, the
chunked prefill changes nothing, seeded sampling is reproducible, the token selection draws
from the right distribution (top-k, top-p), eos rows stay ended, bad arguments are named; on
a GPU the CUDA-graph path gives exactly the plain path's tokens. Every mixer."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from mingru import _generation
from mingru._generation import Sampling, select_tokens
from tests.torch._lm_cases import MIXERS, VOCAB, make_model, tokens

B = 3


def _argmax_loop(model, prompt, new_tokens):
    """Greedy decoding the slow way: the whole sequence through ``model`` for every token."""
    seq = prompt
    with torch.no_grad():
        for _ in range(new_tokens):
            logits, _ = model(seq)
            seq = torch.cat([seq, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return seq


@pytest.mark.parametrize("mixer", MIXERS)
def test_greedy_is_the_argmax_of_the_forward(mixer):
    model = make_model(mixer)
    prompt = tokens(B, 5)
    got = model.generate(prompt, 64, temperature=0.0)
    assert got.shape == (B, 69) and got.dtype == torch.long
    assert torch.equal(got, _argmax_loop(model, prompt, 64))


@pytest.mark.parametrize("mixer", MIXERS)
def test_chunked_prefill_gives_the_same_tokens(mixer):
    model = make_model(mixer)
    prompt = tokens(2, 19)
    for kwargs in [dict(temperature=0.0), dict(seed=3, top_k=20)]:
        outs = [model.generate(prompt, 6, prefill_chunk=chunk, **kwargs) for chunk in (1, 7, None)]
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])


@pytest.mark.parametrize("mixer", MIXERS)
def test_a_chunked_prefill_reads_the_device_as_often_as_one_call(mixer, monkeypatch):
    """Each chunk takes the state the previous one returned, which no check reads: a read is
    a host synchronisation (per chunk and MinGRU layer before), which on a GPU idles it
    while the next chunk's kernels are launched. After the prefill a caller's NaN state is
    still refused."""
    model = make_model(mixer)
    prompt = tokens(2, 40)
    reads = []
    for name in ("__bool__", "item", "tolist"):
        original = getattr(torch.Tensor, name)
        monkeypatch.setattr(torch.Tensor, name,
                            lambda self, *a, _original=original, _name=name, **k:
                            reads.append(_name) or _original(self, *a, **k))
    counts = []
    for chunk in (40, 8, 1):
        reads.clear()
        model.generate(prompt, 1, temperature=0.0, prefill_chunk=chunk)
        counts.append(len(reads))
    monkeypatch.undo()
    assert counts[0] == counts[1] == counts[2], counts
    state = [torch.full_like(s, float("nan")) for s in model.init_state(2)]
    with pytest.raises(ValueError, match="NaN"):
        model.features(prompt, state)


def test_prefill_is_chunked_and_the_head_sees_one_position(monkeypatch):
    model = make_model("log")
    seen_chunks, head_inputs = [], []
    features = model.features

    def recording_features(toks, state=None):
        seen_chunks.append(toks.shape[1])
        return features(toks, state)

    monkeypatch.setattr(model, "features", recording_features)
    model.head.register_forward_hook(lambda m, args, out: head_inputs.append(args[0].shape))
    model.generate(tokens(2, 23), 4, temperature=0.0, prefill_chunk=10)
    assert seen_chunks == [10, 10, 3]
    assert head_inputs == [(2, 16)] * 4  # last prompt position, then one per step


def test_sampling_is_reproducible():
    model = make_model("signed")
    prompt = tokens(B, 4)
    first = model.generate(prompt, 30, seed=11)
    assert torch.equal(first, model.generate(prompt, 30, seed=11))
    assert not torch.equal(first, model.generate(prompt, 30, seed=12))
    torch.manual_seed(5)
    unseeded = model.generate(prompt, 30)
    torch.manual_seed(5)
    assert torch.equal(unseeded, model.generate(prompt, 30))


@pytest.mark.parametrize("mixer", MIXERS)
def test_top_k_one_and_tiny_top_p_are_greedy(mixer):
    model = make_model(mixer)
    prompt = tokens(B, 4)
    greedy = model.generate(prompt, 12, temperature=0.0)
    assert torch.equal(model.generate(prompt, 12, top_k=1, seed=0), greedy)
    assert torch.equal(model.generate(prompt, 12, top_p=1e-6, temperature=2.0, seed=0), greedy)


def _expected_distribution(logits, temperature, top_k, top_p):
    """The target distribution in float64, from its definition (independent of the sort)."""
    scores = logits.astype(np.float64) / temperature
    probs = np.exp(scores - scores.max())
    probs /= probs.sum()
    order = np.argsort(-probs, kind="stable")
    keep = np.zeros_like(probs, dtype=bool)
    mass = 0.0
    for rank, token in enumerate(order):
        if (top_k is not None and rank >= top_k) or (top_p is not None and mass >= top_p):
            break
        keep[token] = True
        mass += probs[token]
    out = np.where(keep, probs, 0.0)
    return out / out.sum()


@pytest.mark.parametrize(("temperature", "top_k", "top_p"),
                         [(1.0, None, None), (0.7, 5, None), (1.3, None, 0.6), (1.0, 4, 0.5)])
def test_selection_draws_from_the_target_distribution(temperature, top_k, top_p):
    logits = torch.randn(1, 12) * 2
    n = 20000
    # A grid of uniforms: the inverse CDF maps it onto each token in proportion to its mass.
    uniform = (torch.arange(n, dtype=torch.float32) + 0.5) / n
    sampling = Sampling(temperature, top_k, top_p, None)
    picked = select_tokens(logits.expand(n, -1), uniform, sampling)
    freq = np.bincount(picked.numpy(), minlength=12) / n
    want = _expected_distribution(logits[0].numpy(), temperature, top_k, top_p)
    np.testing.assert_allclose(freq, want, atol=2e-4)
    edge = select_tokens(logits, torch.tensor([1.0 - 2**-24]), sampling)
    assert want[edge.item()] > 0  # never past the last kept token


@pytest.mark.parametrize("mixer", ["log", "delta"])
def test_rows_that_emit_eos_keep_emitting_it(mixer):
    model = make_model(mixer)
    prompt = tokens(B, 4)
    free = model.generate(prompt, 40, temperature=0.0)
    eos = int(free[0, 4 + 5])  # row 0 emits it at its 6th new token
    got = model.generate(prompt, 40, temperature=0.0, eos_token_id=eos)
    want = free.clone()
    for row in range(B):
        hits = (free[row, 4:] == eos).nonzero()
        if len(hits):
            want[row, 4 + int(hits[0]):] = eos
    assert torch.equal(got, want)


def test_once_every_row_has_ended_no_more_steps_run(monkeypatch):
    model = make_model("givens")
    prompt = tokens(1, 4)
    eos = int(model.generate(prompt, 1, temperature=0.0)[0, -1])  # the first new token
    calls = []
    step = model.step
    monkeypatch.setattr(model, "step", lambda *a: calls.append(1) or step(*a))
    out = model.generate(prompt, 100, temperature=0.0, eos_token_id=eos)
    assert torch.equal(out[0, 4:], torch.full((100,), eos))
    assert len(calls) < _generation.DONE_CHECK_EVERY


def test_generate_restores_the_mode_and_keeps_no_graph():
    model = make_model("rotation", dropout=0.1).train()
    prompt = tokens(B, 4)
    out = model.generate(prompt, 5, temperature=0.0)
    assert model.training and not out.requires_grad
    assert torch.equal(out, model.eval().generate(prompt, 5, temperature=0.0))  # eval inside
    assert torch.equal(model.generate(prompt, 0), prompt)


@pytest.mark.parametrize(("kwargs", "error", "match"), [
    (dict(prompt=tokens(B, 4).float()), TypeError, "prompt must be an integer tensor"),
    (dict(prompt=tokens(B, 4) + VOCAB), ValueError, r"prompt holds token .*vocab_size=37"),
    (dict(prompt=tokens(B, 4) - VOCAB), ValueError, "prompt holds token -"),
    (dict(prompt=tokens(B, 4)[:, :0]), ValueError, r"prompt must have shape \(B, T\)"),
    (dict(prompt=tokens(B, 4)[0]), ValueError, r"prompt must have shape \(B, T\)"),
    (dict(max_new_tokens=-1), ValueError, "max_new_tokens"),
    (dict(max_new_tokens=2.0), TypeError, "max_new_tokens"),
    (dict(temperature=-0.5), ValueError, "temperature"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(top_p=1.5), ValueError, "top_p"),
    (dict(top_k=0), ValueError, "top_k"),
    (dict(eos_token_id=VOCAB), ValueError, "eos_token_id"),
    (dict(prefill_chunk=0), ValueError, "prefill_chunk"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(cuda_graph=True), ValueError, "cuda_graph"),
    (dict(cuda_graph="yes"), TypeError, "cuda_graph"),
])
def test_bad_arguments_are_named(kwargs, error, match):
    if torch.cuda.is_available() and kwargs.get("cuda_graph") is True:
        pytest.skip("cuda_graph=True is valid on a CUDA machine")
    model = make_model("log", n_layers=1)
    args = dict(prompt=tokens(B, 4), max_new_tokens=3) | kwargs
    with pytest.raises(error, match=match):
        model.generate(args.pop("prompt"), args.pop("max_new_tokens"), **args)


class _ReplayedGraph:
    """A stand-in for a captured CUDA graph on CPU: replay runs the captured call again."""

    def __init__(self, advance):
        self.advance = advance

    def replay(self):
        self.advance()


@pytest.mark.parametrize("mixer", ["signed", "delta"])
def test_graph_buffers_give_the_plain_tokens(mixer, monkeypatch):
    """The buffer logic of the CUDA-graph path (load, uniform row, replay, eos, the cache)
    with the capture replaced by re-running the captured call; the GPU test below captures
    for real."""
    captures = []

    def capture(advance, device):
        captures.append(device)
        for _ in range(3):  # like the warm-up and the capture: the buffers move before load
            advance()
        return _ReplayedGraph(advance)

    monkeypatch.setattr(_generation, "_capture", capture)
    monkeypatch.setattr(_generation, "_use_graph", lambda cuda_graph, device: bool(cuda_graph))
    model = make_model(mixer, n_layers=1)
    prompt = tokens(B, 6)
    settings = [dict(temperature=0.0), dict(seed=7, top_k=25, top_p=0.9),
                dict(seed=8, eos_token_id=3, temperature=1.5)]
    for kwargs in [*settings, settings[2]]:  # the last one replays a cached graph
        plain = model.generate(prompt, 20, cuda_graph=False, **kwargs)
        assert torch.equal(model.generate(prompt, 20, cuda_graph=True, **kwargs), plain)
    assert len(captures) == len(model._decode_graphs) == 3
    with torch.no_grad():
        model.embedding.weight.mul_(1.5)  # in place: the cached graphs see it
    plain = model.generate(prompt, 20, cuda_graph=False, **settings[1])
    assert torch.equal(model.generate(prompt, 20, cuda_graph=True, **settings[1]), plain)
    assert len(captures) == 3
    model.double()  # new weight tensors: the old graphs are dropped, a new one is captured
    assert torch.equal(model.generate(prompt, 20, cuda_graph=True, **settings[1]),
                       model.generate(prompt, 20, cuda_graph=False, **settings[1]))
    assert len(captures) == 4 and len(model._decode_graphs) == 1
    assert copy.deepcopy(model)._decode_graphs == {}


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mixer", MIXERS)
def test_cuda_graph_gives_the_plain_tokens(mixer, dtype):
    model = make_model(mixer).to("cuda", dtype)
    prompt = tokens(4, 9).cuda()
    for kwargs in [dict(temperature=0.0), dict(seed=7, top_k=25, top_p=0.9),
                   dict(seed=8, eos_token_id=3, temperature=1.5)]:
        plain = model.generate(prompt, 40, cuda_graph=False, **kwargs)
        graphed = model.generate(prompt, 40, cuda_graph=True, **kwargs)
        assert torch.equal(graphed, plain), kwargs
        assert torch.equal(model.generate(prompt, 40, **kwargs), plain)  # cached graph, default
    assert len(model._decode_graphs) == 3
    with torch.no_grad():  # weights updated in place are seen by the cached graphs (the
        for param in model.parameters():  # mixers' joined copies are refreshed)
            param.mul_(1.1)
    kwargs = dict(seed=7, top_k=25, top_p=0.9)
    assert torch.equal(model.generate(prompt, 40, **kwargs),
                       model.generate(prompt, 40, cuda_graph=False, **kwargs))


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["log", "delta"])
def test_a_float32_batch_of_16_decodes_on_the_fused_gemms(mixer, monkeypatch):
    """At 16 rows and more a captured float32 step's GEMMs take the Triton kernels (``auto``),
    in the graph and in the plain loop alike: the same tokens both ways."""
    from mingru._launch import linear as launcher

    calls = []
    fused = launcher._fwd_impl
    monkeypatch.setattr(launcher, "_fwd_impl", lambda *a, **k: calls.append(1) or fused(*a, **k))
    model = make_model(mixer).to("cuda")
    prompt = tokens(16, 9).cuda()
    for kwargs in [dict(temperature=0.0), dict(seed=7, top_k=25, top_p=0.9)]:
        plain = model.generate(prompt, 40, cuda_graph=False, **kwargs)
        assert torch.equal(model.generate(prompt, 40, cuda_graph=True, **kwargs), plain), kwargs
    assert calls
