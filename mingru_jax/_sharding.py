"""Sequence parallelism for the JAX frontend (the twin of :mod:`mingru._sharding`): a sequence
split along T across the devices of a mesh axis, inside :func:`jax.shard_map`.

Each device holds a contiguous slice of T, the slices in ``jax.lax.axis_index(axis_name)``
order. A slice's effect on the state is one affine map ``h ↦ P·h + Z`` (``P`` the product of
its transitions — elementwise for the diagonal recurrences, a matrix product for block or
matrix states — and ``Z`` its zero-start final state), so each device computes its map, ONE
:func:`jax.lax.all_gather` exchanges the maps, every device composes them with an associative
scan over the gathered axis (``O(log n)`` depth in the number of devices ``n``) into the
state before each device, picks its own incoming state with its (traced) axis index, and runs
its slice from there. The whole sequence's final state is the composition of all ``n`` maps
applied to the initial state; it is the same on every device.

Everything is ordinary traced JAX, so it works under :func:`jax.jit` and :func:`jax.grad`
(the all-gather's transpose is a reduce-scatter, so gradients reach every device's
transitions and inputs). Inside ``shard_map`` with ``check_vma=True`` (the default) the maps
are gathered as *invariant* values, so the final state may be returned with ``out_specs=P()``.

Cost per call: the local recurrence twice (once from zero for ``Z``, once from the incoming
state) plus the product of the transitions, and one all-gather of ``|P| + |Z|`` values per
device (``2·B·D`` for the diagonal recurrences) forward and one reduce-scatter backward.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from mingru_jax._vma import varying_axes

__all__ = ["check_axis", "check_not_packed", "gather_last", "sequence_parallel"]

_HIGHEST = jax.lax.Precision.HIGHEST


def check_axis(axis_name: object, name: str = "axis_name") -> int:
    """The size of the mesh axis ``axis_name``, which must be bound here (a ``ValueError``
    naming ``name`` otherwise, a ``TypeError`` for a non-string)."""
    if not isinstance(axis_name, str):
        raise TypeError(f"{name} must be a str naming a mesh axis; got {type(axis_name).__name__}")
    try:
        return int(jax.lax.axis_size(axis_name))
    except NameError as exc:
        raise ValueError(
            f"{name}={axis_name!r} is not a bound mesh axis: call this inside jax.shard_map "
            f"over a mesh that has an axis named {axis_name!r} (or jax.vmap(..., "
            f"axis_name={axis_name!r}))"
        ) from exc


def check_not_packed(cu_seqlens: object, axis_name: str | None, what: str) -> None:
    """``NotImplementedError`` when ``what`` (a mixer) gets ``cu_seqlens`` and ``axis_name``
    together (the twin of :func:`mingru._sharding.check_not_packed`)."""
    if cu_seqlens is not None and axis_name is not None:
        raise NotImplementedError(
            f"{what}: cu_seqlens together with axis_name is not supported yet: pack the "
            "sequences of each device's slice without sharding, or shard one unpacked sequence")


def _all_gather(x: jax.Array, axis_name: str) -> jax.Array:
    """``(n, *x.shape)``: every device's ``x`` in axis-index order, the same on every device.

    Under ``shard_map`` with ``check_vma=True`` the result is typed invariant along the axis
    (so values computed from it alone may leave with ``out_specs=P()``); elsewhere (no vma
    tracking, or a ``vmap`` axis) the plain gather."""
    to = "invarying" if axis_name in varying_axes(x) else "varying"
    return jax.lax.all_gather(x, axis_name, to=to)


def gather_last(x: jax.Array, axis_name: str) -> jax.Array:
    """The last device's ``x`` (along ``axis_name``), on every device: e.g. the whole
    sequence's final state from each slice's last state."""
    return _all_gather(x, axis_name)[-1]


def _apply(P: jax.Array, Z: jax.Array, h: jax.Array, matrix: bool) -> jax.Array:
    return (jnp.matmul(P, h, precision=_HIGHEST) if matrix else P * h) + Z


def sequence_parallel(
    run: Callable[[jax.Array | None], tuple[jax.Array, jax.Array]],
    transition_product: jax.Array,
    initial_state: jax.Array | None,
    *,
    axis_name: str,
    return_final_state: bool,
    matrix: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """This device's outputs of a recurrence sharded along T over the mesh axis ``axis_name``.

    Args:
        run: ``run(h_in) -> (out, h_T)``, the local recurrence from the incoming state
            ``h_in`` (``None``: zeros); ``h_T`` is its final state, shaped like the state.
        transition_product: the product of this slice's transitions: shaped like the state
            (elementwise, ``matrix=False``), or ``(..., k, k)`` for a state ``(..., k, v)``
            (``matrix=True``; later transitions on the left).
        initial_state: the state before the whole sequence (the same on every device), or
            ``None`` for zeros.
        axis_name: the bound mesh axis; slices in ``jax.lax.axis_index`` order.
        return_final_state: also return the whole sequence's final state.
        matrix: the maps act by matrix product instead of elementwise.

    Returns:
        ``out`` of ``run`` from this device's incoming state, or ``(out, h_T)`` with the whole
        sequence's final state ``h_T`` (in the state's dtype, the same on every device).
    """
    check_axis(axis_name)
    _, zero_start = run(None)
    dtype = zero_start.dtype
    p_shape, z_shape = transition_product.shape, zero_start.shape
    flat = jnp.concatenate([transition_product.astype(dtype).reshape(-1), zero_start.reshape(-1)])
    gathered = _all_gather(flat, axis_name)  # ONE collective: (n, |P| + |Z|)
    n = gathered.shape[0]
    # Compose in at least float32 (half-precision maps would compound rounding over devices).
    work = jnp.promote_types(dtype, jnp.float32)
    gathered = gathered.astype(work)
    P = gathered[:, : transition_product.size].reshape(n, *p_shape)
    Z = gathered[:, transition_product.size :].reshape(n, *z_shape)

    def compose(earlier, later):  # the map "earlier, then later"
        (P1, Z1), (P2, Z2) = earlier, later
        if matrix:
            return jnp.matmul(P2, P1, precision=_HIGHEST), _apply(P2, Z2, Z1, matrix=True)
        return P2 * P1, P2 * Z1 + Z2

    P_pre, Z_pre = jax.lax.associative_scan(compose, (P, Z))  # maps of devices 0..r
    if initial_state is None:
        after = Z_pre  # (n, ...): the state after device r
        before = jnp.zeros((1, *z_shape), work)
    else:
        h0 = initial_state.astype(work)
        after = _apply(P_pre, Z_pre, h0[None], matrix=matrix)
        before = h0[None]
    states = jnp.concatenate([before, after])  # states[r]: the state before device r
    index = jax.lax.axis_index(axis_name)
    carry = jax.lax.dynamic_index_in_dim(states, index, 0, keepdims=False).astype(dtype)
    out, _ = run(carry)
    if not return_final_state:
        return out
    return out, states[-1].astype(dtype)
