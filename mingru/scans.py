"""Every op's single entry: the four public scan primitives and the two private ops behind the
block-rotation and delta mixers (``_givens_recurrence``, ``_delta_rule``); and
:func:`check_cu_seqlens`, the opt-in check of packed offsets inside compiled code.

Each entry validates its inputs (here, and only here), then takes the op's unchecked route
``_run_<op>`` to the dispatch seam, which runs the eager twin (``mingru._eager.<op>``) or the
Triton launcher (``mingru._launch.<op>``). The mixers call the routes with what they built and
checked themselves; routes, launchers and eager twins trust what they receive.

All solve an affine recurrence over dim 1 (time). The "zero-start solution" ``Z`` is the
result for ``h_0 = 0``; with the running product ``P_t`` the full solution is
``h_t = P_t h_0 + Z_t``.
"""

from __future__ import annotations

from typing import Any

import torch

from mingru import _packing, _validate
from mingru._compat import assert_async
from mingru._eager.delta_rule import delta_rule_eager
from mingru._eager.givens_recurrence import givens_recurrence_eager, givens_step
from mingru._eager.linear_recurrence import linear_recurrence_eager
from mingru._eager.linear_scan import linear_scan_eager
from mingru._eager.matrix_affine_scan import matrix_affine_scan_eager
from mingru._eager.parallel_scan_log import parallel_scan_log_eager
from mingru._packed_sharding import packed_call
from mingru._packing import Segments, restart_log, segments
from mingru._sharding import check_group, sequence_parallel
from mingru.dispatch import call
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
    log_coeffs: torch.Tensor, log_values: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None
) -> torch.Tensor:
    """Solve ``h_t = a_t h_{t-1} + b_t`` for positive ``a, b`` in log space (Heinsen 2023).

    Args:
        log_coeffs: ``(B, T, D)``, ``log a_t``.
        log_values: ``(B, T+1, D)``; slot 0 is ``log h_0`` (``-inf`` for ``h_0 = 0``),
            slots ``1..T`` are ``log b_t``. With ``cu_seqlens``: ``(1, T+N, D)``, every
            sequence's own layout one after the other — its slot ``log h_0`` followed by its
            ``log b`` values (the per-sequence inputs concatenated).
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``); each restarts from its own ``h_0``.

    Returns:
        ``h`` ``(B, T, D)``, positive, in the input dtype. Stable for ``T ≥ 10⁵``: products
        that underflow never produce NaN.

    Example:
        >>> import torch
        >>> from mingru import parallel_scan_log
        >>> h = parallel_scan_log(-torch.rand(2, 5, 3), torch.randn(2, 6, 3))
        >>> h.shape
        torch.Size([2, 5, 3])
    """
    _validate.float_tensor(log_coeffs, "log_coeffs", 3, shape="(B, T, D)")
    _validate.float_tensor(log_values, "log_values", 3, shape="(B, T+1, D)")
    _validate.same_kind([("log_coeffs", log_coeffs), ("log_values", log_values)])
    _validate.nonempty_time(log_coeffs, "log_coeffs")
    B, T, D = log_coeffs.shape
    if cu_seqlens is not None:
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T, device=log_coeffs.device)
        N = cu.shape[0] - 1
        _validate.shape_is(log_values, "log_values", (1, T + N, D), shape="(1, T+N, D)")
        seg = segments(cu, T)
        # Sequence n's slot log h_0 sits at cu[n] + n; its step t at t + n + 1.
        log_h0 = log_values[0, cu[:-1] + torch.arange(N, device=cu.device)]
        log_b = log_values[:, torch.arange(T, device=cu.device) + seg.seq_id + 1]
        log_a, log_b = restart_log(log_coeffs, log_b, log_h0, seg=seg)
        log_values = torch.cat([torch.full_like(log_b[:, :1], float("-inf")), log_b], dim=1)
        return call("parallel_scan_log", parallel_scan_log_eager, log_a, log_values)
    _validate.shape_is(log_values, "log_values", (B, T + 1, D), shape="(B, T+1, D)")
    return call("parallel_scan_log", parallel_scan_log_eager, log_coeffs, log_values)


