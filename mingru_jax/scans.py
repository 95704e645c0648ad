"""Every op's single entry (the twin of :mod:`mingru.scans`): the four public scan primitives
and the two private ops behind the block-rotation and delta mixers (``_givens_recurrence``,
``_delta_rule``), and :func:`check_cu_seqlens`, the opt-in check of packed offsets under
``jax.jit``. Each validates its inputs (here, and only here), then takes the op's unchecked
route ``_run_<op>`` (which the mixers call with what they built and checked themselves) to the
dispatch seam, which runs the eager twin (``mingru_jax._eager.<op>``) or a jax-triton
launcher (``mingru_jax._launch.<op>``). All are jit-, grad- and vmap-compatible; the backend is
chosen at trace time (see :mod:`mingru_jax.dispatch`).

All solve an affine recurrence over axis 1 (time). The "zero-start solution" ``Z`` is the
result for ``h_0 = 0``; with the running product ``P_t`` the full solution is
``h_t = P_t h_0 + Z_t``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.experimental import checkify

from mingru_jax import _packing, _validate
from mingru_jax._eager.delta_rule import delta_rule_eager
from mingru_jax._eager.givens_recurrence import givens_recurrence_eager, givens_step
from mingru_jax._eager.linear_recurrence import linear_recurrence_eager
from mingru_jax._eager.linear_scan import linear_scan_eager
from mingru_jax._eager.matrix_affine_scan import matrix_affine_scan_eager
from mingru_jax._eager.parallel_scan_log import parallel_scan_log_eager
from mingru_jax._packed_sharding import packed_call, row_length
from mingru_jax._packing import restart_log, segments
from mingru_jax._sharding import check_axis, sequence_parallel
from mingru_jax.dispatch import call
from mingru_kernels._spec import (
    check_delta_rule_shapes,
    check_flag,
    check_packed_state,
    positive_int,
)

__all__ = [
    "check_cu_seqlens", "linear_recurrence", "linear_scan", "matrix_affine_scan", "matrix_scan",
    "parallel_scan_log",
]


def parallel_scan_log(
    log_coeffs: jax.Array, log_values: jax.Array, *, cu_seqlens: jax.Array | None = None
) -> jax.Array:
    """Solve ``h_t = a_t h_{t-1} + b_t`` for positive ``a, b`` in log space (Heinsen 2023).

    Args:
        log_coeffs: ``(B, T, D)``, ``log a_t``.
        log_values: ``(B, T+1, D)``; slot 0 is ``log h_0`` (``-inf`` for ``h_0 = 0``),
            slots ``1..T`` are ``log b_t``. With ``cu_seqlens``: ``(1, T+N, D)``, every
            sequence's own layout one after the other — its slot ``log h_0`` followed by its
            ``log b`` values (the per-sequence inputs concatenated).
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``); each restarts from its own ``h_0``. Values are checked when concrete
            (not under :func:`jax.jit`, where only the shape and dtype are).

    Returns:
        ``h`` ``(B, T, D)``, positive, in the input dtype. Stable for long ``T`` (products
        that underflow never produce NaN; ``T = 20000`` in float32 keeps full accuracy).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax import parallel_scan_log
        >>> h = parallel_scan_log(-jnp.ones((2, 5, 3)), jnp.zeros((2, 6, 3)))
        >>> h.shape
        (2, 5, 3)
    """
    log_coeffs = _validate.float_array(log_coeffs, "log_coeffs", 3, shape="(B, T, D)")
    log_values = _validate.float_array(log_values, "log_values", 3, shape="(B, T+1, D)")
    _validate.same_dtype([("log_coeffs", log_coeffs), ("log_values", log_values)])
    _validate.nonempty_time(log_coeffs, "log_coeffs")
    B, T, D = log_coeffs.shape
    if cu_seqlens is not None:
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T)
        N = cu.shape[0] - 1
        _validate.shape_is(log_values, "log_values", (1, T + N, D),
                           shape="(1, T+N, D) with cu_seqlens")
        seg = segments(cu, T)
        # Sequence n's slot log h_0 sits at cu[n] + n; its step t at t + n + 1.
        log_h0 = log_values[0, cu[:-1] + jnp.arange(N, dtype=jnp.int32)]
        log_b = log_values[:, jnp.arange(T, dtype=jnp.int32) + seg.seq_id + 1]
        log_a, log_b = restart_log(log_coeffs, log_b, log_h0, seg=seg)
        log_values = jnp.concatenate([jnp.full_like(log_b[:, :1], -jnp.inf), log_b], axis=1)
        return call("parallel_scan_log", parallel_scan_log_eager, log_a, log_values)
    _validate.shape_is(log_values, "log_values", (B, T + 1, D), shape="(B, T+1, D)")
    return call("parallel_scan_log", parallel_scan_log_eager, log_coeffs, log_values)


def linear_scan(
    a: jax.Array, b: jax.Array, *, cu_seqlens: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Solve ``h_t = a_t h_{t-1} + b_t`` elementwise; ``a`` may be negative.

    Args:
        a: ``(B, T, D)`` transitions.
        b: ``(B, T, D)`` inputs.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets of ``N`` sequences laid end
            to end in one row (``B = 1``): ``P`` and ``Z`` restart at every sequence's first
            step (``P_t`` is the product since it, ``Z`` its zero-start solution). Runs as one
            packed :func:`linear_recurrence` over ``2·D`` channels.

    Returns:
        ``(P, Z)``, both ``(B, T, D)``: ``P_t = a_t ⋯ a_1`` and the zero-start solution, so
        ``h_t = P_t h_0 + Z_t``.

    Example:
        >>> import jax.numpy as jnp
        >>> from mingru_jax import linear_scan
        >>> P, Z = linear_scan(jnp.full((2, 7, 4), -0.5), jnp.ones((2, 7, 4)))
        >>> h = P * jnp.ones((2, 1, 4)) + Z   # h_0 = 1
    """
    a = _validate.float_array(a, "a", 3, shape="(B, T, D)")
    b = _validate.float_array(b, "b", 3, shape="(B, T, D)")
    _validate.same_dtype([("a", a), ("b", b)])
    _validate.nonempty_time(a, "a")
    _validate.shape_is(b, "b", a.shape, shape="(B, T, D) like a")
    if cu_seqlens is not None:
        B, T, D = a.shape
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T)
        N = cu.shape[0] - 1
        # P is the state of the same restarting recurrence with input 0 started from 1.
        start = jnp.concatenate([jnp.ones((N, D), a.dtype), jnp.zeros((N, D), a.dtype)], -1)
        h = _run_linear_recurrence(
            jnp.concatenate([a, a], -1), jnp.concatenate([jnp.zeros_like(b), b], -1),
            initial_state=start, return_final_state=False, cu_seqlens=cu)
        return h[..., :D], h[..., D:]
    return call("linear_scan", linear_scan_eager, a, b)


