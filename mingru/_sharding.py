"""Sequence parallelism for the diagonal recurrences: a sequence split along T across the ranks
of a ``torch.distributed`` process group.

A slice's effect on the state is one affine map ``h ↦ P h + Z`` (``P`` the product of its
transitions, ``Z`` its zero-start final state), so each rank computes its map, ONE all-gather
exchanges the maps (``2·B·D`` numbers per rank), every rank composes the maps of the ranks
before it into its incoming state, and runs its slice from there. The all-gather is
differentiable (its backward is one all-reduce of the gathered gradient), so gradients reach
the transitions and inputs of every rank.

Cost per call: the local recurrence twice (once from zero for ``Z``, once from the incoming
state) plus the product of the transitions, and one all-gather of ``2·B·D`` values per rank
forward and one all-reduce of the same size times the world backward.

Block and matrix states (:func:`matrix_sequence_parallel`: the rotation/Givens blocks, the
delta rule's ``d_k × d_v`` heads) are the same with ``P`` a ``(…, k, k)`` matrix per block or
head, composition a matmul, and the state ``(…, k, v)``: the all-gather carries
``(k·k + k·v)`` numbers per block and batch row.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["chain_product", "check_group", "matrix_sequence_parallel", "sequence_parallel"]


class _Attach(torch.autograd.Function):
    """``carry`` unchanged, with the gathered maps attached to the graph (zero gradient)."""

    @staticmethod
    def forward(ctx: Any, carry: torch.Tensor, *maps: torch.Tensor) -> torch.Tensor:
        ctx.n = len(maps)
        ctx.shape = maps[0].shape
        return carry.view_as(carry)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, ...]:
        zeros = grad.new_zeros(ctx.shape)
        return (grad, *(zeros for _ in range(ctx.n)))


class _AllGather(torch.autograd.Function):
    """Differentiable all-gather: ``(world, *x.shape)``, rank order; the backward all-reduces
    the gathered gradient and keeps this rank's row.

    Not ``torch.distributed.nn.functional.all_gather``: with gloo its backward scatters from
    group-local indices as if they were global ranks, which hangs or fails in any group but
    the world (data parallel × sequence parallel needs sub-groups). The maps are small
    (``2·B·D`` numbers), so an all-reduce instead of a reduce-scatter costs nothing that
    matters."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, group: Any) -> tuple[torch.Tensor, ...]:
        import torch.distributed as dist

        ctx.group = group
        ctx.rank = dist.get_rank(group)
        out = [torch.empty_like(x) for _ in range(dist.get_world_size(group))]
        dist.all_gather(out, x.contiguous(), group=group)
        return tuple(out)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        import torch.distributed as dist

        stacked = torch.stack([torch.zeros_like(grads[ctx.rank]) if g is None else g
                               for g in grads])
        dist.all_reduce(stacked, group=ctx.group)
        return stacked[ctx.rank], None