def linear_scan(
    a: torch.Tensor, b: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
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
        >>> import torch
        >>> from mingru import linear_scan
        >>> P, Z = linear_scan(torch.tanh(torch.randn(2, 7, 4)), torch.randn(2, 7, 4))
        >>> h = P * torch.ones(2, 1, 4) + Z   # h_0 = 1
    """
    _validate.float_tensor(a, "a", 3, shape="(B, T, D)")
    _validate.float_tensor(b, "b", 3, shape="(B, T, D)")
    _validate.same_kind([("a", a), ("b", b)])
    _validate.nonempty_time(a, "a")
    _validate.shape_is(b, "b", a.shape, shape="(B, T, D) like a")
    if cu_seqlens is not None:
        B, T, D = a.shape
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T, device=a.device)
        # P is the state of the same restarting recurrence with input 0 started from 1.
        start = torch.cat([torch.ones_like(a[0, :1]), torch.zeros_like(a[0, :1])], dim=-1)
        h = _run_linear_recurrence(
            torch.cat([a, a], dim=-1), torch.cat([torch.zeros_like(b), b], -1),
            initial_state=start.expand(cu.shape[0] - 1, 2 * D), return_final_state=False,
            cu_seqlens=cu)
        return h[..., :D], h[..., D:]
    return call("linear_scan", linear_scan_eager, a, b)


def linear_recurrence(
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
    *,
    cu_seqlens: torch.Tensor | None = None,
    sequence_group: Any = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
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
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``). Each sequence starts from its own state: ``initial_state`` is then
            ``(N, D)`` and ``h_T`` is ``(N, D)``, each sequence's last state (an empty
            sequence's is its initial state). With ``sequence_group`` too, the offsets are
            those of the whole row (the same on every rank, ending at the total length) and
            sequences may straddle ranks (:mod:`mingru._packed_sharding`).
        sequence_group: a ``torch.distributed`` process group over which the sequence is
            split along T: each rank passes its contiguous slice (in rank order; lengths may
            differ) and gets that slice's states; ``initial_state`` is the state before the
            whole sequence and ``h_T`` the whole sequence's (see :mod:`mingru._sharding`).

    Returns:
        ``h`` ``(B, T, D)`` (the states ``h_1 … h_T``), or ``(h, h_T)`` with ``h_T`` ``(B, D)``
        (``(N, D)`` when packed); in the input dtype, differentiable in ``a``, ``b`` and
        ``initial_state``.

    Raises:
        ValueError: ``initial_state`` holds NaN (checked in eager calls, one small device
            read; not while ``torch.compile`` traces), or a shape or offset is wrong.

    Example:
        >>> import torch
        >>> from mingru import linear_recurrence
        >>> a, b = torch.tanh(torch.randn(2, 7, 4)), torch.randn(2, 7, 4)
        >>> h, h_T = linear_recurrence(a[:, :4], b[:, :4], return_final_state=True)
        >>> h2 = linear_recurrence(a[:, 4:], b[:, 4:], initial_state=h_T)  # continue
        >>> torch.allclose(torch.cat([h, h2], 1), linear_recurrence(a, b), atol=1e-6)
        True
    """
    _validate.check_states([("initial_state", initial_state)])
    cu = _check_linear_recurrence(a, b, initial_state=initial_state, cu_seqlens=cu_seqlens,
                                  sequence_group=sequence_group)
    return _run_linear_recurrence(a, b, initial_state=initial_state,
                                  return_final_state=bool(return_final_state), cu_seqlens=cu,
                                  sequence_group=sequence_group)


def _check_linear_recurrence(a: object, b: object, *, initial_state: object, cu_seqlens: object,
                             sequence_group: Any) -> torch.Tensor | None:
    """The shape, dtype and device checks of :func:`linear_recurrence`; returns the checked
    offsets (``None`` when not packed)."""
    _validate.float_tensor(a, "a", 3, shape="(B, T, D)")
    _validate.float_tensor(b, "b", 3, shape="(B, T, D)")
    named = [("a", a), ("b", b)]
    _validate.nonempty_time(a, "a")
    _validate.shape_is(b, "b", a.shape, shape="(B, T, D) like a")
    B, T, D = a.shape
    cu = None
    if cu_seqlens is not None:
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T, device=a.device,
                                       sharded=sequence_group is not None)
        if initial_state is not None:
            _validate.float_tensor(initial_state, "initial_state", 2, shape="(N, D)")
            check_packed_state(initial_state, cu.shape[0] - 1, (D,), name="initial_state")
    elif initial_state is not None:
        _validate.float_tensor(initial_state, "initial_state", 2, shape="(B, D)")
        _validate.shape_is(initial_state, "initial_state", (B, D), shape="(B, D)")
    if initial_state is not None:
        named.append(("initial_state", initial_state))
    _validate.same_kind(named)
    if sequence_group is not None:
        check_group(sequence_group)
    return cu


