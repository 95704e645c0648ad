"""Sequence parallelism for the diagonal recurrences: a sequence split along T across the ranks
of a ``torch.distributed`` process group.

A slice's effect on the state is one affine map ``h ↦ P h + Z`` (``P`` the product of its
transitions, ``Z`` its zero-start final state), so each rank computes its map, ONE all-gather
exchanges the maps (``2·B·D`` numbers per rank), every rank composes the maps of the ranks
before it into its incoming state, and runs its slice from there. The all-gather is
differentiable (``torch.distributed.nn.functional.all_gather``: its backward is one
reduce-scatter), so gradients reach the transitions and inputs of every rank.

Cost per call: the local recurrence twice (once from zero for ``Z``, once from the incoming
state) plus the product of the transitions, and one all-gather of ``2·B·D`` values per rank
forward and one reduce-scatter backward.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["check_group", "sequence_parallel"]


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


def sequence_parallel(
    run: Callable[[torch.Tensor | None], tuple[torch.Tensor, torch.Tensor]],
    transition_product: torch.Tensor,
    initial_state: torch.Tensor | None,
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
        return_final_state: also return the whole sequence's final state.
    """
    import torch.distributed as dist
    from torch.distributed.nn.functional import all_gather

    rank = dist.get_rank(group)
    _, zero_start = run(None)
    with warnings.catch_warnings():
        # Deprecated in favour of a private API; the public autograd-aware collective stays.
        warnings.simplefilter("ignore", FutureWarning)
        maps = all_gather(torch.stack([transition_product, zero_start]), group=group)
    carry = initial_state
    for r in range(rank):
        carry = maps[r][1] if carry is None else maps[r][0] * carry + maps[r][1]
    if carry is None:
        carry = torch.zeros_like(zero_start)
    # The all-gather's backward is a collective: every rank's states must reach it, the first
    # rank's too (whose incoming state needs no map), so every rank runs it exactly once.
    carry = _Attach.apply(carry, *maps)
    h, _ = run(carry)
    if not return_final_state:
        return h
    final = carry
    for r in range(rank, len(maps)):
        final = maps[r][1] if final is None else maps[r][0] * final + maps[r][1]
    return h, final
