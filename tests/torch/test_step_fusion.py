"""A decode step inside :class:`mingru._step_fusion.StepFusion` (what ``generate`` captures):
the mixers' weights joined once (no concatenation per step, refreshed on demand), the residual
adds fused into the norms on the kernel path; the same logits as the plain step, every mixer."""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru._step_fusion import StepFusion
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE
from tests.torch._lm_cases import MIXERS, VOCAB, make_model

B = 3


def _cats(call) -> int:
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        call()
    return sum(event.count for event in prof.key_averages() if event.key == "aten::cat")


@pytest.mark.parametrize("mixer", MIXERS)
def test_weights_are_joined_once(mixer):
    model = make_model(mixer).eval()
    token = torch.randint(0, VOCAB, (B,), generator=torch.Generator().manual_seed(3))
    state = model.init_state(B)
    with torch.no_grad():
        want, want_state = model.step(token, state)
        plain = _cats(lambda: model.step(token, state))
        fusion = StepFusion()
        with fusion:
            assert _cats(lambda: model.step(token, state)) == plain  # joins, once
            # The eager cells' own concatenations (of h0 and the inputs) stay.
            assert _cats(lambda: model.step(token, state)) < plain
            got, got_state = model.step(token, state)
        assert len(fusion._joined) == 2  # one projection per layer
        assert torch.equal(got, want)
        for a, b in zip(got_state, want_state, strict=True):
            assert torch.equal(a, b)
        for param in model.parameters():
            param.mul_(0.9)
        fresh, _ = model.step(token, state)
        with fusion:
            assert rel_err(model.step(token, state)[0], fresh) > 1e-3  # stale copies
            fusion.refresh()
            assert torch.equal(model.step(token, state)[0], fresh)


@pytest.mark.interpreter
@pytest.mark.parametrize("mixer", ["log", "delta"])
def test_the_kernel_step_fuses_every_residual_add(mixer, monkeypatch):
    """On the kernel path every residual add goes into the next norm (two per block but the
    last's second, which the stack's final norm takes): ``2·n_layers`` fused launches."""
    from mingru._launch import layer_norm as launcher

    calls = []
    fused = launcher._add_fwd_impl
    monkeypatch.setattr(launcher, "_add_fwd_impl", lambda *a, **k: calls.append(1) or fused(*a, **k))
    model = make_model(mixer, n_layers=2).to(DEVICE).eval()
    token = torch.randint(0, VOCAB, (B,), generator=torch.Generator().manual_seed(4)).to(DEVICE)
    state = model.init_state(B)
    with torch.no_grad():
        with mingru.use_backend("eager"):
            want, want_state = model.step(token, state)
        with mingru.use_backend("triton"), StepFusion():
            got, got_state = model.step(token, state)
    assert len(calls) == 2 * 2
    assert rel_err(got, want) <= 1e-5
    for a, b in zip(got_state, want_state, strict=True):
        assert rel_err(a, b) <= 1e-5


def test_only_its_own_thread_and_no_gradient_see_it():
    """A StepFusion entered in one thread changes nothing in another, and a call that needs
    gradients inside one joins the weights afresh (the kept copies carry none)."""
    import threading

    model = make_model("log", n_layers=1)
    token = torch.randint(0, VOCAB, (B,), generator=torch.Generator().manual_seed(6))
    state = model.init_state(B)
    seen = []
    with StepFusion() as fusion:
        thread = threading.Thread(target=lambda: seen.append(_fusion_active()))
        thread.start()
        thread.join()
        logits, _ = model.step(token, state)
        logits.sum().backward()
    assert seen == [None] and not fusion._joined
    assert all(p.grad is not None for p in model.stack.blocks[0].mixer.parameters()
               if p.requires_grad and p.dim() == 2)


def _fusion_active():
    from mingru._step_fusion import active

    return active()
