"""One public call validates each argument once, in both frontends: the entry checks, nothing
below it checks again (a mixer hands what it built to the op's unchecked route, not to the
op's public entry), and a user's direct call of an op still runs every check.

Counted by :mod:`tests.validation_calls`: at how many sites each argument is validated during
one call. A block or stack passes its own (already checked) input through a norm or a
projection and its mixer checks that new tensor, so what is counted there is every argument
of the call, by identity. Each test runs once per installed frontend.
"""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from tests.validation_calls import recording

B, T, IN, H = 2, 5, 4, 6


class Frontend:
    """What the tests need of one frontend: its package, arrays and module construction."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.lib = importlib.import_module("mingru" if name == "torch" else "mingru_jax")
        if name == "torch":
            import torch

            self.array = lambda values: torch.as_tensor(np.asarray(values))
            self.extra = {}
        else:
            import jax.numpy as jnp
            from flax import nnx

            self.array = jnp.asarray
            self.extra = {"rngs": nnx.Rngs(0)}

    def normal(self, seed: int, shape: tuple[int, ...]):
        return self.array(np.random.default_rng(seed).standard_normal(shape, dtype=np.float32))

    def positive(self, seed: int, shape: tuple[int, ...]):
        return self.array(np.random.default_rng(seed).random(shape, dtype=np.float32) + 0.1)

    def offsets(self, values: list[int]):
        return self.array(np.asarray(values, dtype=np.int32))

    def build(self, cls_name: str, *args, **kwargs):
        return getattr(self.lib, cls_name)(*args, **kwargs, **self.extra)


@pytest.fixture(params=["torch", "jax"])
def fw(request):
    pytest.importorskip(request.param)
    if request.param == "jax":
        pytest.importorskip("flax")
    frontend = Frontend(request.param)
    with frontend.lib.use_backend("eager"):
        yield frontend


# name -> (mixer, constructor arguments, whether its states are positive)
MIXERS = {
    "log": ("MinGRU", {"decay": "fixed"}, True),
    "signed": ("SignedMinGRU", {"decay": "fixed"}, False),
    "givens": ("GivensMinGRU", {"block_size": 2, "rounds": 1, "decay": "fixed"}, False),
    "rotation": ("RotationMinGRU", {"decay": "fixed"}, False),
}


def _state(fw, positive: bool, shape):
    return fw.positive(2, shape) if positive else fw.normal(2, shape)


@pytest.mark.parametrize("name", list(MIXERS))
def test_mixer_call_validates_each_argument_once(fw, name):
    cls, kwargs, positive = MIXERS[name]
    m = fw.build(cls, IN, H, **kwargs)
    x, h_0 = fw.normal(1, (B, T, IN)), _state(fw, positive, (B, 1, H))
    with recording() as seen:
        m(x, h_0=h_0, delta_t=fw.positive(3, (B, T)))
    assert seen.sites_per_name() == {"x": 1, "h_0": 1}
    assert seen.sites_of(x) == 1 and seen.sites_of(h_0) == 1


@pytest.mark.parametrize("name", ["log", "signed"])
def test_packed_mixer_call_validates_each_argument_once(fw, name):
    cls, kwargs, positive = MIXERS[name]
    m = fw.build(cls, IN, H, **kwargs)
    cu = fw.offsets([0, 2, T])
    with recording() as seen:
        m(fw.normal(1, (1, T, IN)), h_0=_state(fw, positive, (2, 1, H)),
          delta_t=fw.positive(3, (1, T)), cu_seqlens=cu)
    assert seen.sites_per_name() == {"x": 1, "h_0": 1, "cu_seqlens": 1}
    assert seen.sites_of(cu) == 1


def test_delta_call_validates_each_argument_once(fw):
    m = fw.build("DeltaMinGRU", IN, 8, n_heads=2, decay="fixed")
    with recording() as seen:
        m(fw.normal(1, (B, T, IN)), h_0=fw.normal(2, (B, 1, m.state_size)),
          delta_t=fw.positive(3, (B, T)))
    assert seen.sites_per_name() == {"x": 1, "h_0": 1}


def test_block_and_stack_validate_each_argument_once(fw):
    """No op below the mixers validates; each argument of the call is validated at one site
    (and its initial states checked for NaN once)."""
    block = fw.build("MinGRUBlock", H, mixer="signed")
    x, h_0 = fw.normal(1, (B, T, H)), fw.normal(2, (B, 1, H))
    with recording() as seen:
        block(x, h_0=h_0)
    assert seen.names() <= {"x", "h_0"}
    assert seen.sites_of(x) == 1 and seen.sites_of(h_0) == 1
    assert seen.value_checks["no_nan"] == 1

    stack = fw.build("MinGRUStack", IN, H, 2, mixer=["signed", "log"])
    x, state = fw.normal(1, (B, T, IN)), [fw.normal(2, (B, 1, H)), fw.positive(3, (B, 1, H))]
    with recording() as seen:
        stack(x, state)
    assert seen.names() <= {"x", "h_0", "state"}
    assert [seen.sites_of(obj) for obj in (x, state, *state)] == [1, 1, 1, 1]
    assert seen.value_checks["no_nan"] == 1


def test_public_ops_validate_each_argument_once(fw):
    with recording() as seen:
        fw.lib.linear_recurrence(fw.positive(1, (B, T, 3)), fw.normal(2, (B, T, 3)),
                                 initial_state=fw.normal(3, (B, 3)))
    assert seen.sites_per_name() == {"a": 1, "b": 1, "initial_state": 1}
    assert seen.value_checks["no_nan"] == 1

    with recording() as seen:
        fw.lib.signed_mingru_cell(fw.normal(4, (B, T, 3 * H)), fw.normal(5, (B, H)),
                                  -fw.positive(6, (B, T, 1)), coupled=True)
    assert seen.sites_per_name() == {"k": 1, "initial_state": 1, "log_gamma": 1}

    with recording() as seen:
        fw.lib.matrix_scan(fw.normal(6, (1, T, 2, 2, 2)), fw.normal(7, (1, T, 2, 2)),
                           cu_seqlens=fw.offsets([0, 3, T]))
    assert seen.sites_per_name() == {"M": 1, "b": 1, "cu_seqlens": 1}


def test_public_ops_still_reject_bad_input(fw):
    """The unchecked routes are private: a user's call still goes through every check."""
    with pytest.raises(ValueError, match="initial_state"):
        fw.lib.mingru_cell(fw.normal(1, (B, T, 2 * H)), fw.positive(2, (B + 1, H)))
    with pytest.raises(TypeError, match="k must be a"):
        fw.lib.signed_mingru_cell([[1.0]])
    with pytest.raises(ValueError, match="initial_state holds NaN"):
        fw.lib.linear_recurrence(fw.positive(1, (B, T, 3)), fw.positive(2, (B, T, 3)),
                                 fw.array(np.full((B, 3), np.nan, np.float32)))
    with pytest.raises(ValueError, match="cu_seqlens"):
        fw.lib.matrix_scan(fw.normal(1, (1, T, 2, 2, 2)), fw.normal(2, (1, T, 2, 2)),
                           cu_seqlens=fw.offsets([0, 2]))
