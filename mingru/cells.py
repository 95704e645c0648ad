"""The fused minGRU cells: gates and recurrence in one op, from the projection outputs.

A mixer computes ONE projection ``k = x W^T + c`` holding its gates side by side and hands it
to a cell, which forms the gates and runs the recurrence without writing any per-gate tensor
(on CUDA one Triton kernel each way; the eager twin is the reference formulation). Like the
scans, each entry validates here and takes its unchecked route ``_run_<op>`` (the mixers'
way in) to :mod:`mingru.dispatch` (op ``mingru_cell``; ``MINGRU_SCAN`` and
:func:`mingru.use_backend` apply). DeltaMinGRU's step goes the same way from its projection:
one op (``delta_rule_step``, private) for the inputs, the state update and the output.
"""

from __future__ import annotations

from typing import Any

import torch

from mingru import _validate
from mingru._eager.delta_inputs import delta_inputs as delta_inputs_eager
from mingru._eager.delta_rule_step import delta_rule_step as delta_rule_step_eager
from mingru._eager.givens_cell import givens_cell_eager
from mingru._eager.mingru_cell import mingru_cell_eager, transitions
from mingru._eager.rotation_cell import rotation_cell_eager
from mingru._packed_sharding import packed_call
from mingru._packing import check_cu_seqlens
from mingru._sharding import check_group, sequence_parallel
from mingru.dispatch import call
from mingru_kernels._spec import check_cell_shapes, check_givens, check_packed_state, check_size
from mingru_kernels.launch.delta_inputs import width as delta_inputs_width

__all__ = ["delta_inputs", "givens_cell", "mingru_cell", "rotation_cell", "signed_mingru_cell"]


def mingru_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    return_final_state: bool = False,
    *,
    cu_seqlens: torch.Tensor | None = None,
    sequence_group: Any = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The MinGRU cell: ``h_t = γ_t (1 − z_t) h_{t−1} + z_t g(k_h)`` with ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 2·D)`` pre-activations ``[k_z | k_h]`` (one projection's output).
        initial_state: ``(B, D)`` non-negative ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay ``log γ ≤ 0`` of the transition.
        return_final_state: also return ``h_T``.
        cu_seqlens: packed sequences: ``(N+1,)`` integer offsets of ``N`` sequences laid end
            to end in one row (``B = 1``; as in :func:`mingru.linear_recurrence`): each
            restarts from its own ``initial_state`` row (``(N, D)``) and ``h_T`` is ``(N, D)``;
            with ``sequence_group`` too, the offsets are the whole row's.
        sequence_group: a ``torch.distributed`` process group over which the sequence is
            split along T (as in :func:`mingru.linear_recurrence`).

    Returns:
        ``h`` ``(B, T, D)``, positive, or ``(h, h_T)``; in ``k``'s dtype (fp32 inside the
        kernel), differentiable in ``k``, ``initial_state`` and ``log_gamma``.

    Example:
        >>> import torch
        >>> from mingru.cells import mingru_cell
        >>> h = mingru_cell(torch.randn(2, 7, 2 * 4), torch.full((2, 4), 0.5))
        >>> h.shape, bool((h > 0).all())
        (torch.Size([2, 7, 4]), True)
    """
    cu = _check_cell(k, n_gates=2, initial_state=initial_state, log_gamma=log_gamma,
                     cu_seqlens=cu_seqlens, sequence_group=sequence_group)
    return _run_mingru_cell(k, initial_state=initial_state, log_gamma=log_gamma, signed=False,
                            coupled=False, return_final_state=bool(return_final_state),
                            cu_seqlens=cu, sequence_group=sequence_group)


def signed_mingru_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    coupled: bool = False,
    return_final_state: bool = False,
    *,
    cu_seqlens: torch.Tensor | None = None,
    sequence_group: Any = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The signed cell: ``h_t = γ_t tanh(k_s) [(1 − z_t)] h_{t−1} + z_t k_h``, ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 3·D)`` pre-activations ``[k_z | k_s | k_h]``.
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay of the transition.
        coupled: multiply the transition by ``1 − z``.
        return_final_state: also return ``h_T``.
        cu_seqlens: packed sequences, as in :func:`mingru_cell`.
        sequence_group: a process group splitting the sequence along T, as in
            :func:`mingru_cell`.

    Returns:
        ``h`` ``(B, T, D)`` or ``(h, h_T)``, in ``k``'s dtype; differentiable in ``k``,
        ``initial_state`` and ``log_gamma``.

    Example:
        >>> import torch
        >>> from mingru.cells import signed_mingru_cell
        >>> h, h_T = signed_mingru_cell(torch.randn(2, 7, 3 * 4), return_final_state=True)
        >>> h.shape, h_T.shape
        (torch.Size([2, 7, 4]), torch.Size([2, 4]))
    """
    cu = _check_cell(k, n_gates=3, initial_state=initial_state, log_gamma=log_gamma,
                     cu_seqlens=cu_seqlens, sequence_group=sequence_group)
    return _run_mingru_cell(k, initial_state=initial_state, log_gamma=log_gamma, signed=True,
                            coupled=bool(coupled), return_final_state=bool(return_final_state),
                            cu_seqlens=cu, sequence_group=sequence_group)