def check_group(group: Any, name: str = "sequence_group") -> Any:
    """``group`` must be a process group of an initialised ``torch.distributed``."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(
            f"{name} was given but torch.distributed is not initialised: call "
            "torch.distributed.init_process_group first"
        )
    if not isinstance(group, dist.ProcessGroup):
        raise TypeError(f"{name} must be a torch.distributed.ProcessGroup; got "
                        f"{type(group).__name__}")
    return group


def check_not_packed(cu_seqlens: Any, group: Any, what: str) -> None:
    """``NotImplementedError`` when ``what`` (a mixer) gets ``cu_seqlens`` and a group together.
    """
    if cu_seqlens is not None and group is not None:
        raise NotImplementedError(
            f"{what}: cu_seqlens together with sequence_group is not supported yet: pack the "
            "sequences of each rank's slice without sharding, or shard one unpacked sequence")


def sequence_parallel(
    run: Callable[[torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]],
    transition_product: torch.Tensor,
    initial_state: torch.Tensor | None,
    *,
    group: Any,
    return_final_state: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """This rank's states of a recurrence sharded along T over ``group`` (ranks in T order).

    Args:
        run: ``run(h_in) -> (h, h_T)``, the local recurrence from the incoming state ``h_in``
            (``None``: zeros).
        transition_product: ``(B, D)`` product of this slice's transitions ``a_t``.
        initial_state: ``(B, D)`` state before the whole sequence (the same on every rank).
        group: the process group.
        return_final_state: also return the whole sequence's final state ``(B, D)``.
    """
    _, zero_start = run(None)
    return _sharded(run, transition_product, zero_start, initial_state=initial_state, group=group,
                    return_final_state=return_final_state, act=torch.mul)


def matrix_sequence_parallel(
    run: Callable[[torch.Tensor], tuple[Any, torch.Tensor]],
    transition_product: torch.Tensor,
    zero_start: torch.Tensor,
    *,
    initial_state: torch.Tensor | None,
    group: Any,
    return_final_state: bool,
) -> Any:
    """:func:`sequence_parallel` for block-matrix states: a slice maps ``H ↦ P·H + Z``.

    Args:
        run: ``run(H_in) -> (out, H_T)``, the local recurrence from the incoming state
            ``H_in (…, k, v)``; ``out`` is whatever the caller needs of the slice.
        transition_product: ``(B, …, k, k)`` product ``M_T ⋯ M_1`` of this slice's
            transitions (later ones on the left), acting on the state from the left.
        zero_start: ``(B, …, k, v)`` this slice's final state from a zero start.
        initial_state: ``(B, …, k, v)`` state before the whole sequence (the same on every
            rank), or ``None`` (zeros).
        group: the process group (ranks in T order).
        return_final_state: also return the whole sequence's final state ``(B, …, k, v)``.

    Returns:
        ``out`` of ``run`` from this rank's incoming state, or ``(out, H_T)``.
    """
    return _sharded(run, transition_product, zero_start, initial_state=initial_state, group=group,
                    return_final_state=return_final_state, act=torch.matmul)


def chain_product(M: torch.Tensor) -> torch.Tensor:
    """``M_T ⋯ M_1`` ``(B, …, k, k)`` of ``M (B, T, …, k, k)`` along dim 1 (later factors on
    the left): a log-depth pairwise reduction of matmuls, differentiable."""
    while M.shape[1] > 1:
        T = M.shape[1]
        pairs = M[:, 1:T:2] @ M[:, 0:T - 1:2]  # (M_2 M_1), (M_4 M_3), … in time order
        M = torch.cat([pairs, M[:, T - 1:]], dim=1) if T % 2 else pairs
    return M[:, 0]


def _sharded(
    run: Callable[[torch.Tensor], tuple[Any, torch.Tensor]],
    product: torch.Tensor,
    zero_start: torch.Tensor,
    *,
    initial_state: torch.Tensor | None,
    group: Any,
    return_final_state: bool,
    act: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
) -> Any:
    """The exchange behind both entries: ``act(P, h)`` applies a map's ``P`` to a state."""
    import torch.distributed as dist

    rank = dist.get_rank(group)
    B = zero_start.shape[0]
    n_p = product[0].numel()
    # ONE all-gather of both parts of the map, side by side per batch row.
    mine = torch.cat([product.reshape(B, -1), zero_start.reshape(B, -1).to(product.dtype)], 1)
    gathered = _AllGather.apply(mine, group)
    maps = [(g[:, :n_p].reshape(product.shape), g[:, n_p:].reshape(zero_start.shape)
             .to(zero_start.dtype)) for g in gathered]
    carry = initial_state
    for P, Z in maps[:rank]:
        carry = Z if carry is None else act(P, carry) + Z
    if carry is None:
        carry = torch.zeros_like(zero_start)
    # The all-gather's backward is a collective: every rank's states must reach it, the first
    # rank's too (whose incoming state needs no map), so every rank runs it exactly once.
    carry = _Attach.apply(carry, *gathered)
    out, final = run(carry)
    if not return_final_state:
        return out
    for P, Z in maps[rank + 1:]:
        final = act(P, final) + Z
    return out, final