def linear_recurrence(
    a: jax.Array,
    b: jax.Array,
    initial_state: jax.Array | None = None,
    return_final_state: bool = False,
    *,
    cu_seqlens: jax.Array | None = None,
    axis_name: str | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The states of ``h_t = a_t h_{t-1} + b_t`` (``a`` may be negative), from an initial state.

    The states-only form of :func:`linear_scan`: it reads ``a, b`` once and writes ``h`` once
    (no running product), and takes ``h_0`` and returns ``h_T`` so long sequences can be
    processed in chunks (streaming, truncated BPTT): chaining calls through the final state
    equals one call on the concatenation, outputs and gradients.

    Args:
        a: ``(B, T, D)`` transitions.
        b: ``(B, T, D)`` inputs.
        initial_state: ``(B, D)`` state ``h_0`` before the first step; zeros when ``None``.
        return_final_state: also return ``h_T``.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T; FlashAttention's convention) of ``N`` sequences laid
            end to end in one row (``B = 1``). Each sequence starts from its own state:
            ``initial_state`` is then ``(N, D)`` and ``h_T`` is ``(N, D)``, each sequence's
            last state (an empty sequence's is its initial state, zeros when ``None``). The
            offsets' values are checked when concrete (a traced ``cu_seqlens`` under
            :func:`jax.jit` gets its shape and dtype checked only). With ``axis_name`` too,
            the offsets are those of the whole row (the same on every device, ending at
            ``n · T_local`` for an axis of ``n`` devices) and sequences may straddle devices
            (:mod:`mingru_jax._packed_sharding`).
        axis_name: a mesh axis bound by :func:`jax.shard_map` over which the sequence is
            split along T (the twin of ``sequence_group=`` in :mod:`mingru`): each device
            passes its contiguous slice ``a, b (B, T_local, D)`` (slices in
            ``jax.lax.axis_index(axis_name)`` order, one length on every device) and gets
            that slice's states ``(B, T_local, D)``; ``initial_state`` is the state before
            the whole sequence (the same on every device) and ``h_T`` the whole sequence's
            (the same on every device). One all-gather of ``2·B·D`` values per device; see
            :mod:`mingru_jax._sharding`. An axis that is not bound is a ``ValueError``.

    Returns:
        ``h`` ``(B, T, D)`` (the states ``h_1 … h_T``), or ``(h, h_T)`` with ``h_T`` ``(B, D)``
        (``(N, D)`` when packed); in the input dtype, differentiable in ``a``, ``b`` and
        ``initial_state``.

    Raises:
        ValueError: ``initial_state`` holds NaN (checked when it is concrete, one small
            device read; not under ``jax.jit``), or a shape or offset is wrong.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax import linear_recurrence
        >>> a = jnp.tanh(jax.random.normal(jax.random.key(0), (2, 7, 4)))
        >>> b = jax.random.normal(jax.random.key(1), (2, 7, 4))
        >>> h, h_T = linear_recurrence(a[:, :4], b[:, :4], return_final_state=True)
        >>> h2 = linear_recurrence(a[:, 4:], b[:, 4:], initial_state=h_T)  # continue
        >>> bool(jnp.allclose(jnp.concatenate([h, h2], 1), linear_recurrence(a, b), atol=1e-6))
        True
    """
    _validate.check_states([("initial_state", initial_state)])
    a, b, initial_state, cu = _check_linear_recurrence(
        a, b, initial_state=initial_state, cu_seqlens=cu_seqlens, axis_name=axis_name)
    return _run_linear_recurrence(a, b, initial_state=initial_state,
                                  return_final_state=bool(return_final_state), cu_seqlens=cu,
                                  axis_name=axis_name)


def _check_linear_recurrence(a: object, b: object, *, initial_state: object,
                             cu_seqlens: object, axis_name: str | None):
    """The shape and dtype checks of :func:`linear_recurrence`: ``(a, b, initial_state,
    cu_seqlens)`` as checked arrays (offsets ``None`` when not packed)."""
    a = _validate.float_array(a, "a", 3, shape="(B, T, D)")
    b = _validate.float_array(b, "b", 3, shape="(B, T, D)")
    named = [("a", a), ("b", b)]
    _validate.nonempty_time(a, "a")
    _validate.shape_is(b, "b", a.shape, shape="(B, T, D) like a")
    if cu_seqlens is not None:
        B, T, D = a.shape
        cu = _packing.check_cu_seqlens(cu_seqlens, B, row_length(T, axis_name))
        if initial_state is not None:
            initial_state = _validate.float_array(initial_state, "initial_state", 2, shape="(N, D)")
            check_packed_state(initial_state, cu.shape[0] - 1, (D,), name="initial_state")
            named.append(("initial_state", initial_state))
        _validate.same_dtype(named)
        return a, b, initial_state, cu
    if initial_state is not None:
        initial_state = _validate.float_array(initial_state, "initial_state", 2, shape="(B, D)")
        _validate.shape_is(initial_state, "initial_state", (a.shape[0], a.shape[2]), shape="(B, D)")
        named.append(("initial_state", initial_state))
    _validate.same_dtype(named)
    if axis_name is not None:
        check_axis(axis_name)
    return a, b, initial_state, None


def _run_linear_recurrence(a: jax.Array, b: jax.Array, *, initial_state: jax.Array | None,
                           return_final_state: bool, cu_seqlens: jax.Array | None = None,
                           axis_name: str | None = None) -> jax.Array | tuple[jax.Array, ...]:
    """:func:`linear_recurrence` on arguments already checked (``cu_seqlens``: checked
    offsets): no checks here."""
    if cu_seqlens is not None:
        return packed_call(
            lambda table, seq_id: call(
                "linear_recurrence", linear_recurrence_eager, a, b, initial_state=table,
                return_final_state=False, seq_id=seq_id),
            lambda: _transition_product(a), cu_seqlens, steps=a.shape[1],
            initial_state=initial_state, axis_name=axis_name,
            return_final_state=return_final_state)
    if axis_name is not None:
        return sequence_parallel(
            lambda h_in: call("linear_recurrence", linear_recurrence_eager, a, b,
                              initial_state=h_in, return_final_state=True),
            _transition_product(a), initial_state=initial_state, axis_name=axis_name,
            return_final_state=return_final_state)
    return call("linear_recurrence", linear_recurrence_eager, a, b, initial_state=initial_state,
                return_final_state=return_final_state)


def _transition_product(a: jax.Array) -> jax.Array:
    """``(B, D)`` product over T of the transitions ``a (B, T, D)``, in at least float32
    inside (a slice's map for sequence parallelism)."""
    return jnp.prod(a.astype(jnp.promote_types(a.dtype, jnp.float32)), axis=1).astype(a.dtype)


def matrix_affine_scan(
    A: jax.Array, Bm: jax.Array, *, cu_seqlens: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Solve ``H_t = A_t H_{t-1} + B_t`` for ``n`` independent ``k×k`` blocks, ``k×v`` states.

    Args:
        A: ``(B, T, n, k, k)`` transitions.
        Bm: ``(B, T, n, k, v)`` inputs (``v = 1`` is a vector state).
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets of ``N`` sequences laid end
            to end in one row (``B = 1``): ``P`` and ``Z`` restart at every sequence's first
            step. Runs as one scan whose first step of each sequence has transition 0 and
            input ``[A_t | B_t]`` (so the first ``k`` state columns are ``P``).

    Returns:
        ``(P (B, T, n, k, k), Z (B, T, n, k, v))`` with ``P_t = A_t ⋯ A_1`` and
        ``H_t = P_t H_0 + Z_t``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax import matrix_affine_scan
        >>> A = 0.5 * jax.random.normal(jax.random.key(0), (1, 9, 3, 4, 4))
        >>> P, Z = matrix_affine_scan(A, jnp.ones((1, 9, 3, 4, 2)))
        >>> Z.shape
        (1, 9, 3, 4, 2)
    """
    A = _validate.float_array(A, "A", 5, shape="(B, T, n, k, k)")
    Bm = _validate.float_array(Bm, "Bm", 5, shape="(B, T, n, k, v)")
    _validate.same_dtype([("A", A), ("Bm", Bm)])
    _validate.nonempty_time(A, "A")
    B, T, n, k, k2 = A.shape
    if k != k2 or k < 1:
        raise ValueError(f"A must have square blocks (B, T, n, k, k); got {tuple(A.shape)}")
    if tuple(Bm.shape[:4]) != (B, T, n, k) or Bm.shape[4] < 1:
        raise ValueError(
            f"Bm must have shape (B, T, n, k, v) = ({B}, {T}, {n}, {k}, v); got {tuple(Bm.shape)}"
        )
    cu = None if cu_seqlens is None else _packing.check_cu_seqlens(cu_seqlens, B, T)
    return _run_matrix_affine_scan(A, Bm, cu_seqlens=cu)


def _run_matrix_affine_scan(A: jax.Array, Bm: jax.Array, *, cu_seqlens: jax.Array | None
                            ) -> tuple[jax.Array, jax.Array]:
    """:func:`matrix_affine_scan` on arguments already checked (``cu_seqlens``: checked
    offsets): no checks here."""
    if cu_seqlens is not None:
        T, k = A.shape[1], A.shape[3]
        seg = segments(cu_seqlens, T)
        starts = seg.starts.reshape(1, T, 1, 1, 1)
        zero = jnp.zeros_like(A)
        both = jnp.concatenate([jnp.where(starts, A, zero), Bm], axis=-1)
        _, Z = call("matrix_affine_scan", matrix_affine_scan_eager, jnp.where(starts, zero, A),
                    both)
        return Z[..., :k], Z[..., k:]
    return call("matrix_affine_scan", matrix_affine_scan_eager, A, Bm)


def matrix_scan(
    M: jax.Array, b: jax.Array, *, cu_seqlens: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Solve ``h_t = M_t h_{t-1} + b_t`` for ``n`` independent 2×2 blocks (column vectors).

    Equals :func:`matrix_affine_scan` with ``k = 2, v = 1``.

    Args:
        M: ``(B, T, n, 2, 2)`` transitions; products compose as ``M_t ⋯ M_1``.
        b: ``(B, T, n, 2)`` inputs.
        cu_seqlens: packed sequences (``(N+1,)`` offsets, ``B = 1``), as in
            :func:`matrix_affine_scan`: ``P`` and ``Z`` restart at every sequence's first step.

    Returns:
        ``(P (B, T, n, 2, 2), Z (B, T, n, 2))``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax import matrix_scan
        >>> M = 0.7 * jax.random.normal(jax.random.key(0), (2, 5, 3, 2, 2))
        >>> P, Z = matrix_scan(M, jnp.ones((2, 5, 3, 2)))
        >>> P.shape, Z.shape
        ((2, 5, 3, 2, 2), (2, 5, 3, 2))
    """
    M = _validate.float_array(M, "M", 5, shape="(B, T, n, 2, 2)")
    b = _validate.float_array(b, "b", 4, shape="(B, T, n, 2)")
    _validate.same_dtype([("M", M), ("b", b)])
    _validate.nonempty_time(M, "M")
    if tuple(M.shape[3:]) != (2, 2):
        raise ValueError(f"M must have shape (B, T, n, 2, 2); got {tuple(M.shape)}")
    _validate.shape_is(b, "b", M.shape[:4], shape="(B, T, n, 2)")
    B, T = M.shape[:2]
    cu = None if cu_seqlens is None else _packing.check_cu_seqlens(cu_seqlens, B, T)
    P, Z = _run_matrix_affine_scan(M, b[..., None], cu_seqlens=cu)
    return P, Z[..., 0]


def _givens_recurrence(
    theta: jax.Array,
    b: jax.Array,
    h0: jax.Array,
    scale: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    *,
    cu_seqlens: jax.Array | None = None,
) -> jax.Array:
    """The fused rotation/Givens recurrence behind RotationMinGRU and GivensMinGRU (private op).

    ``M_t = γ_t · G_{R-1} ⋯ G_0 · diag(scale_t)``, ``h_t = M_t h_{t-1} + b_t``. Shapes:
    ``theta (B, T, n, R, k/2)``, ``b (B, T, n, k)``, ``h0 (B, n, k)``, ``scale (B, T, n, k)``
    or ``None``, ``log_gamma (B, T, n)`` or ``None``, all one float dtype; returns
    ``h (B, T, n, k)``. See ``mingru_jax._eager.givens_recurrence``.

    With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed in one row,
    ``B = 1``) ``h0`` is ``(N, n, k)``, one start per sequence, and every sequence restarts
    from its own: a transform of the inputs, no packed kernel — at each sequence's first step
    the transition is zeroed (``scale' = 0``) and the input takes ``M_t h0[n]`` (one
    :func:`~mingru_jax._eager.givens_recurrence.givens_step` per step, batched).
    """
    theta = _validate.float_array(theta, "theta", 5, shape="(B, T, n, R, k/2)")
    b = _validate.float_array(b, "b", 4, shape="(B, T, n, k)")
    h0 = _validate.float_array(h0, "h0", 3, shape="(B, n, k)")
    named = [("theta", theta), ("b", b), ("h0", h0)]
    _validate.nonempty_time(theta, "theta")
    B, T, n, R, half = theta.shape
    if R < 1 or half < 1:
        raise ValueError(
            f"theta must have shape (B, T, n, R, k/2) with R ≥ 1, k ≥ 2; got {tuple(theta.shape)}"
        )
    k = 2 * half
    _validate.shape_is(b, "b", (B, T, n, k), shape="(B, T, n, k)")
    cu = None
    if cu_seqlens is not None:
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T)
        check_packed_state(h0, cu.shape[0] - 1, (n, k), name="h0")
    else:
        _validate.shape_is(h0, "h0", (B, n, k), shape="(B, n, k)")
    if scale is not None:
        scale = _validate.float_array(scale, "scale", 4, shape="(B, T, n, k)")
        _validate.shape_is(scale, "scale", (B, T, n, k), shape="(B, T, n, k)")
        named.append(("scale", scale))
    if log_gamma is not None:
        log_gamma = _validate.float_array(log_gamma, "log_gamma", 3, shape="(B, T, n)")
        _validate.shape_is(log_gamma, "log_gamma", (B, T, n), shape="(B, T, n)")
        named.append(("log_gamma", log_gamma))
    _validate.same_dtype(named)
    return _run_givens_recurrence(theta, b, h0=h0, scale=scale, log_gamma=log_gamma,
                                  cu_seqlens=cu)


def _run_givens_recurrence(theta: jax.Array, b: jax.Array, *, h0: jax.Array,
                           scale: jax.Array | None, log_gamma: jax.Array | None,
                           cu_seqlens: jax.Array | None = None) -> jax.Array:
    """:func:`_givens_recurrence` on arguments already checked (by it, or by a mixer that
    built them; ``cu_seqlens``: checked offsets): no checks here."""
    if cu_seqlens is not None:
        B, T, n, k = b.shape
        seg = segments(cu_seqlens, T)
        starts = seg.starts.reshape(1, T, 1, 1)
        # M_t h0[seq_t] at every step (the steps as a batch of single tokens); kept at starts.
        entry = givens_step(h0[seg.seq_id], theta[0], jnp.zeros_like(b[0]),
                            scale=None if scale is None else scale[0],
                            log_gamma=None if log_gamma is None else log_gamma[0])
        b = jnp.where(starts, b + entry[None], b)
        kept = jnp.ones_like(b) if scale is None else scale
        scale = jnp.where(starts, jnp.zeros_like(kept), kept)  # transition 0 at a start
        h0 = jnp.zeros((B, n, k), b.dtype)
    return call("givens_recurrence", givens_recurrence_eager, theta, b, h0=h0, scale=scale,
                log_gamma=log_gamma)


def _delta_rule(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    beta: jax.Array,
    log_gamma: jax.Array | None = None,
    h0: jax.Array | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: jax.Array | None = None,
    allow_tf32: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """The delta rule behind DeltaMinGRU (private op); returns ``(o, h_T)``.

    Shapes: ``q (B, T, H, d_k)``, ``k (B, T, nh, H, d_k)``, ``v (B, T, nh, H, d_v)``,
    ``beta (B, T, nh, H)``, ``log_gamma (B, T, H)`` or ``None``, ``h0 (B, H, d_k, d_v)`` or
    ``None``; ``o (B, T, H, d_v)``, ``h_T (B, H, d_k, d_v)``. See
    ``mingru_jax._eager.delta_rule``.

    Packed sequences (``cu_seqlens``: ``(N+1,)`` integer offsets starting at 0,
    non-decreasing, ending at T, of ``N`` sequences laid end to end in one row, ``B = 1``):
    the state restarts at the first token of every sequence from its own ``h0[n]``;
    ``h0`` is then ``(N, H, d_k, d_v)`` or ``None`` (zeros), ``o (1, T, H, d_v)`` and
    ``h_T (N, H, d_k, d_v)``, each sequence's final state (an empty sequence's is its
    initial state). Equal to running each sequence alone.

    ``allow_tf32``: let the Triton kernels multiply float32 inputs in TF32 on the tensor
    cores (faster; products to about 1e-3 relative instead of float32's). Off by default:
    products keep float32 accuracy (CUDA-core FMAs, or at 64-wide heads three TF32 products
    per product, "3xTF32", errors ~1e-7 like float32's). Half-precision inputs always use
    the tensor cores; the eager path is unaffected.
    """
    named = [("q", q), ("k", k), ("v", v), ("beta", beta)]
    named += [(n, t) for n, t in (("log_gamma", log_gamma), ("h0", h0)) if t is not None]
    for name, t in named:
        _validate.floating(t, f"delta_rule: {name}")
    positive_int(chunk_size, "chunk_size")
    check_flag(allow_tf32, "delta_rule: allow_tf32")
    check_delta_rule_shapes(q, k, v, beta=beta, log_gamma=log_gamma,
                            h0=None if cu_seqlens is not None else h0)
    cu = None
    if cu_seqlens is not None:
        B, T, _, H, dk = k.shape
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T)
        check_packed_state(h0, cu.shape[0] - 1, (H, dk, v.shape[-1]), name="h0")
    return _run_delta_rule(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=h0,
                           chunk_size=chunk_size, cu_seqlens=cu, allow_tf32=allow_tf32)


def _run_delta_rule(q: jax.Array, *, k: jax.Array, v: jax.Array, beta: jax.Array,
                    log_gamma: jax.Array | None, h0: jax.Array | None, chunk_size: int,
                    cu_seqlens: jax.Array | None = None, allow_tf32: bool = False
                    ) -> tuple[jax.Array, jax.Array]:
    """:func:`_delta_rule` on arguments already checked (by it, or by DeltaMinGRU, which
    built them; ``cu_seqlens``: checked offsets): no checks here."""
    return call("delta_rule", delta_rule_eager, q, k=k, v=v, beta=beta, log_gamma=log_gamma,
                h0=h0, chunk_size=chunk_size, cu_seqlens=cu_seqlens, allow_tf32=allow_tf32)


def check_cu_seqlens(cu_seqlens: jax.Array, total_length: int) -> jax.Array:
    """Check packed-sequence offsets where the packed calls cannot: under ``jax.jit``.

    Every call that takes ``cu_seqlens`` checks its values when they are concrete. Traced
    offsets (under ``jax.jit``) have no values at trace time, so a jitted call takes them on
    trust: malformed offsets give wrong results, no error. Call this function on the offsets
    inside the jitted function and wrap it with :func:`jax.experimental.checkify.checkify`:
    the rules then run on the device and come back as an error value, which ``err.throw()``
    raises (a ``JaxRuntimeError``, a ``ValueError``). Without ``checkify`` a traced call
    fails at trace time (JAX: a ``check`` that was not functionalized).

    Args:
        cu_seqlens: ``(N+1,)`` integer offsets: starting at 0, non-decreasing, ending at
            ``total_length``.
        total_length: ``T``, the packed row's length.

    Returns:
        ``cu_seqlens`` itself.

    Raises:
        TypeError, ValueError: not a 1-D integer array of at least two offsets (also when
            traced), or concrete values that break a rule, naming it (one small device read).

    Example:
        >>> import jax, jax.numpy as jnp, mingru_jax
        >>> from jax.experimental import checkify
        >>> def run(a, b, cu):
        ...     cu = mingru_jax.check_cu_seqlens(cu, a.shape[1])
        ...     return mingru_jax.linear_recurrence(a, b, cu_seqlens=cu)
        >>> checked = jax.jit(checkify.checkify(run, errors=checkify.user_checks))
        >>> err, h = checked(jnp.ones((1, 7, 2)), jnp.ones((1, 7, 2)), jnp.array([0, 5, 3, 7]))
        >>> err.get()
        'cu_seqlens must be non-decreasing; got [0 5 3 7] (`check` failed)'
    """
    if isinstance(total_length, bool) or not isinstance(total_length, int):
        raise TypeError(f"total_length must be an int (the packed length T); got "
                        f"{type(total_length).__name__}")
    cu = _packing.check_cu_seqlens(cu_seqlens, 1, total_length)
    if isinstance(cu_seqlens, jax.core.Tracer):
        checkify.check(cu[0] == 0, "cu_seqlens must start at 0; got cu_seqlens[0] = {}", cu[0])
        checkify.check(cu[-1] == total_length, f"cu_seqlens must end at T = {total_length} "
                       "(the packed length); got cu_seqlens[-1] = {}", cu[-1])
        checkify.check(jnp.all(cu[1:] >= cu[:-1]), "cu_seqlens must be non-decreasing; got {}",
                       cu)
    return cu_seqlens