def _check_cell(k: object, *, n_gates: int, initial_state: object, log_gamma: object,
                cu_seqlens: object, sequence_group: Any) -> torch.Tensor | None:
    """The checks of :func:`mingru_cell` (``n_gates=2``) and :func:`signed_mingru_cell` (3);
    returns the checked offsets (``None`` when not packed)."""
    _validate.floating(k, "k")
    named = [("k", k)]
    for name, x in (("initial_state", initial_state), ("log_gamma", log_gamma)):
        if x is not None:
            named.append((name, _validate.floating(x, name)))
    cu = None
    if cu_seqlens is not None:
        D = check_cell_shapes(k, n_gates, None, log_gamma=log_gamma)
        B, T = k.shape[:2]
        cu = check_cu_seqlens(cu_seqlens, B, T, device=k.device, sharded=sequence_group is not None)
        check_packed_state(initial_state, cu.shape[0] - 1, (D,), name="initial_state")
    else:
        check_cell_shapes(k, n_gates, initial_state, log_gamma=log_gamma)
    _validate.same_kind(named)
    if sequence_group is not None:
        check_group(sequence_group)
    return cu


def _run_mingru_cell(k: torch.Tensor, *, initial_state: torch.Tensor | None,
                     log_gamma: torch.Tensor | None, signed: bool, coupled: bool,
                     return_final_state: bool, cu_seqlens: torch.Tensor | None = None,
                     sequence_group: Any = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """:func:`mingru_cell` / :func:`signed_mingru_cell` on arguments already checked (by the
    public entry, or by a mixer that built them): no checks here. ``cu_seqlens`` are checked
    offsets (int64, on ``k``'s device)."""
    if cu_seqlens is not None:
        return packed_call(
            lambda table, seq_id: call(
                "mingru_cell", mingru_cell_eager, k, initial_state=table, log_gamma=log_gamma,
                signed=signed, coupled=coupled, return_final_state=False, seq_id=seq_id),
            lambda: _transition_product(k, log_gamma, signed=signed, coupled=coupled),
            cu_seqlens=cu_seqlens, steps=k.shape[1], initial_state=initial_state,
            group=sequence_group, return_final_state=return_final_state)
    if sequence_group is not None:
        return sequence_parallel(
            lambda h_in: call(
                "mingru_cell", mingru_cell_eager, k, initial_state=h_in, log_gamma=log_gamma,
                signed=signed, coupled=coupled, return_final_state=True),
            _transition_product(k, log_gamma, signed=signed, coupled=coupled),
            initial_state=initial_state, group=sequence_group,
            return_final_state=return_final_state)
    return call("mingru_cell", mingru_cell_eager, k, initial_state=initial_state,
                log_gamma=log_gamma, signed=signed, coupled=coupled,
                return_final_state=return_final_state)


def givens_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    *,
    block_size: int,
    rounds: int,
) -> torch.Tensor:
    """GivensMinGRU's cell: ``h_t = γ_t G(θ_t) h_{t−1} + σ(k_z) ⊙ k_h`` per block of
    ``block_size`` channels, ``G(θ_t)`` the ``rounds`` brick-wall layers of Givens rotations
    of :class:`mingru.GivensMinGRU` (op ``givens_cell``).

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
        ``k``, ``initial_state`` and ``log_gamma``. On CUDA one Triton kernel each way reads
        ``k``'s columns in place and writes its whole gradient in place.

    Example:
        >>> import torch
        >>> from mingru.cells import givens_cell
        >>> D, R = 8, 3
        >>> givens_cell(torch.randn(2, 5, D * R // 2 + 2 * D), block_size=4, rounds=R).shape
        torch.Size([2, 5, 8])
    """
    _validate.floating(k, "k")
    check_size(rounds, "rounds")  # before it divides k's width
    D = 2 * k.shape[-1] // (rounds + 4) if k.dim() == 3 else 0
    if k.dim() != 3 or D < 1 or D * rounds // 2 + 2 * D != k.shape[-1] or D * rounds % 2:
        raise ValueError(f"givens_cell: k must be (B, T, D·rounds/2 + 2·D) for rounds={rounds}; "
                         f"got {tuple(k.shape)}")
    try:
        n = check_givens(D, block_size, rounds)
    except ValueError as err:
        raise ValueError(f"givens_cell: k's width {k.shape[-1]} gives D = {D} for rounds={rounds}; "
                         f"{err}") from None
    _check_block_cell("givens_cell", k, initial_state=initial_state, D=D, log_gamma=log_gamma,
                      n=n)
    return _run_givens_cell(k, initial_state=initial_state, log_gamma=log_gamma,
                            block_size=block_size, rounds=rounds)


