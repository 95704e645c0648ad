"""Packed calls of the diagonal recurrences (:func:`packed_call`, the one entry of
``linear_recurrence`` and the cells), and packed AND sharded: a packed row (``cu_seqlens``)
split along T across the devices of a mesh axis, inside :func:`jax.shard_map`. The twin of
:mod:`mingru._packed_sharding`.

Every device passes the GLOBAL offsets (the same ``cu_seqlens`` on every device, ending at
the whole row's length) and its contiguous slice of the row, in ``jax.lax.axis_index`` order.
``shard_map`` splits evenly, so a slice of ``T_local`` steps starts at
``axis_index · T_local`` and the row is ``n · T_local`` long (:func:`row_length`): unlike
PyTorch's ranks, no lengths are exchanged. A sequence may straddle devices. The slice's effect
on the state is still one affine map per channel (:mod:`mingru_jax._sharding`): if a sequence
starts anywhere in the slice the outgoing state no longer depends on the incoming one
(``P = 0``), else ``P`` is the product of the slice's transitions; ``Z`` is its outgoing
state from a zero incoming state. Locally, the incoming state is the initial state of the
slice's first segment when that segment continues a sequence from the device before: it is
given its own row (``N``) in the table of initial states, so the packed kernels restart it
from the carry like any other sequence. That offset arithmetic is the frontends' shared
:mod:`mingru_kernels._packed_sharding`.

Extra cost over :mod:`mingru_jax._sharding`, for per-sequence final states only: one
all-gather of ``N·D`` values (each sequence's final state lives on the device where it ends).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from mingru_jax._packing import final_states, segments
from mingru_jax._sharding import _all_gather, check_axis, sequence_parallel
from mingru_kernels._packed_sharding import slice_final_states, slice_sequences

__all__ = ["packed_call", "packed_sequence_parallel", "row_length"]


def row_length(steps: int, axis_name: str | None) -> int:
    """The packed row's length ``T`` that ``cu_seqlens`` must end at: this call's ``steps``,
    or, sharded over the bound mesh axis ``axis_name``, ``steps`` times the axis size."""
    return steps if axis_name is None else steps * check_axis(axis_name)


def packed_call(
    run: Callable[[jax.Array | None, jax.Array], jax.Array],
    a_product: Callable[[], jax.Array],
    cu_seqlens: jax.Array,
    *,
    steps: int,
    initial_state: jax.Array | None,
    axis_name: str | None,
    return_final_state: bool,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """A packed diagonal recurrence on one device, or sharded over ``axis_name`` when it is
    given (:func:`packed_sequence_parallel`): the one entry of ``linear_recurrence`` and the
    cells; the other arguments as in :func:`mingru._packed_sharding.packed_call`."""
    if axis_name is not None:
        return packed_sequence_parallel(run, a_product(), cu_seqlens, steps=steps,
                                        initial_state=initial_state, axis_name=axis_name,
                                        return_final_state=return_final_state)
    seg = segments(cu_seqlens, steps)
    h = run(initial_state, seg.seq_id)
    return (h, final_states(h, seg, initial_state)) if return_final_state else h


def packed_sequence_parallel(
    run: Callable[[jax.Array, jax.Array], jax.Array],
    a_product: jax.Array,
    cu_seqlens: jax.Array,
    *,
    steps: int,
    initial_state: jax.Array | None,
    axis_name: str,
    return_final_state: bool,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """This device's states of a packed recurrence sharded along T over ``axis_name`` (the
    bound mesh axis, slices in ``jax.lax.axis_index`` order); the other arguments as in
    :func:`mingru._packed_sharding.packed_sequence_parallel`, with ``cu_seqlens`` int32 and
    ending at ``n · T_local``. The final states ``(N, D)`` are the same on every device."""
    index = jax.lax.axis_index(axis_name)
    start = index * steps
    seq_id, opens = slice_sequences(jnp, cu_seqlens, start + jnp.arange(steps, dtype=jnp.int32))
    seq_id = seq_id.astype(jnp.int32)
    n_seq, width = cu_seqlens.shape[0] - 1, a_product.shape[-1]
    h0 = (jnp.zeros((n_seq, width), a_product.dtype) if initial_state is None
          else initial_state)

    def local_run(carry: jax.Array | None) -> tuple[jax.Array, jax.Array]:
        carry = jnp.zeros((1, width), a_product.dtype) if carry is None else carry
        h = run(jnp.concatenate([h0.astype(carry.dtype), carry]), seq_id)
        return h, h[:, -1]

    # A sequence opening in the slice cuts the incoming state off from the outgoing one.
    product = jnp.where(opens, jnp.zeros_like(a_product), a_product)
    h = sequence_parallel(local_run, product, initial_state=None, axis_name=axis_name,
                          return_final_state=False)
    if not return_final_state:
        return h
    mine = slice_final_states(jnp, h, cu_seqlens, start=start, initial_state=h0.astype(h.dtype),
                              first=index == 0)
    return h, _all_gather(mine, axis_name).sum(0)
