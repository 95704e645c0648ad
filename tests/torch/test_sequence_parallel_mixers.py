"""Sequence parallelism (``sequence_group=``) of every mixer, the block and the stack, over
``torch.distributed`` with ``gloo``: ONE spawn of 2 and one of 4 processes, each worker looping
over the cases (all of them with 2; with 4 those with an initial state, and the stack without
one), float64, eager path, uneven slices (one of a single step). Each rank's
output slice, the whole sequence's final state (on every rank) and the gradients — inputs
sliced, initial states and parameters summed over ranks — must equal the single-process
call on the whole sequence.
"""

from __future__ import annotations

import traceback

import pytest
import torch
import torch.distributed as dist

import mingru
from mingru.mixers.delta import DeltaMinGRU
from tests.helpers import rel_err
from tests.torch._distributed import rank_process, spawn
from tests.torch.test_sequence_parallel import SLICES

pytestmark = pytest.mark.host  # gloo ranks on CPU tensors, on a GPU machine too

B, D_IN, D = 2, 4, 8


def _module(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    build = {
        "log": lambda: mingru.MinGRU(D_IN, D, decay="learnable"),
        "signed": lambda: mingru.SignedMinGRU(D_IN, D, decay="learnable"),
        "rotation": lambda: mingru.RotationMinGRU(D_IN, D, decay="learnable"),
        "givens": lambda: mingru.GivensMinGRU(D_IN, D, block_size=4, rounds=2,
                                              decay="learnable"),
        "delta": lambda: DeltaMinGRU(D_IN, D, n_heads=2, nh=2, chunk_size=4, decay="learnable"),
        "block": lambda: mingru.MinGRUBlock(D, mixer="log", mlp_expansion=2,
                                            mixer_kwargs={"decay": "fixed"}),
        "stack": lambda: mingru.MinGRUStack(
            5, D, 3, mixer=["signed", "givens", "delta"], mlp_expansion=2,
            mixer_kwargs={"givens": {"block_size": 4, "rounds": 2},
                          "delta": {"n_heads": 2, "chunk_size": 4, "decay": "learnable"}}),
    }[name]
    return build().double()


# (module, with an initial state, return_state): the block and the stack always return it.
CASES = [(name, with_h0, ret) for name in ("log", "signed", "rotation", "givens", "delta")
         for with_h0, ret in ((True, True), (False, True), (False, False))]
CASES += [("block", True, True), ("stack", True, True), ("stack", False, True)]
# 4 ranks (on a 2-core CI machine): the cases that compose several maps, each path once.
CASES_4 = [case for case in CASES if case[1] or case[0] == "stack"]


def _call(name, module, x, dt, h0, group, ret):
    """``(out, [states])`` of one call; ``h0``: a state, a list of them (stack) or ``None``."""
    if name == "stack":
        out, state = module(x, h0, dt, sequence_group=group)
        return out, [s for s in state if s is not None]
    if name == "block":
        out, state = module(x, h0, dt, sequence_group=group)
        return out, [state]
    out = module(x, h_0=h0, delta_t=dt, return_state=ret, sequence_group=group)
    return (out[0], [out[1]]) if ret else (out, [])


def _inputs(name, module, with_h0, T):
    g = torch.Generator().manual_seed(1)
    d_in = {"block": D, "stack": 5}.get(name, D_IN)
    x = torch.randn(B, T, d_in, generator=g, dtype=torch.float64)
    dt = torch.rand(B, T, generator=g, dtype=torch.float64)
    with torch.no_grad():
        _, states = _call(name, module, x, dt, None, None, True)
    h0 = None
    if with_h0:  # positive: valid for every mixer, MinGRU's included
        h0 = [torch.rand(s.shape, generator=g, dtype=torch.float64) + 0.1 for s in states]
        if name == "stack":
            h0[1] = None  # a layer on its default (the learned Givens h0)
        else:
            (h0,) = h0
    return x, dt, h0, g


def _leaves(h0):
    return [] if h0 is None else [s for s in (h0 if isinstance(h0, list) else [h0])
                                  if s is not None]


def _grad(t):
    return torch.zeros_like(t) if t.grad is None else t.grad


def _check_case(name, with_h0, ret, rank, world, lo, hi, group):
    module = _module(name)
    T = sum(SLICES[world])
    x, dt, h0, g = _inputs(name, module, with_h0, T)
    w = torch.randn(B, T, D, generator=g, dtype=torch.float64)

    def fresh(h):
        if isinstance(h, list):
            return [None if s is None else s.clone().requires_grad_() for s in h]
        return None if h is None else h.clone().requires_grad_()

    # The single-process reference on the whole sequence.
    rx, rdt, rh0 = x.clone().requires_grad_(), dt.clone().requires_grad_(), fresh(h0)
    out, states = _call(name, module, rx, rdt, rh0, None, ret)
    ws = [torch.randn(s.shape, generator=g, dtype=torch.float64) for s in states]
    loss = (out * w).sum() + sum((s * v).sum() for s, v in zip(states, ws, strict=True))
    loss.backward()
    ref_params = [_grad(p).clone() for p in module.parameters()]
    module.zero_grad(set_to_none=True)
    # This rank's slice; every rank carries 1/world of the final-state term of the loss.
    sx = x[:, lo:hi].clone().requires_grad_()
    sdt = dt[:, lo:hi].clone().requires_grad_()
    sh0 = fresh(h0)
    s_out, s_states = _call(name, module, sx, sdt, sh0, group, ret)
    loss = (s_out * w[:, lo:hi]).sum()
    loss = loss + sum((s * v).sum() for s, v in zip(s_states, ws, strict=True)) / world
    loss.backward()
    problems = []
    if rel_err(s_out, out[:, lo:hi]) >= 1e-5:
        problems.append(f"outputs {rel_err(s_out, out[:, lo:hi]):.3g}")
    for i, (got, want) in enumerate(zip(s_states, states, strict=True)):
        if rel_err(got, want) >= 1e-5:
            problems.append(f"final state {i} {rel_err(got, want):.3g}")
    for what, got, want in (("x", sx, rx), ("delta_t", sdt, rdt)):
        if want.grad is not None and rel_err(_grad(got), want.grad[:, lo:hi]) >= 1e-4:
            problems.append(f"grad {what} {rel_err(_grad(got), want.grad[:, lo:hi]):.3g}")
    shared = [("h_0", _grad(a), _grad(b)) for a, b in
              zip(_leaves(sh0), _leaves(rh0), strict=True)]
    shared += [(f"param {n}", _grad(p), want) for (n, p), want in
               zip(module.named_parameters(), ref_params, strict=True)]
    for what, got, want in shared:  # what every rank shares: gradients summed over ranks
        got = got.clone()
        dist.all_reduce(got, group=group)
        if rel_err(got, want) >= 1e-4:
            problems.append(f"grad {what} {rel_err(got, want):.3g}")
    return problems


def _worker(rank: int, world: int, init: str, errors) -> None:
    torch.set_num_threads(1)
    with rank_process(rank, world, init, errors):
        bounds = [0]
        for n in SLICES[world]:
            bounds.append(bounds[-1] + n)
        lo, hi = bounds[rank], bounds[rank + 1]
        with mingru.use_backend("eager"):
            for case in CASES if world == 2 else CASES_4:
                try:
                    problems = _check_case(*case, rank, world, lo, hi, dist.group.WORLD)
                except Exception:
                    problems = [traceback.format_exc()]
                if problems:
                    errors.put(f"world {world} rank {rank} {case}: " + "; ".join(problems))


@pytest.mark.parametrize("world", [2, 4])
def test_every_mixer_block_and_stack_sharded_equals_one_process(world, tmp_path):
    spawn(_worker, world, tmp_path)


@pytest.mark.parametrize("name", ["rotation", "givens", "delta"])
def test_packed_and_sharded_together_is_not_supported_and_a_bad_group_is_an_error(name):
    module = _module(name)
    x = torch.randn(1, 6, D_IN, dtype=torch.float64)
    dt = torch.rand(1, 6, dtype=torch.float64)
    cu = torch.tensor([0, 2, 6])

    def call(**kw):
        return module(x, delta_t=dt, **kw)

    with pytest.raises(NotImplementedError, match="sequence_group"):
        call(cu_seqlens=cu, sequence_group=object())
    with pytest.raises((RuntimeError, TypeError), match="sequence_group"):
        call(sequence_group=object())


def test_the_slice_products_equal_the_sequential_products_values_and_gradients():
    from mingru._eager.givens_recurrence import givens_transitions
    from mingru._sharding import chain_product
    from mingru.mixers.givens import slice_product

    g = torch.Generator().manual_seed(2)
    Bt, T, n, R, half = 2, 11, 3, 2, 2
    theta = torch.randn(Bt, T, n, R, half, generator=g, dtype=torch.float64, requires_grad=True)
    scale = torch.rand(Bt, T, n, 2 * half, generator=g, dtype=torch.float64, requires_grad=True)
    lg = -torch.rand(Bt, T, n, generator=g, dtype=torch.float64, requires_grad=True)
    M = givens_transitions(theta, scale, lg)
    want = M[:, 0]
    for t in range(1, T):  # M_T ⋯ M_1: later factors on the left
        want = M[:, t] @ want
    w = torch.randn(want.shape, generator=g, dtype=torch.float64)
    grads = torch.autograd.grad((want * w).sum(), (theta, scale, lg), retain_graph=True)
    for got in (chain_product(M), slice_product(theta, scale, lg, chunk=3),
                slice_product(theta, scale, lg, chunk=4)):
        assert rel_err(got, want) < 1e-12
        for a, b in zip(torch.autograd.grad((got * w).sum(), (theta, scale, lg)), grads,
                        strict=True):
            assert rel_err(a, b) < 1e-12