def _run_givens_cell(k: torch.Tensor, *, initial_state: torch.Tensor | None,
                     log_gamma: torch.Tensor | None, block_size: int, rounds: int
                     ) -> torch.Tensor:
    """:func:`givens_cell` without its checks, for GivensMinGRU (whose projection, state and
    decay are valid by construction)."""
    return call("givens_cell", givens_cell_eager, k, h0=initial_state, log_gamma=log_gamma,
                block_size=block_size, rounds=rounds)


def _check_block_cell(op: str, k: torch.Tensor, *, initial_state: torch.Tensor | None, D: int,
                      log_gamma: torch.Tensor | None, n: int) -> None:
    """The block cells' common checks: at least one step, ``initial_state (B, D)`` and
    ``log_gamma (B, T, n)`` (one per block) when given, and one dtype and device."""
    _validate.nonempty_time(k, "k")
    B, T = k.shape[:2]
    named = [("k", k)]
    for name, x, shape in (("initial_state", initial_state, (B, D)),
                           ("log_gamma", log_gamma, (B, T, n))):
        if x is not None:
            _validate.floating(x, name)
            if tuple(x.shape) != shape:
                raise ValueError(f"{op}: {name} must be {shape}; got {tuple(x.shape)}")
            named.append((name, x))
    _validate.same_kind(named)


def rotation_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    *,
    snap_k: torch.Tensor | None = None,
) -> torch.Tensor:
    """RotationMinGRU's cell: per 2×2 block ``j``, ``h_t = γ_t R(θ_t) diag(1, tanh(k_u))
    h_{t−1} + σ(k_z) ⊙ k_h`` with ``θ = k_θ`` snapped to a multiple of ``2π/K_j`` (half to
    even, straight-through gradient) (op ``rotation_cell``).

    Args:
        k: ``(B, T, 6·n)`` pre-activations ``[k_θ | k_u | k_z | k_h]`` (one projection's
            output): ``n`` angles, ``n`` scale pre-activations, then ``k_z`` and ``k_h``
            (``D = 2·n`` each, block ``j`` on channels ``2j, 2j+1``).
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, n)`` log-decay ``log γ`` of each block's transition, or ``None``.
        snap_k: ``(n,)`` positive ``K_j`` per block (e.g. ``RotationMinGRU.snap_k``), or
            ``None`` for unsnapped angles.

    Returns:
        ``h`` ``(B, T, D)`` in ``k``'s dtype, differentiable in ``k``, ``initial_state`` and
        ``log_gamma`` (not in ``snap_k``); on CUDA one kernel each way, as in
        :func:`givens_cell`.

    Example:
        >>> import torch
        >>> from mingru.cells import rotation_cell
        >>> rotation_cell(torch.randn(2, 5, 6 * 4), snap_k=torch.tensor([2., 3., 4., 6.])).shape
        torch.Size([2, 5, 8])
    """
    _validate.floating(k, "k")
    if k.dim() != 3 or k.shape[-1] < 6 or k.shape[-1] % 6:
        raise ValueError(f"rotation_cell: k must be (B, T, 6·n) = [k_θ | k_u | k_z | k_h] with "
                         f"n ≥ 1 blocks; got {tuple(k.shape)}")
    n = k.shape[-1] // 6
    _check_block_cell("rotation_cell", k, initial_state=initial_state, D=2 * n,
                      log_gamma=log_gamma, n=n)
    if snap_k is not None:
        _validate.floating(snap_k, "snap_k")
        if tuple(snap_k.shape) != (n,) or snap_k.device != k.device:
            raise ValueError(f"rotation_cell: snap_k must be ({n},) on {k.device}; got "
                             f"{tuple(snap_k.shape)} on {snap_k.device}")
        # A value check reads the device (a sync, and a graph break under torch.compile):
        # eager calls only. RotationMinGRU checks its table once, when it is built.
        if not torch.compiler.is_compiling() and not bool((snap_k > 0).all()):
            raise ValueError("rotation_cell: snap_k must be positive (K_j of each block)")
    return _run_rotation_cell(k, initial_state=initial_state, log_gamma=log_gamma,
                              snap_k=snap_k)


