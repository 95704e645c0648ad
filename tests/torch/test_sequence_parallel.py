"""Sequence parallelism (``sequence_group=``) over ``torch.distributed`` with ``gloo``: 2 and 4
processes spawned by the test, uneven slices (one of a single step), with and without an
initial state, on the eager path and through the Triton interpreter. Each rank's slice must
equal the same slice of the single-process call on the whole sequence — outputs, the whole
sequence's final state, input gradients, and (summed over ranks) the gradients of the initial
state and of the parameters.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.distributed as dist

import mingru
from mingru_kernels._seam import interpreter_problem
from tests.helpers import rel_err
from tests.torch._distributed import rank_process, spawn

pytestmark = pytest.mark.host  # gloo ranks on CPU tensors, on a GPU machine too

SLICES = {2: (9, 14), 4: (3, 8, 1, 11)}  # lengths of the ranks' slices of T = 23


def _case(kind: str, with_h0: bool):
    """``(fn, inputs, n_slice_inputs)``: ``fn(*inputs, group) -> (h, h_T or None)``; the first
    ``n_slice_inputs`` inputs are split along T."""
    g = torch.Generator().manual_seed(0)
    B, T, D = 2, sum(SLICES[2]), 5
    h0 = torch.rand(B, D, generator=g) + 0.1 if with_h0 else None
    if kind == "linear_recurrence":
        a = torch.tanh(2 * torch.randn(B, T, D, generator=g))
        b = torch.randn(B, T, D, generator=g)

        def fn(a, b, h0, group):
            return mingru.linear_recurrence(a, b, h0, True, sequence_group=group)

        return fn, [a, b, h0], 2
    if kind in ("mingru_cell", "signed_mingru_cell"):
        k = 2 * torch.randn(B, T, (2 if kind == "mingru_cell" else 3) * D, generator=g)
        lg = -torch.rand(B, T, 1, generator=g)

        def fn(k, lg, h0, group):
            if kind == "mingru_cell":
                return mingru.mingru_cell(k, h0, lg, True, sequence_group=group)
            return mingru.signed_mingru_cell(k, h0, lg, coupled=True, return_final_state=True,
                                             sequence_group=group)

        return fn, [k, lg, h0], 2
    torch.manual_seed(0)
    mixer = {"MinGRU": lambda: mingru.MinGRU(4, D, decay="learnable"),
             "SignedMinGRU": lambda: mingru.SignedMinGRU(4, D, decay="learnable")}[kind]()
    x = torch.randn(B, T, 4, generator=g)
    dt = torch.rand(B, T, generator=g)
    h0_seq = None if h0 is None else h0[:, None]

    def fn(x, dt, h0, group, mixer=mixer):
        return mixer(x, h_0=h0, delta_t=dt, sequence_group=group), None

    fn.module = mixer
    return fn, [x, dt, h0_seq], 2


def _worker(rank: int, world: int, init: str, errors, kind: str, with_h0: bool,
            backend: str) -> None:
    with rank_process(rank, world, init, errors):
        fn, inputs, n_split = _case(kind, with_h0)
        module = getattr(fn, "module", None)
        bounds = [0]
        for n in SLICES[world]:
            bounds.append(bounds[-1] + n)
        lo, hi = bounds[rank], bounds[rank + 1]
        w = torch.randn(inputs[0].shape[0], bounds[-1], 5, generator=torch.Generator().manual_seed(1))
        with mingru.use_backend(backend):
            # The single-process reference on the whole sequence.
            ref_in = [None if x is None else x.clone().requires_grad_(x.is_floating_point())
                      for x in inputs]
            h, h_T = fn(*ref_in, None)
            (h * w).sum().backward()
            ref_params = [] if module is None else [p.grad.clone() for p in module.parameters()]
            if module is not None:
                module.zero_grad()
            # This rank's slice.
            mine = [None if x is None else (x[:, lo:hi] if i < n_split else x).clone()
                    .requires_grad_(x.is_floating_point()) for i, x in enumerate(inputs)]
            hs, hs_T = fn(*mine, dist.group.WORLD)
            (hs * w[:, lo:hi]).sum().backward()
        assert rel_err(hs, h[:, lo:hi]) < 1e-5, "outputs"
        if h_T is not None:
            assert rel_err(hs_T, h_T) < 1e-5, "final state"
        for i in range(n_split):
            if ref_in[i].requires_grad and ref_in[i].grad is not None:
                assert rel_err(mine[i].grad, ref_in[i].grad[:, lo:hi]) < 1e-4, f"grad {i}"
        shared = [(mine[i].grad, ref_in[i].grad) for i in range(n_split, len(inputs))
                  if inputs[i] is not None and ref_in[i].grad is not None]
        if module is not None:
            shared += list(zip((p.grad for p in module.parameters()), ref_params, strict=True))
        for got, want in shared:  # gradients of what every rank shares: summed over ranks
            got = got.clone()
            dist.all_reduce(got)
            assert rel_err(got, want) < 1e-4, "shared gradient"


def _spawn(world, kind, with_h0, backend, tmp_path):
    spawn(_worker, world, tmp_path, kind, with_h0, backend)


KINDS = ["linear_recurrence", "mingru_cell", "signed_mingru_cell", "MinGRU", "SignedMinGRU"]


@pytest.mark.parametrize(("kind", "world"), [(kind, 2) for kind in KINDS]
                         + [("linear_recurrence", 4), ("MinGRU", 4)])
def test_sharded_equals_one_process_on_the_eager_path(kind, world, tmp_path):
    _spawn(world, kind, True, "eager", tmp_path)


@pytest.mark.interpreter
@pytest.mark.parametrize(("kind", "with_h0"), [("linear_recurrence", False), ("MinGRU", True),
                                               ("signed_mingru_cell", False)])
def test_sharded_through_the_kernels(kind, with_h0, tmp_path, monkeypatch):
    """The gloo ranks hold CPU tensors, on a GPU machine too: they run the kernels through
    Triton's interpreter, set in the environment they inherit (fresh processes: no kernel is
    decorated before it is read)."""
    triton = pytest.importorskip("triton")
    problem = interpreter_problem(triton.__version__, np.__version__)
    if problem is not None:
        pytest.skip(problem)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    _spawn(2, kind, with_h0, "triton", tmp_path)


def test_a_group_without_distributed_is_a_clear_error():
    a = torch.rand(1, 3, 2)
    with pytest.raises((RuntimeError, TypeError), match="sequence_group"):
        mingru.linear_recurrence(a, a, sequence_group=object())
