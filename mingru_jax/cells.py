"""The fused minGRU cells (the twin of :mod:`mingru.cells`): gates and recurrence in one op,
from the projection outputs.

A mixer computes ONE projection ``k`` holding its gates side by side and hands it to a cell,
which forms the gates and runs the recurrence without materialising any per-gate array (on a
GPU one Triton kernel each way through jax-triton; the eager twin is the reference). Each entry
validates here and dispatches through :mod:`mingru_jax.dispatch` (op ``mingru_cell``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax import _validate
from mingru_jax._eager.mingru_cell import mingru_cell_eager, transitions
from mingru_jax._packing import check_cu_seqlens, final_states, segments
from mingru_jax._sharding import check_axis, sequence_parallel
from mingru_jax.dispatch import call
from mingru_kernels._spec import check_cell_shapes, check_packed_state

__all__ = ["mingru_cell", "signed_mingru_cell"]


def mingru_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    return_final_state: bool = False,
    *,
    cu_seqlens: jax.Array | None = None,
    axis_name: str | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The MinGRU cell: ``h_t = γ_t (1 − z_t) h_{t−1} + z_t g(k_h)`` with ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 2·D)`` pre-activations ``[k_z | k_h]`` (one projection's output).
        initial_state: ``(B, D)`` non-negative ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay ``log γ ≤ 0`` of the transition.
        return_final_state: also return ``h_T``.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``; as in :func:`mingru_jax.linear_recurrence`): each restarts from its
            own ``initial_state`` row (``(N, D)``; zeros when ``None``) and ``h_T`` is
            ``(N, D)``, each sequence's last state (an empty sequence's is its initial state).
            Not combinable with ``axis_name`` yet.
        axis_name: a mesh axis bound by :func:`jax.shard_map` over which the sequence is
            split along T (as in :func:`mingru_jax.linear_recurrence`): ``k`` and
            ``log_gamma`` are this device's slice ``(B, T_local, ·)`` (slices in
            ``jax.lax.axis_index`` order), ``initial_state`` the state before the whole
            sequence (the same on every device), ``h`` this slice's states and ``h_T`` the
            whole sequence's final state.

    Returns:
        ``h`` ``(B, T, D)``, positive, or ``(h, h_T)``; in ``k``'s dtype, differentiable in
        ``k``, ``initial_state`` and ``log_gamma``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax.cells import mingru_cell
        >>> h = mingru_cell(jax.random.normal(jax.random.key(0), (2, 7, 8)), jnp.full((2, 4), 0.5))
        >>> h.shape, bool((h > 0).all())
        ((2, 7, 4), True)
    """
    return _cell(k, 2, initial_state, log_gamma, False, False, return_final_state, axis_name,
                 cu_seqlens)


def signed_mingru_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    coupled: bool = False,
    return_final_state: bool = False,
    *,
    cu_seqlens: jax.Array | None = None,
    axis_name: str | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The signed cell: ``h_t = γ_t tanh(k_s) [(1 − z_t)] h_{t−1} + z_t k_h``, ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 3·D)`` pre-activations ``[k_z | k_s | k_h]``.
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay of the transition.
        coupled: multiply the transition by ``1 − z``.
        return_final_state: also return ``h_T``.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``; as in :func:`mingru_jax.linear_recurrence`): each restarts from its
            own ``initial_state`` row (``(N, D)``; zeros when ``None``) and ``h_T`` is
            ``(N, D)``, each sequence's last state (an empty sequence's is its initial state).
            Not combinable with ``axis_name`` yet.
        axis_name: a mesh axis bound by :func:`jax.shard_map` over which the sequence is
            split along T (as in :func:`mingru_jax.linear_recurrence`): ``k`` and
            ``log_gamma`` are this device's slice ``(B, T_local, ·)`` (slices in
            ``jax.lax.axis_index`` order), ``initial_state`` the state before the whole
            sequence (the same on every device), ``h`` this slice's states and ``h_T`` the
            whole sequence's final state.

    Returns:
        ``h`` ``(B, T, D)`` or ``(h, h_T)``, in ``k``'s dtype; differentiable in ``k``,
        ``initial_state`` and ``log_gamma``.

    Example:
        >>> import jax
        >>> from mingru_jax.cells import signed_mingru_cell
        >>> k = jax.random.normal(jax.random.key(0), (2, 7, 12))
        >>> h, h_T = signed_mingru_cell(k, return_final_state=True)
        >>> h.shape, h_T.shape
        ((2, 7, 4), (2, 4))
    """
    return _cell(k, 3, initial_state, log_gamma, True, bool(coupled), return_final_state,
                 axis_name, cu_seqlens)


def _cell(k, n_gates, initial_state, log_gamma, signed, coupled, return_final_state,
          axis_name=None, cu_seqlens=None):
    k = _validate.floating(k, "k")
    named = [("k", k)]
    if initial_state is not None:
        initial_state = _validate.floating(initial_state, "initial_state")
        named.append(("initial_state", initial_state))
    if log_gamma is not None:
        log_gamma = _validate.floating(log_gamma, "log_gamma")
        named.append(("log_gamma", log_gamma))
    if cu_seqlens is not None:
        B, T = k.shape[:2] if k.ndim == 3 else (1, 0)
        D = check_cell_shapes(k, n_gates, None, log_gamma)
        cu = check_cu_seqlens(cu_seqlens, B, T)
        check_packed_state(initial_state, cu.shape[0] - 1, (D,), "initial_state")
        _validate.same_dtype(named)
        if axis_name is not None:
            raise NotImplementedError(
                "cu_seqlens together with axis_name is not supported yet: pack the sequences "
                "of each device's slice without sharding, or shard one unpacked sequence")
        seg = segments(cu, T)
        h = call("mingru_cell", mingru_cell_eager, k, initial_state, log_gamma, signed, coupled,
                 False, seg.seq_id)
        return (h, final_states(h, seg, initial_state)) if return_final_state else h
    check_cell_shapes(k, n_gates, initial_state, log_gamma)
    _validate.same_dtype(named)
    if axis_name is not None:
        check_axis(axis_name)
        return sequence_parallel(
            lambda h_in: call("mingru_cell", mingru_cell_eager, k, h_in, log_gamma, signed,
                              coupled, True),
            _transition_product(k, log_gamma, signed, coupled), initial_state, axis_name,
            bool(return_final_state))
    return call("mingru_cell", mingru_cell_eager, k, initial_state, log_gamma, signed, coupled,
                bool(return_final_state))


def _transition_product(k, log_gamma, signed, coupled):
    """``(B, D)`` product over T of the cell's transitions (float32 inside; a slice's map for
    sequence parallelism)."""
    lg = None if log_gamma is None else log_gamma.astype(jnp.float32)
    a = transitions(k.astype(jnp.float32), lg, signed, coupled)
    product = jnp.prod(a, axis=1) if signed else jnp.exp(jnp.sum(a, axis=1))  # MinGRU: log a
    return product.astype(k.dtype)