def _run_rotation_cell(k: torch.Tensor, *, initial_state: torch.Tensor | None,
                       log_gamma: torch.Tensor | None, snap_k: torch.Tensor | None
                       ) -> torch.Tensor:
    """:func:`rotation_cell` without its checks, for RotationMinGRU (whose projection, state,
    decay and snap table are valid by construction)."""
    return call("rotation_cell", rotation_cell_eager, k, h0=initial_state, log_gamma=log_gamma,
                snap_k=snap_k)


def delta_inputs(p: torch.Tensor, n_heads: int, nh: int, d_k: int, d_v: int, eps: float
                 ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The delta-rule mixer's inputs from its one projection (op ``delta_inputs``).

    ``p (..., W)``, ``W = H·d_k + nh·H·(d_k + d_v + 1)``, columns ``[q | k | v | β-logits]``
    (``H = n_heads``) → ``q (..., H, d_k)``, ``k (..., nh, H, d_k)`` L2-normalised per head
    (``k / max(‖k‖, eps)``), ``v (..., nh, H, d_v)``, ``β = 2σ(·) (..., nh, H)``, in ``p``'s
    dtype. On CUDA one Triton kernel each way writes them contiguous (no per-op passes, no
    copies of the column slices); under ``torch.compile`` the eager twin, which inductor fuses.

    Example:
        >>> import torch
        >>> from mingru.cells import delta_inputs
        >>> q, k, v, beta = delta_inputs(torch.randn(2, 5, 24), 2, 1, 4, 3, 1e-6)
        >>> k.shape, float(k.norm(dim=-1).max()) < 1 + 1e-6, bool((beta < 2).all())
        (torch.Size([2, 5, 1, 2, 4]), True, True)
    """
    _validate.floating(p, "p")
    width = delta_inputs_width(n_heads, nh, d_k, d_v)
    if p.dim() < 1 or p.shape[-1] != width:
        raise ValueError(f"delta_inputs: p must have shape (..., {width}) for n_heads={n_heads}, "
                         f"nh={nh}, d_k={d_k}, d_v={d_v}; got {tuple(p.shape)}")
    return _run_delta_inputs(p, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v, eps=eps)


def _run_delta_inputs(p: torch.Tensor, *, n_heads: int, nh: int, d_k: int, d_v: int, eps: float
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`delta_inputs` without its checks, for DeltaMinGRU (whose projection and sizes
    are valid by construction)."""
    if torch.compiler.is_compiling():
        return delta_inputs_eager(p, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v, eps=eps)
    return call("delta_inputs", delta_inputs_eager, p, n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v,
                eps=eps)


def _run_delta_rule_step(p: torch.Tensor, *, log_gamma: torch.Tensor | None,
                         h_prev: torch.Tensor | None, n_heads: int, nh: int, d_k: int, d_v: int,
                         eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """One token of DeltaMinGRU from its projection ``p (B, W)`` (columns as in
    :func:`delta_inputs`), ``log_gamma (B, H) | (B, 1)`` or ``None`` and ``h_prev (B, H, d_k,
    d_v)`` or ``None`` (zeros): ``(o (B, H, d_v), S (B, H, d_k, d_v))`` (op
    ``delta_rule_step``; the mixer's step, which checked every shape). On CUDA one Triton
    kernel for the whole step when no gradient is needed; else the eager twin."""
    return call("delta_rule_step", delta_rule_step_eager, p, log_gamma=log_gamma, h_prev=h_prev,
                n_heads=n_heads, nh=nh, d_k=d_k, d_v=d_v, eps=eps)


def _transition_product(k, log_gamma, *, signed, coupled):
    """``(B, D)`` product over T of the cell's transitions (at least fp32 inside; a slice's map
    for sequence parallelism)."""
    work = torch.promote_types(k.dtype, torch.float32)
    lg = None if log_gamma is None else log_gamma.to(work)
    a = transitions(k.to(work), lg, signed, coupled=coupled)
    product = a.prod(dim=1) if signed else a.sum(dim=1).exp()  # MinGRU: log a, positive
    return product.to(k.dtype)
