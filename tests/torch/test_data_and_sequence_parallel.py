"""Data parallel with sharded sequences — the recipe of ``docs/how-to/shard-sequences.md``:
4 gloo processes as a 2 × 2 mesh, ``DistributedDataParallel`` over all of them and sequence
parallelism over each pair. Rank ``(d, s)`` holds batch shard ``d`` and time slice ``s``
(uneven slices). Its loss is its slice's sum of squared errors scaled by
``world / (global tokens × features)``, so DDP's average over the world is the gradient of the
whole batch's mean loss: every parameter gradient must equal single-process training on the
whole batch.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch import nn

import mingru
from tests.helpers import rel_err
from tests.torch._distributed import rank_process, spawn

pytestmark = pytest.mark.host  # gloo ranks on CPU tensors, on a GPU machine too

DP, SP = 2, 2
B, T, F = 4, 13, 6
SLICES = (5, 8)  # the sequence ranks' lengths of T


class TinyModel(nn.Module):
    """Two recurrent layers with a residual MLP between them (the shape of a stack)."""

    def __init__(self) -> None:
        super().__init__()
        self.first = mingru.MinGRU(F, 8, decay="learnable")
        self.mid = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8))
        self.second = mingru.SignedMinGRU(8, 8, coupled=True)
        self.head = nn.Linear(8, 3)

    def forward(self, x, delta_t, group=None):
        h = self.first(x, delta_t=delta_t, sequence_group=group)
        h = h + self.mid(h)
        return self.head(self.second(h, sequence_group=group))


def _data():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(B, T, F, generator=g, dtype=torch.float64),
            torch.rand(B, T, generator=g, dtype=torch.float64),
            torch.randn(B, T, 3, generator=g, dtype=torch.float64))


def _worker(rank: int, world: int, init: str, errors) -> None:
    with rank_process(rank, world, init, errors):
        d, s = divmod(rank, SP)
        # Every rank creates every group, in the same order (a torch.distributed rule).
        seq_groups = [dist.new_group([r * SP + j for j in range(SP)]) for r in range(DP)]
        x, dt, y = _data()
        torch.manual_seed(0)
        reference = TinyModel().double()
        model = TinyModel().double()
        model.load_state_dict(reference.state_dict())

        # Single process, whole batch: the mean squared error over every token and feature.
        nn.functional.mse_loss(reference(x, dt), y).backward()

        ddp = nn.parallel.DistributedDataParallel(model)  # all-reduces (averages) over WORLD
        rows = slice(d * B // DP, (d + 1) * B // DP)
        lo = sum(SLICES[:s])
        cols = slice(lo, lo + SLICES[s])
        out = ddp(x[rows, cols], dt[rows, cols], seq_groups[d])
        scale = dist.get_world_size() / y.numel()
        ((out - y[rows, cols]).square().sum() * scale).backward()

        for (name, p), ref in zip(model.named_parameters(), reference.parameters(),
                                  strict=True):
            err = rel_err(p.grad, ref.grad)
            assert err < 1e-9, f"{name}: relative error {err:.3g}"


def test_ddp_with_sequence_parallel_equals_one_process(tmp_path):
    spawn(_worker, DP * SP, tmp_path)
