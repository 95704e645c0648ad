"""What a new user hit (issue #47), PyTorch frontend: a NaN initial state is a ``ValueError``
naming the argument at the entry of every eager public call that takes one (each mixer, the
block, the stack, ``linear_recurrence``), checked once per call however deep the call goes,
never in ``step`` and never while ``torch.compile`` traces; and ``check_cu_seqlens``, the
opt-in check of packed offsets inside compiled code (device-side asserts)."""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru import _validate
from tests import user_fix_cases as cases
from tests.user_fix_cases import BAD_OFFSETS, IN, MIXERS


def _mixer(name: str) -> torch.nn.Module:
    cls, kwargs = MIXERS[name]
    return getattr(mingru, cls)(IN, **kwargs)


def _state_size(m: torch.nn.Module) -> int:
    return getattr(m, "state_size", m.hidden_size)


def _with_nan(shape: tuple[int, ...], g: torch.Generator, positive: bool = False) -> torch.Tensor:
    h = torch.rand(shape, generator=g) + 0.1 if positive else torch.randn(shape, generator=g)
    flat = h.view(-1)
    flat[torch.randint(flat.numel(), (1,), generator=g)] = float("nan")
    return h


@pytest.fixture
def count_checks(monkeypatch):
    """The states every ``no_nan`` call was given, in order."""
    return cases.count_no_nan(monkeypatch, _validate)


@pytest.mark.parametrize("name", MIXERS)
def test_a_nan_h_0_is_a_value_error_naming_it(name):
    g = torch.Generator().manual_seed(101)
    m = _mixer(name)
    B, T = 3, 5
    h0 = _with_nan((B, 1, _state_size(m)), g, positive=name == "log")
    x = torch.randn(B, T, IN, generator=g)
    # MinGRU's own non-negativity check names h_0 (NaN is not >= 0).
    match = "h_0 must be a non-negative" if name == "log" else "h_0 holds NaN"
    with pytest.raises(ValueError, match=match):
        m(x, h_0=h0)
    finite = torch.nan_to_num(h0, nan=0.5)
    assert m(x, h_0=finite).shape[:2] == (B, T)


@pytest.mark.parametrize("name", MIXERS)
def test_a_nan_h_0_of_a_packed_call_is_a_value_error(name):
    g = torch.Generator().manual_seed(102)
    m = _mixer(name)
    cu = torch.tensor([0, 4, 4, 9])  # an empty sequence among three
    h0 = _with_nan((3, 1, _state_size(m)), g, positive=name == "log")
    with pytest.raises(ValueError, match="h_0"):
        m(torch.randn(1, 9, IN, generator=g), h_0=h0, cu_seqlens=cu)


@pytest.mark.parametrize("name", ["signed", "rotation", "givens", "delta"])
def test_block_names_h_0_and_checks_it_once(name, count_checks):
    g = torch.Generator().manual_seed(103)
    block = mingru.MinGRUBlock(6, mlp_expansion=1, mixer=name,
                               mixer_kwargs=cases.block_kwargs(name))
    cases.assert_block_checks_h_0_once(block, torch.randn(3, 5, 6, generator=g),
                                       with_nan=lambda shape: _with_nan(shape, g),
                                       calls=count_checks)


def test_stack_names_the_layer_and_checks_every_layer_once(count_checks):
    g = torch.Generator().manual_seed(104)
    stack = mingru.MinGRUStack(
        5, 6, n_layers=3, mlp_expansion=0, mixer=["signed", "givens", "delta"],
        mixer_kwargs={"givens": {"block_size": 2, "rounds": 1}, "delta": {"n_heads": 3}})
    x = torch.randn(2, 7, 5, generator=g)
    _, state = stack(x)
    count_checks.clear()
    stack(x, state)
    assert count_checks == [["state[0]", "state[1]", "state[2]"]]
    layer = int(torch.randint(3, (1,), generator=g))
    bad = list(state)
    bad[layer] = _with_nan(tuple(state[layer].shape), g)
    with pytest.raises(ValueError, match=rf"state\[{layer}\] holds NaN"):
        stack(x, bad)
    partial = [None, None, None]
    partial[layer] = bad[layer]
    with pytest.raises(ValueError, match=rf"state\[{layer}\] holds NaN"):
        stack(x, partial)


def test_linear_recurrence_names_initial_state():
    g = torch.Generator().manual_seed(105)
    a, b = torch.tanh(torch.randn(3, 5, 7, generator=g)), torch.randn(3, 5, 7, generator=g)
    with pytest.raises(ValueError, match="initial_state holds NaN"):
        mingru.linear_recurrence(a, b, _with_nan((3, 7), g))
    cu = torch.tensor([0, 2, 5])
    with pytest.raises(ValueError, match="initial_state holds NaN"):
        mingru.linear_recurrence(a[:1], b[:1], _with_nan((2, 7), g), cu_seqlens=cu)


def test_internal_calls_and_step_do_not_check(count_checks):
    """``linear_scan``'s packed form runs the recurrence from a constant start: no check;
    ``step`` never checks (no host sync), so a NaN ``h_prev`` gives NaN states."""
    g = torch.Generator().manual_seed(106)
    a, b = torch.tanh(torch.randn(1, 9, 3, generator=g)), torch.randn(1, 9, 3, generator=g)
    mingru.linear_scan(a, b, cu_seqlens=torch.tensor([0, 3, 9]))
    assert count_checks == []
    m = mingru.SignedMinGRU(IN, 5)
    h = m.step(torch.randn(2, IN, generator=g), _with_nan((2, 5), g))
    assert count_checks == []
    assert torch.isnan(h).any()  # step does not look at the state's values


def test_compiled_forward_skips_the_check_and_stays_one_graph():
    g = torch.Generator().manual_seed(107)
    m = mingru.SignedMinGRU(IN, 5)
    compiled = torch.compile(m, fullgraph=True, backend="aot_eager")
    x, h0 = torch.randn(2, 3, IN, generator=g), torch.randn(2, 1, 5, generator=g)
    torch.testing.assert_close(compiled(x, h_0=h0), m(x, h_0=h0))
    assert torch.isnan(compiled(x, h_0=torch.full_like(h0, float("nan")))).all()


# --------------------------------------------------------------------------- check_cu_seqlens

def test_check_cu_seqlens_eagerly_is_the_host_check():
    cases.assert_host_check_of_offsets(mingru.check_cu_seqlens, torch.tensor)
    cu = torch.tensor([0, 4, 4, 9], dtype=torch.int32)
    assert mingru.check_cu_seqlens(cu, 9) is cu
    with pytest.raises(TypeError, match="cu_seqlens must be a 1-D integer torch.Tensor"):
        mingru.check_cu_seqlens([0, 9], 9)


def test_check_cu_seqlens_inside_compiled_code_asserts_on_the_device():
    g = torch.Generator().manual_seed(108)
    m = mingru.SignedMinGRU(IN, 5)

    def run(x, cu):
        return m(x, cu_seqlens=mingru.check_cu_seqlens(cu, x.shape[1]))

    compiled = torch.compile(run, fullgraph=True, backend="aot_eager")
    x = torch.randn(1, 9, IN, generator=g)
    good = torch.tensor([0, 4, 4, 9])
    torch.testing.assert_close(compiled(x, good), m(x, cu_seqlens=good))
    for offsets, message in BAD_OFFSETS:
        with pytest.raises(RuntimeError, match=f"cu_seqlens {message}"):
            compiled(x, torch.tensor(offsets))
