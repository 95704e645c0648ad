"""Packed and sharded together: a packed row (global ``cu_seqlens``, the same on every rank)
split along T over 2 and 4 gloo processes, with sequences straddling ranks, one opening
exactly at a rank's first step, a rank wholly inside one sequence, an empty one and a one-step
slice. Each rank's states, every
sequence's final state and the gradients (inputs; summed over ranks for what they share:
initial states, parameters) equal the single-process packed call on the whole row (itself
checked against each sequence alone in ``test_packing.py``). All cases run in one spawn per
world size (eager, float64).
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

import mingru
from tests.helpers import rel_err
from tests.torch._distributed import rank_process, spawn

pytestmark = pytest.mark.host  # gloo ranks on CPU tensors, on a GPU machine too

CU = [0, 4, 4, 5, 12, 23]
N = len(CU) - 1
# Of 4 ranks, rank 1 is one step, opening sequence 3 (at t = 5); rank 2 lies wholly inside it,
# so its map carries that sequence's state on to rank 3, which continues it.
SLICES = {2: (9, 14), 4: (5, 1, 5, 12)}
F64 = torch.float64


def _cases():
    """``name -> (fn, inputs, n_split)``: ``fn(*inputs, group)`` returns ``(h, finals)``; the
    first ``n_split`` inputs are split along T."""
    g = torch.Generator().manual_seed(0)
    T, D = CU[-1], 3
    cu = torch.tensor(CU)

    def rnd(*shape):
        return torch.randn(*shape, generator=g, dtype=F64)

    cases = {}
    for with_h0 in (True, False):
        def lin(a, b, h0, group):
            return mingru.linear_recurrence(a, b, h0, True, cu_seqlens=cu, sequence_group=group)

        cases[f"linear_recurrence-h0={with_h0}"] = (
            lin, [torch.tanh(rnd(1, T, D)), rnd(1, T, D), rnd(N, D) if with_h0 else None], 2)
    for cell in ("log", "coupled"):
        def fn(k, lg, h0, group, cell=cell):
            if cell == "log":
                return mingru.mingru_cell(k, h0, lg, True, cu_seqlens=cu, sequence_group=group)
            return mingru.signed_mingru_cell(k, h0, lg, coupled=True, return_final_state=True,
                                             cu_seqlens=cu, sequence_group=group)

        gates = 2 if cell == "log" else 3
        cases[f"cell-{cell}"] = (fn, [rnd(1, T, gates * D), -rnd(1, T, 1).abs(),
                                      rnd(N, D).abs()], 2)
    for name, cls in (("MinGRU", mingru.MinGRU), ("SignedMinGRU", mingru.SignedMinGRU)):
        torch.manual_seed(0)
        mixer = cls(4, D, decay="learnable").double()

        def run(x, dt, h0, group, mixer=mixer):
            return mixer(x, h0, dt, return_state=True, cu_seqlens=cu, sequence_group=group)

        run.module = mixer
        cases[name] = (run, [rnd(1, T, 4), torch.rand(1, T, generator=g, dtype=F64),
                             rnd(N, 1, D).abs()], 2)
    return cases


def _worker(rank: int, world: int, init: str, errors) -> None:
    with rank_process(rank, world, init, errors):
        lo = sum(SLICES[world][:rank])
        hi = lo + SLICES[world][rank]
        for name, (fn, inputs, n_split) in _cases().items():
            module = getattr(fn, "module", None)
            ref_in = [None if x is None else x.clone().requires_grad_() for x in inputs]
            h, finals = fn(*ref_in, None)
            w = torch.linspace(-1, 1, h.numel(), dtype=F64).view(h.shape)
            wf = torch.linspace(-0.5, 1, finals.numel(), dtype=F64).view(finals.shape)
            ((h * w).sum() + (finals * wf).sum()).backward()
            ref_params = [] if module is None else [p.grad.clone() for p in module.parameters()]
            if module is not None:
                module.zero_grad()
            mine = [None if x is None else (x[:, lo:hi] if i < n_split else x).clone()
                    .requires_grad_() for i, x in enumerate(inputs)]
            hs, fs = fn(*mine, dist.group.WORLD)
            # Every rank holds every final state: count their weight once, on rank 0.
            ((hs * w[:, lo:hi]).sum() + (fs * wf).sum() * (rank == 0)).backward()
            assert rel_err(hs, h[:, lo:hi]) < 1e-10, f"{name}: states"
            assert rel_err(fs, finals) < 1e-10, f"{name}: final states"
            for i in range(n_split):
                assert rel_err(mine[i].grad, ref_in[i].grad[:, lo:hi]) < 1e-9, f"{name}: grad {i}"
            shared = [(mine[i].grad, ref_in[i].grad) for i in range(n_split, len(inputs))
                      if inputs[i] is not None]
            if module is not None:
                shared += list(zip((p.grad for p in module.parameters()), ref_params,
                                   strict=True))
            for got, want in shared:
                got = got.clone()
                dist.all_reduce(got)
                assert rel_err(got, want) < 1e-9, f"{name}: shared gradient"


@pytest.mark.parametrize("world", [2, 4])
def test_packed_and_sharded_equals_one_process(world, tmp_path):
    spawn(_worker, world, tmp_path)
