"""The benchmarks' memory-floor stand-in for the mixer cells (``benchmarks/train_step_paired.py``,
used by ``benchmarks/mixer_floor.py`` too) takes the real cells' place inside both mixers and
the block: the same call, the same output shapes and dtypes, gradients reaching the
projections, and the real cell back afterwards. So a floor timing runs the same step around
the cell."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

import mingru
from mingru import MinGRUBlock

BENCHMARK = Path(__file__).resolve().parents[2] / "benchmarks" / "train_step_paired.py"


def _benchmark():
    spec = importlib.util.spec_from_file_location("train_step_paired", BENCHMARK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["log", "signed"])
def test_stand_in_replaces_the_cell_and_gives_it_back(name):
    bench = _benchmark()
    module_name, attr, _ = bench.CELLS[name]
    real_cell = getattr(importlib.import_module(module_name), attr)
    torch.manual_seed(0)
    mixer = (mingru.MinGRU if name == "log" else mingru.SignedMinGRU)(8, 6)
    x = torch.randn(2, 5, 8)
    with mingru.use_backend("eager"):
        h_real, state_real = mixer(x, return_state=True)
        with bench.cell_replaced(name):
            assert getattr(importlib.import_module(module_name), attr) is not real_cell
            h, state = mixer(x, return_state=True)
            h.square().sum().backward()
            out, block_state = MinGRUBlock(8, mixer=name)(x)
    assert getattr(importlib.import_module(module_name), attr) is real_cell
    assert h.shape == h_real.shape and state.shape == state_real.shape and h.dtype == h_real.dtype
    assert torch.equal(state[:, 0], h[:, -1])
    assert not torch.allclose(h, h_real)  # the stand-in has no recurrence: not the cell's values
    # The gate and candidate projections get gradients (the stand-in ignores k_s).
    for layer in (mixer.linear_z, mixer.linear_h):
        assert layer.weight.grad is not None and layer.weight.grad.abs().sum() > 0
    assert out.shape == x.shape and block_state.shape == (2, 1, 8)