def _run_linear_recurrence(a: torch.Tensor, b: torch.Tensor, *, initial_state: torch.Tensor | None,
                           return_final_state: bool, cu_seqlens: torch.Tensor | None = None,
                           sequence_group: Any = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """:func:`linear_recurrence` on arguments already checked (``cu_seqlens``: checked
    offsets): no checks here."""
    if cu_seqlens is not None:
        return packed_call(
            lambda table, seq_id: call(
                "linear_recurrence", linear_recurrence_eager, a, b, initial_state=table,
                return_final_state=False, seq_id=seq_id),
            lambda: _transition_product(a), cu_seqlens=cu_seqlens, steps=a.shape[1],
            initial_state=initial_state, group=sequence_group,
            return_final_state=return_final_state)
    if sequence_group is not None:
        return sequence_parallel(
            lambda h_in: call("linear_recurrence", linear_recurrence_eager, a, b,
                              initial_state=h_in, return_final_state=True),
            _transition_product(a), initial_state=initial_state, group=sequence_group,
            return_final_state=return_final_state)
    return call("linear_recurrence", linear_recurrence_eager, a, b, initial_state=initial_state,
                return_final_state=return_final_state)


def _transition_product(a: torch.Tensor) -> torch.Tensor:
    """``(B, D)`` product over T of the transitions ``a (B, T, D)``, in at least float32
    inside (a slice's map for sequence parallelism)."""
    return a.prod(dim=1, dtype=torch.promote_types(a.dtype, torch.float32)).to(a.dtype)


def matrix_affine_scan(
    A: torch.Tensor, Bm: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve ``H_t = A_t H_{t-1} + B_t`` for ``n`` independent ``k×k`` blocks, ``k×v`` states.

    Args:
        A: ``(B, T, n, k, k)`` transitions.
        Bm: ``(B, T, n, k, v)`` inputs (``v = 1`` is a vector state).
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets of ``N`` sequences laid end
            to end in one row (``B = 1``): ``P`` and ``Z`` restart at every sequence's first
            step. Runs as scans whose first step of each sequence has transition 0 (and, for
            ``P``, input ``A_t``).

    Returns:
        ``(P (B, T, n, k, k), Z (B, T, n, k, v))`` with ``P_t = A_t ⋯ A_1`` and
        ``H_t = P_t H_0 + Z_t``.

    Example:
        >>> import torch
        >>> from mingru import matrix_affine_scan
        >>> P, Z = matrix_affine_scan(0.5 * torch.randn(1, 9, 3, 4, 4), torch.randn(1, 9, 3, 4, 2))
        >>> Z.shape
        torch.Size([1, 9, 3, 4, 2])
    """
    _validate.float_tensor(A, "A", 5, shape="(B, T, n, k, k)")
    _validate.float_tensor(Bm, "Bm", 5, shape="(B, T, n, k, v)")
    _validate.same_kind([("A", A), ("Bm", Bm)])
    _validate.nonempty_time(A, "A")
    B, T, n, k, k2 = A.shape
    if k != k2 or k < 1:
        raise ValueError(f"A must have square blocks (B, T, n, k, k); got {tuple(A.shape)}")
    if tuple(Bm.shape[:4]) != (B, T, n, k) or Bm.shape[4] < 1:
        raise ValueError(
            f"Bm must have shape (B, T, n, k, v) = ({B}, {T}, {n}, {k}, v); got {tuple(Bm.shape)}"
        )
    cu = None if cu_seqlens is None else _packing.check_cu_seqlens(
        cu_seqlens, B, T, device=A.device)
    return _run_matrix_affine_scan(A, Bm, cu_seqlens=cu)


def _run_matrix_affine_scan(A: torch.Tensor, Bm: torch.Tensor, *,
                            cu_seqlens: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`matrix_affine_scan` on arguments already checked (``cu_seqlens``: checked
    offsets): no checks here."""
    if cu_seqlens is not None:
        T = A.shape[1]
        seg = segments(cu_seqlens, T)
        starts = seg.starts.reshape(1, T, 1, 1, 1)
        zero = torch.zeros_like(A)
        A_cut = torch.where(starts, zero, A)
        # Two scans (P's input has v = k columns), not one of k + v: the kernel takes
        # power-of-two state widths.
        _, P = call("matrix_affine_scan", matrix_affine_scan_eager, A_cut,
                    torch.where(starts, A, zero))
        _, Z = call("matrix_affine_scan", matrix_affine_scan_eager, A_cut, Bm)
        return P, Z
    return call("matrix_affine_scan", matrix_affine_scan_eager, A, Bm)


def matrix_scan(
    M: torch.Tensor, b: torch.Tensor, *, cu_seqlens: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Solve ``h_t = M_t h_{t-1} + b_t`` for ``n`` independent 2×2 blocks (column vectors).

    Equals :func:`matrix_affine_scan` with ``k = 2, v = 1``.

    Args:
        M: ``(B, T, n, 2, 2)`` transitions; products compose as ``M_t ⋯ M_1``.
        b: ``(B, T, n, 2)`` inputs.
        cu_seqlens: packed sequences, as in :func:`matrix_affine_scan`.

    Returns:
        ``(P (B, T, n, 2, 2), Z (B, T, n, 2))``.

    Example:
        >>> import torch
        >>> from mingru import matrix_scan
        >>> P, Z = matrix_scan(0.7 * torch.randn(2, 5, 3, 2, 2), torch.randn(2, 5, 3, 2))
    """
    _validate.float_tensor(M, "M", 5, shape="(B, T, n, 2, 2)")
    _validate.float_tensor(b, "b", 4, shape="(B, T, n, 2)")
    _validate.same_kind([("M", M), ("b", b)])
    _validate.nonempty_time(M, "M")
    if tuple(M.shape[3:]) != (2, 2):
        raise ValueError(f"M must have shape (B, T, n, 2, 2); got {tuple(M.shape)}")
    _validate.shape_is(b, "b", M.shape[:4], shape="(B, T, n, 2)")
    B, T = M.shape[:2]
    cu = None if cu_seqlens is None else _packing.check_cu_seqlens(
        cu_seqlens, B, T, device=M.device)
    P, Z = _run_matrix_affine_scan(M, b.unsqueeze(-1), cu_seqlens=cu)
    return P, Z.squeeze(-1)


def _givens_recurrence(
    theta: torch.Tensor,
    b: torch.Tensor,
    h0: torch.Tensor,
    scale: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    *,
    cu_seqlens: torch.Tensor | None = None,
) -> torch.Tensor:
    """The fused rotation/Givens recurrence behind RotationMinGRU and GivensMinGRU (private op).

    ``M_t = γ_t · G_{R-1} ⋯ G_0 · diag(scale_t)``, ``h_t = M_t h_{t-1} + b_t`` per block; round
    ``r`` rotates planes ``i = (r % 2 + 2m) % k``, ``j = (i + 1) % k`` by ``theta[..., r, m]``.

    Args:
        theta: ``(B, T, n, R, k/2)`` angles (``R ≥ 1`` rounds, ``k`` even).
        b: ``(B, T, n, k)`` inputs.
        h0: ``(B, n, k)`` initial state.
        scale: ``(B, T, n, k)`` diagonal applied before the rotations, or ``None``.
        log_gamma: ``(B, T, n)`` log decay of the whole transition, or ``None``.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets of ``N`` sequences laid end
            to end in one row (``B = 1``); ``h0`` is then ``(N, n, k)``, one state per
            sequence. The first step of each sequence runs with scale 0 (no transition) and
            input ``b_t + M_t h0[n]``, so the one recurrence restarts there.

    Returns:
        ``h`` ``(B, T, n, k)`` in the input dtype.

    Example:
        >>> import torch
        >>> from mingru.scans import _givens_recurrence
        >>> h = _givens_recurrence(
        ...     torch.randn(2, 5, 3, 1, 1), torch.randn(2, 5, 3, 2), torch.randn(2, 3, 2))
        >>> h.shape
        torch.Size([2, 5, 3, 2])
    """
    _validate.float_tensor(theta, "theta", 5, shape="(B, T, n, R, k/2)")
    _validate.float_tensor(b, "b", 4, shape="(B, T, n, k)")
    _validate.float_tensor(h0, "h0", 3, shape="(B, n, k)")
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
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T, device=theta.device)
        check_packed_state(h0, cu.shape[0] - 1, (n, k), name="h0")
    else:
        _validate.shape_is(h0, "h0", (B, n, k), shape="(B, n, k)")
    if scale is not None:
        _validate.float_tensor(scale, "scale", 4, shape="(B, T, n, k)")
        _validate.shape_is(scale, "scale", (B, T, n, k), shape="(B, T, n, k)")
        named.append(("scale", scale))
    if log_gamma is not None:
        _validate.float_tensor(log_gamma, "log_gamma", 3, shape="(B, T, n)")
        _validate.shape_is(log_gamma, "log_gamma", (B, T, n), shape="(B, T, n)")
        named.append(("log_gamma", log_gamma))
    _validate.same_kind(named)
    return _run_givens_recurrence(theta, b, h0=h0, scale=scale, log_gamma=log_gamma,
                                  cu_seqlens=cu)


def _run_givens_recurrence(theta: torch.Tensor, b: torch.Tensor, *, h0: torch.Tensor,
                           scale: torch.Tensor | None, log_gamma: torch.Tensor | None,
                           cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`_givens_recurrence` on arguments already checked (by it, or by a mixer that
    built them; ``cu_seqlens``: checked offsets): no checks here."""
    if cu_seqlens is not None:
        theta, b, h0, scale = _restart_givens(
            theta, b, h0=h0, scale=scale, log_gamma=log_gamma,
            seg=segments(cu_seqlens, theta.shape[1]))
    return call("givens_recurrence", givens_recurrence_eager, theta, b, h0=h0, scale=scale,
                log_gamma=log_gamma)


def _restart_givens(theta, b, *, h0, scale, log_gamma, seg: Segments):
    """Packed inputs of the Givens recurrence: at each sequence's first step the transition is
    zeroed (``scale = 0``) and its action on that sequence's ``h0`` moves into the input."""
    starts = seg.starts.reshape(1, -1, 1, 1)
    entry = givens_step(h0[seg.seq_id.long()].unsqueeze(0), theta, b, scale=scale,
                        log_gamma=log_gamma)
    b = torch.where(starts, entry, b)
    keep = torch.ones_like(b) if scale is None else scale
    scale = torch.where(starts, torch.zeros_like(keep), keep)
    return theta, b, torch.zeros_like(h0[:1]).expand(1, *h0.shape[1:]), scale


def _delta_rule(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_gamma: torch.Tensor | None = None,
    h0: torch.Tensor | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule (DeltaNet / DeltaProduct) behind DeltaMinGRU (private op).

    Per token ``t``: ``S ← γ_t S``; then for each micro-step ``j``:
    ``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``; then ``o_t = Sᵀ q_t``.

    Args:
        q: ``(B, T, H, d_k)`` queries.
        k: ``(B, T, nh, H, d_k)`` keys (the mixer L2-normalizes them).
        v: ``(B, T, nh, H, d_v)`` values.
        beta: ``(B, T, nh, H)`` step sizes.
        log_gamma: ``(B, T, H)`` per-token log decay, or ``None``.
        h0: ``(B, H, d_k, d_v)`` initial state, or ``None`` (zeros).
        chunk_size: tokens per chunk of the eager chunked form (a speed hint, ≥ 1).
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets (starting at 0,
            non-decreasing, ending at T) of ``N`` sequences laid end to end in one row
            (``B = 1``). The state restarts at the first token of every sequence from that
            sequence's own ``h0[n]``: ``h0`` is then ``(N, H, d_k, d_v)`` (or ``None``:
            zeros) and ``h_T`` is ``(N, H, d_k, d_v)``, each sequence's final state (an empty
            sequence's is its initial state). Equal to running each sequence alone.
        allow_tf32: let the Triton kernels multiply float32 inputs in TF32 on the tensor
            cores (faster; products to about 1e-3 relative instead of float32's). Off by
            default: products keep float32 accuracy (CUDA-core FMAs, or at 64-wide heads
            three TF32 products per product, "3xTF32", errors ~1e-7 like float32's). Half-
            precision inputs always use the tensor cores; the eager path is unaffected.

    Returns:
        ``(o (B, T, H, d_v), h_T (B, H, d_k, d_v))`` in ``q``'s dtype; packed,
        ``(o (1, T, H, d_v), h_T (N, H, d_k, d_v))``.

    Example:
        >>> import torch, torch.nn.functional as F
        >>> from mingru.scans import _delta_rule
        >>> k = F.normalize(torch.randn(2, 9, 1, 3, 4), dim=-1)
        >>> o, h_T = _delta_rule(torch.randn(2, 9, 3, 4), k, torch.randn(2, 9, 1, 3, 5),
        ...                      torch.rand(2, 9, 1, 3))
        >>> o.shape, h_T.shape
        (torch.Size([2, 9, 3, 5]), torch.Size([2, 3, 4, 5]))
    """
    named = [("q", q), ("k", k), ("v", v), ("beta", beta)]
    named += [(n, t) for n, t in (("log_gamma", log_gamma), ("h0", h0)) if t is not None]
    for name, t in named:
        _validate.floating(t, f"delta_rule: {name}")
    positive_int(chunk_size, "chunk_size")
    check_flag(allow_tf32, "delta_rule: allow_tf32")
    check_delta_rule_shapes(q, k, v, beta=beta, log_gamma=log_gamma,
                            h0=None if cu_seqlens is not None else h0)
    devices = {t.device for _, t in named}
    if len(devices) > 1:
        raise ValueError(
            f"delta_rule: all tensors must be on one device; got {sorted(map(str, devices))}"
        )
    cu = None
    if cu_seqlens is not None:
        B, T, _, H, dk = k.shape
        cu = _packing.check_cu_seqlens(cu_seqlens, B, T, device=q.device)
        check_packed_state(h0, cu.shape[0] - 1, (H, dk, v.shape[-1]), name="h0")
    return _run_delta_rule(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=h0,
                           chunk_size=chunk_size, cu_seqlens=cu, allow_tf32=allow_tf32)


def _run_delta_rule(q: torch.Tensor, *, k: torch.Tensor, v: torch.Tensor, beta: torch.Tensor,
                    log_gamma: torch.Tensor | None, h0: torch.Tensor | None, chunk_size: int,
                    cu_seqlens: torch.Tensor | None = None, allow_tf32: bool = False
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_delta_rule` on arguments already checked (by it, or by DeltaMinGRU, which
    built them; ``cu_seqlens``: checked offsets): no checks here."""
    return call("delta_rule", delta_rule_eager, q, k=k, v=v, beta=beta, log_gamma=log_gamma,
                h0=h0, chunk_size=chunk_size, cu_seqlens=cu_seqlens, allow_tf32=allow_tf32)



def check_cu_seqlens(cu_seqlens: torch.Tensor, total_length: int) -> torch.Tensor:
    """Check packed-sequence offsets where the packed calls cannot: inside ``torch.compile``.

    Every call that takes ``cu_seqlens`` checks its values on the host in eager mode (one
    small copy per offsets tensor). While ``torch.compile`` traces, the values are unknown,
    so a compiled call takes them on trust: malformed offsets give wrong results, no error.
    Call this function on the offsets inside the compiled function to check them there.

    Args:
        cu_seqlens: ``(N+1,)`` integer offsets: starting at 0, non-decreasing, ending at
            ``total_length``.
        total_length: ``T``, the packed row's length (with ``sequence_group``, the whole
            row's, as the offsets are).

    Returns:
        ``cu_seqlens`` itself.

    Raises:
        TypeError, ValueError: eagerly (also while compiling, for its dtype and shape): not
            a 1-D integer tensor of at least two offsets, or (eager only) values that break
            a rule, naming it. Eager calls read the offsets on the host (one small copy,
            which the packed calls that follow then skip).
        RuntimeError: compiled: the same rules as device-side asserts, with no host sync.
            On the CPU a broken rule raises when the compiled function runs; on CUDA it is a
            device-side assert, reported at a later synchronisation, after which the
            process's CUDA context is unusable: a debugging aid, not control flow.

    Example:
        >>> import torch, mingru
        >>> mixer = mingru.SignedMinGRU(8, 16)
        >>> @torch.compile(fullgraph=True)
        ... def run(x, cu):
        ...     return mixer(x, cu_seqlens=mingru.check_cu_seqlens(cu, x.shape[1]))
        >>> run(torch.randn(1, 7, 8), torch.tensor([0, 3, 7])).shape  # doctest: +SKIP
        torch.Size([1, 7, 16])
    """
    if isinstance(total_length, bool) or not isinstance(total_length, (int, torch.SymInt)):
        raise TypeError(f"total_length must be an int (the packed length T); got "
                        f"{type(total_length).__name__}")
    _packing.check_cu_seqlens(cu_seqlens, 1, total_length,
                              device=getattr(cu_seqlens, "device", None))
    if torch.compiler.is_compiling():
        assert_async(cu_seqlens[0] == 0, "cu_seqlens must start at 0")
        assert_async(cu_seqlens[-1] == total_length,
                     "cu_seqlens must end at total_length (the packed length)")
        assert_async((cu_seqlens[1:] >= cu_seqlens[:-1]).all(),
                     "cu_seqlens must be non-decreasing")
    return cu_seqlens
