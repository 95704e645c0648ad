"""The fused minGRU cells (the twin of :mod:`mingru.cells`): gates and recurrence in one op,
from the projection outputs.

A mixer computes ONE projection ``k`` holding its gates side by side and hands it to a cell,
which forms the gates and runs the recurrence without materialising any per-gate array (on a
GPU one Triton kernel each way through jax-triton; the eager twin is the reference). Each entry
validates here and dispatches through :mod:`mingru_jax.dispatch` (ops ``mingru_cell``,
``givens_cell`` and ``rotation_cell``); the MinGRU cells by their unchecked route
``_run_mingru_cell``, the mixers' way in.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mingru_jax import _validate
from mingru_jax._eager.givens_cell import givens_cell_eager
from mingru_jax._eager.mingru_cell import mingru_cell_eager, transitions
from mingru_jax._eager.rotation_cell import rotation_cell_eager
from mingru_jax._packed_sharding import packed_call, row_length
from mingru_jax._packing import check_cu_seqlens
from mingru_jax._sharding import check_axis, sequence_parallel
from mingru_jax.dispatch import call
from mingru_kernels._spec import check_cell_shapes, check_givens, check_packed_state, check_size

__all__ = ["givens_cell", "mingru_cell", "rotation_cell", "signed_mingru_cell"]


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
            ``(N, D)``, each sequence's last state (an empty sequence's is its initial state);
            with ``axis_name`` too, the offsets are the whole row's.
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
    k, initial_state, log_gamma, cu = _check_cell(
        k, n_gates=2, initial_state=initial_state, log_gamma=log_gamma, cu_seqlens=cu_seqlens,
        axis_name=axis_name)
    return _run_mingru_cell(k, initial_state=initial_state, log_gamma=log_gamma, signed=False,
                            coupled=False, return_final_state=bool(return_final_state),
                            cu_seqlens=cu, axis_name=axis_name)


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
        cu_seqlens: packed sequences, as in :func:`mingru_cell`: ``(N+1,)`` integer offsets,
            ``B = 1``, ``initial_state`` and ``h_T`` ``(N, D)``, one row per sequence.
        axis_name: a mesh axis bound by :func:`jax.shard_map` over which the sequence is
            split along T, as in :func:`mingru_cell`.

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
    k, initial_state, log_gamma, cu = _check_cell(
        k, n_gates=3, initial_state=initial_state, log_gamma=log_gamma, cu_seqlens=cu_seqlens,
        axis_name=axis_name)
    return _run_mingru_cell(k, initial_state=initial_state, log_gamma=log_gamma, signed=True,
                            coupled=bool(coupled), return_final_state=bool(return_final_state),
                            cu_seqlens=cu, axis_name=axis_name)


def givens_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    *,
    block_size: int,
    rounds: int,
) -> jax.Array:
    """GivensMinGRU's cell: ``h_t = γ_t G(θ_t) h_{t−1} + σ(k_z) ⊙ k_h`` per block of
    ``block_size`` channels, ``G(θ_t)`` the ``rounds`` brick-wall layers of Givens rotations
    of :class:`mingru_jax.GivensMinGRU` (op ``givens_cell``; the twin of
    :func:`mingru.cells.givens_cell`).

    Args:
        k: ``(B, T, W)`` pre-activations ``[k_θ | k_z | k_h]`` (one projection's output),
            ``W = D·rounds/2 + 2·D``: the ``n·rounds·block_size/2`` angles (block-major, then
            round, then plane; ``n = D / block_size``), then ``k_z`` and ``k_h`` (``D`` each).
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, n)`` log-decay ``log γ`` of each block's transition, or ``None``.
        block_size: ``k``, even, in ``{2, 4, 8, 16}`` on the kernels (any even size eager).
        rounds: ``R ≥ 1``.

    Returns:
        ``h`` ``(B, T, D)`` in ``k``'s dtype (float32 inside the kernel), differentiable in
        ``k``, ``initial_state`` and ``log_gamma``. On a GPU one Triton kernel each way reads
        ``k``'s columns in place and writes its whole gradient as one array.

    Example:
        >>> import jax
        >>> from mingru_jax.cells import givens_cell
        >>> D, R = 8, 3
        >>> k = jax.random.normal(jax.random.key(0), (2, 5, D * R // 2 + 2 * D))
        >>> givens_cell(k, block_size=4, rounds=R).shape
        (2, 5, 8)
    """
    k = _validate.floating(k, "k")
    check_size(rounds, "rounds")  # before it divides k's width
    D = 2 * k.shape[-1] // (rounds + 4) if k.ndim == 3 else 0
    if k.ndim != 3 or D < 1 or D * rounds // 2 + 2 * D != k.shape[-1] or D * rounds % 2:
        raise ValueError(f"givens_cell: k must be (B, T, D·rounds/2 + 2·D) for rounds={rounds}; "
                         f"got {tuple(k.shape)}")
    try:
        n = check_givens(D, block_size, rounds)
    except ValueError as err:
        raise ValueError(f"givens_cell: k's width {k.shape[-1]} gives D = {D} for rounds={rounds}; "
                         f"{err}") from None
    initial_state, log_gamma = _check_block_cell("givens_cell", k, initial_state=initial_state,
                                                 D=D, log_gamma=log_gamma, n=n)
    return call("givens_cell", givens_cell_eager, k, h0=initial_state, log_gamma=log_gamma,
                block_size=block_size, rounds=rounds)


def rotation_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    *,
    snap_k: jax.Array | None = None,
) -> jax.Array:
    """RotationMinGRU's cell: per 2×2 block ``j``, ``h_t = γ_t R(θ_t) diag(1, tanh(k_u))
    h_{t−1} + σ(k_z) ⊙ k_h`` with ``θ = k_θ`` snapped to a multiple of ``2π/K_j`` (half to
    even, straight-through gradient) (op ``rotation_cell``; the twin of
    :func:`mingru.cells.rotation_cell`).

    Args:
        k: ``(B, T, 6·n)`` pre-activations ``[k_θ | k_u | k_z | k_h]`` (one projection's
            output): ``n`` angles, ``n`` scale pre-activations, then ``k_z`` and ``k_h``
            (``D = 2·n`` each, block ``j`` on channels ``2j, 2j+1``).
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, n)`` log-decay ``log γ`` of each block's transition, or ``None``.
        snap_k: ``(n,)`` positive ``K_j`` per block (e.g. ``RotationMinGRU.snap_k``), or
            ``None`` for unsnapped angles. Its values are checked only outside a trace.

    Returns:
        ``h`` ``(B, T, D)`` in ``k``'s dtype (float32 inside the kernel), differentiable in
        ``k``, ``initial_state`` and ``log_gamma`` (not in ``snap_k``). On a GPU one Triton
        kernel each way reads ``k``'s columns in place and writes its whole gradient as one
        array.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax.cells import rotation_cell
        >>> k = jax.random.normal(jax.random.key(0), (2, 5, 6 * 4))
        >>> rotation_cell(k, snap_k=jnp.array([2., 3., 4., 6.])).shape
        (2, 5, 8)
    """
    k = _validate.floating(k, "k")
    if k.ndim != 3 or k.shape[-1] < 6 or k.shape[-1] % 6:
        raise ValueError(f"rotation_cell: k must be (B, T, 6·n) = [k_θ | k_u | k_z | k_h] with "
                         f"n ≥ 1 blocks; got {tuple(k.shape)}")
    n = k.shape[-1] // 6
    initial_state, log_gamma = _check_block_cell("rotation_cell", k, initial_state=initial_state,
                                                 D=2 * n, log_gamma=log_gamma, n=n)
    if snap_k is not None:
        snap_k = _validate.floating(snap_k, "snap_k")
        if tuple(snap_k.shape) != (n,):
            raise ValueError(f"rotation_cell: snap_k must be ({n},); got {tuple(snap_k.shape)}")
        # A value check needs concrete values: under a trace it is the caller's (RotationMinGRU
        # checks its table once, when it is built).
        if not isinstance(snap_k, jax.core.Tracer) and not (np.asarray(snap_k) > 0).all():
            raise ValueError("rotation_cell: snap_k must be positive (K_j of each block)")
    return call("rotation_cell", rotation_cell_eager, k, h0=initial_state, log_gamma=log_gamma,
                snap_k=snap_k)


def _check_block_cell(op, k, *, initial_state, D, log_gamma, n):
    """The block cells' common checks: at least one step, ``initial_state (B, D)`` and
    ``log_gamma (B, T, n)`` (one per block) when given, and one dtype; returns them as
    arrays."""
    _validate.nonempty_time(k, "k")
    B, T = k.shape[:2]
    named = [("k", k)]
    checked = []
    for name, x, shape in (("initial_state", initial_state, (B, D)),
                           ("log_gamma", log_gamma, (B, T, n))):
        if x is not None:
            x = _validate.floating(x, name)
            if tuple(x.shape) != shape:
                raise ValueError(f"{op}: {name} must be {shape}; got {tuple(x.shape)}")
            named.append((name, x))
        checked.append(x)
    _validate.same_dtype(named)
    return tuple(checked)


def _check_cell(k: object, *, n_gates: int, initial_state: object, log_gamma: object,
                cu_seqlens: object, axis_name: str | None):
    """The checks of :func:`mingru_cell` (``n_gates=2``) and :func:`signed_mingru_cell` (3):
    ``(k, initial_state, log_gamma, cu_seqlens)`` as checked arrays (offsets ``None`` when not
    packed)."""
    k = _validate.floating(k, "k")
    named = [("k", k)]
    if initial_state is not None:
        initial_state = _validate.floating(initial_state, "initial_state")
        named.append(("initial_state", initial_state))
    if log_gamma is not None:
        log_gamma = _validate.floating(log_gamma, "log_gamma")
        named.append(("log_gamma", log_gamma))
    cu = None
    if cu_seqlens is not None:
        B, T = k.shape[:2] if k.ndim == 3 else (1, 0)
        D = check_cell_shapes(k, n_gates, None, log_gamma=log_gamma)
        cu = check_cu_seqlens(cu_seqlens, B, row_length(T, axis_name))
        check_packed_state(initial_state, cu.shape[0] - 1, (D,), name="initial_state")
        _validate.same_dtype(named)
        return k, initial_state, log_gamma, cu
    check_cell_shapes(k, n_gates, initial_state, log_gamma=log_gamma)
    _validate.same_dtype(named)
    if axis_name is not None:
        check_axis(axis_name)
    return k, initial_state, log_gamma, cu


def _run_mingru_cell(k: jax.Array, *, initial_state: jax.Array | None, log_gamma: jax.Array | None,
                     signed: bool, coupled: bool, return_final_state: bool,
                     cu_seqlens: jax.Array | None = None, axis_name: str | None = None
                     ) -> jax.Array | tuple[jax.Array, jax.Array]:
    """:func:`mingru_cell` / :func:`signed_mingru_cell` on arguments already checked (by the
    public entry, or by a mixer that built them): no checks here. ``cu_seqlens`` are checked
    offsets."""
    if cu_seqlens is not None:
        return packed_call(
            lambda table, seq_id: call(
                "mingru_cell", mingru_cell_eager, k, initial_state=table, log_gamma=log_gamma,
                signed=signed, coupled=coupled, return_final_state=False, seq_id=seq_id),
            lambda: _transition_product(k, log_gamma, signed=signed, coupled=coupled),
            cu_seqlens, steps=k.shape[1], initial_state=initial_state, axis_name=axis_name,
            return_final_state=return_final_state)
    if axis_name is not None:
        return sequence_parallel(
            lambda h_in: call(
                "mingru_cell", mingru_cell_eager, k, initial_state=h_in, log_gamma=log_gamma,
                signed=signed, coupled=coupled, return_final_state=True),
            _transition_product(k, log_gamma, signed=signed, coupled=coupled),
            initial_state=initial_state, axis_name=axis_name,
            return_final_state=return_final_state)
    return call("mingru_cell", mingru_cell_eager, k, initial_state=initial_state,
                log_gamma=log_gamma, signed=signed, coupled=coupled,
                return_final_state=return_final_state)


def _transition_product(k, log_gamma, *, signed, coupled):
    """``(B, D)`` product over T of the cell's transitions (at least float32 inside; a slice's
    map for sequence parallelism)."""
    work = jnp.promote_types(k.dtype, jnp.float32)
    lg = None if log_gamma is None else log_gamma.astype(work)
    a = transitions(k.astype(work), lg, signed, coupled=coupled)
    product = jnp.prod(a, axis=1) if signed else jnp.exp(jnp.sum(a, axis=1))  # MinGRU: log a
    return product.astype(k.dtype)
