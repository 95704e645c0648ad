"""Packed calls of the diagonal recurrences (:func:`packed_call`, the one entry of
``linear_recurrence`` and the cells), and packed AND sharded: a packed row (``cu_seqlens``)
split along T across the ranks of a ``torch.distributed`` process group.

Every rank passes the GLOBAL offsets (the same ``cu_seqlens`` on every rank) and its
contiguous slice of the row, in rank order. A sequence may straddle ranks. The slice's effect
on the state is still one affine map per channel (:mod:`mingru._sharding`): if a sequence starts
anywhere in the slice the outgoing state no longer depends on the incoming one (``P = 0``),
else ``P`` is the product of the slice's transitions; ``Z`` is its outgoing state from a zero
incoming state. Locally, the incoming state is the initial state of the slice's first segment
when that segment continues a sequence from the rank before: it is given its own row in the
table of initial states, so the packed kernels restart it from the carry like any other
sequence. That offset arithmetic is the frontends' shared :mod:`mingru_kernels._packed_sharding`.

Extra cost over :mod:`mingru._sharding`: one all-gather of the slice lengths (``world``
integers, read on the host to place the slice in the row) and, for per-sequence final states,
one all-gather of ``N·D`` values (each sequence's final state lives on the rank where it ends).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from mingru._packing import final_states, segments
from mingru._sharding import _AllGather, sequence_parallel
from mingru_kernels._packed_sharding import slice_final_states, slice_sequences

__all__ = ["packed_call", "packed_sequence_parallel", "slice_start"]


def packed_call(
    run: Callable[[torch.Tensor | None, torch.Tensor], torch.Tensor],
    a_product: Callable[[], torch.Tensor],
    cu_seqlens: torch.Tensor,
    *,
    steps: int,
    initial_state: torch.Tensor | None,
    group: Any,
    return_final_state: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """A packed diagonal recurrence on one device, or sharded over ``group`` when it is given
    (:func:`packed_sequence_parallel`): the one entry of ``linear_recurrence`` and the cells.

    ``run(table, seq_id) -> h (1, T, D)`` is the op's packed call; ``a_product()`` the
    ``(1, D)`` product of the transitions (only needed, so only computed, when sharded).
    """
    if group is not None:
        return packed_sequence_parallel(run, a_product(), cu_seqlens, steps=steps,
                                        initial_state=initial_state, group=group,
                                        return_final_state=return_final_state)
    seg = segments(cu_seqlens, steps)
    h = run(initial_state, seg.seq_id)
    return (h, final_states(h, seg, initial_state)) if return_final_state else h


def slice_start(steps: int, device: torch.device, group: Any) -> int:
    """Global index of this rank's first step: the lengths of the slices before it."""
    import torch.distributed as dist

    mine = torch.tensor([steps], dtype=torch.int64, device=device)
    lengths = [torch.empty_like(mine) for _ in range(dist.get_world_size(group))]
    dist.all_gather(lengths, mine, group=group)
    return int(sum(int(n) for n in lengths[: dist.get_rank(group)]))


def packed_sequence_parallel(
    run: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    a_product: torch.Tensor,
    cu_seqlens: torch.Tensor,
    *,
    steps: int,
    initial_state: torch.Tensor | None,
    group: Any,
    return_final_state: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """This rank's states of a packed recurrence sharded along T.

    Args:
        run: ``run(table, seq_id) -> h (1, T_local, D)``: the packed local recurrence with the
            initial-state table ``(N+1, D)`` and the local per-step sequence index.
        a_product: ``(1, D)`` product of this slice's transitions.
        cu_seqlens: checked GLOBAL offsets ``(N+1,)`` (int64, on the device).
        steps: this rank's slice length ``T_local``.
        initial_state: ``(N, D)`` one state per sequence, or ``None`` (zeros).
        group: the process group (ranks in T order).
        return_final_state: also return every sequence's final state ``(N, D)``.
    """
    import torch.distributed as dist

    device = cu_seqlens.device
    start = slice_start(steps, device, group)
    seq_id, opens = slice_sequences(torch, cu_seqlens,
                                    start + torch.arange(steps, device=device))
    seq_id = seq_id.to(torch.int32)
    N, D = cu_seqlens.shape[0] - 1, a_product.shape[-1]
    h0 = (initial_state if initial_state is not None
          else a_product.new_zeros(N, D))

    def local_run(carry: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        carry = a_product.new_zeros(1, D) if carry is None else carry
        h = run(torch.cat([h0.to(carry.dtype), carry], dim=0), seq_id)
        return h, h[:, -1]

    # A sequence opening in the slice cuts the incoming state off from the outgoing one.
    product = a_product * (~opens).to(a_product.dtype)
    h = sequence_parallel(local_run, product, initial_state=None, group=group,
                          return_final_state=False)
    if not return_final_state:
        return h
    mine = slice_final_states(torch, h, cu_seqlens, start=start, initial_state=h0.to(h.dtype),
                              first=dist.get_rank(group) == 0)
    return h, torch.stack(_AllGather.apply(mine, group)).sum(0)
