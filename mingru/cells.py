"""The fused minGRU cells: gates and recurrence in one op, from the projection outputs.

A mixer computes ONE projection ``k = x W^T + c`` holding its gates side by side and hands it
to a cell, which forms the gates and runs the recurrence without writing any per-gate tensor
(on CUDA one Triton kernel each way; the eager twin is the reference formulation). Like the
scans, each entry validates here and dispatches through :mod:`mingru.dispatch` (op
``mingru_cell``; ``MINGRU_SCAN`` and :func:`mingru.use_backend` apply).
"""

from __future__ import annotations

import torch

from mingru import _validate
from mingru._eager.mingru_cell import mingru_cell_eager
from mingru.dispatch import call

__all__ = ["mingru_cell", "signed_mingru_cell"]


def mingru_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    return_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The MinGRU cell: ``h_t = γ_t (1 − z_t) h_{t−1} + z_t g(k_h)`` with ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 2·D)`` pre-activations ``[k_z | k_h]`` (one projection's output).
        initial_state: ``(B, D)`` non-negative ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay ``log γ ≤ 0`` of the transition.
        return_final_state: also return ``h_T``.

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
    return _cell("k", k, 2, initial_state, log_gamma, False, False, return_final_state)


def signed_mingru_cell(
    k: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    log_gamma: torch.Tensor | None = None,
    coupled: bool = False,
    return_final_state: bool = False,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """The signed cell: ``h_t = γ_t tanh(k_s) [(1 − z_t)] h_{t−1} + z_t k_h``, ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 3·D)`` pre-activations ``[k_z | k_s | k_h]``.
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay of the transition.
        coupled: multiply the transition by ``1 − z``.
        return_final_state: also return ``h_T``.

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
    return _cell("k", k, 3, initial_state, log_gamma, True, bool(coupled), return_final_state)


def _cell(name, k, n_gates, initial_state, log_gamma, signed, coupled, return_final_state):
    shape = f"(B, T, {n_gates}·D)"
    _validate.float_tensor(k, name, 3, shape)
    _validate.nonempty_time(k, name)
    B, T, S = k.shape
    if S % n_gates:
        raise ValueError(f"{name} must have shape {shape}: its last dim {S} is not a multiple "
                         f"of {n_gates} (the gates side by side)")
    D = S // n_gates
    named = [(name, k)]
    if initial_state is not None:
        _validate.float_tensor(initial_state, "initial_state", 2, "(B, D)")
        _validate.shape_is(initial_state, "initial_state", (B, D), "(B, D)")
        named.append(("initial_state", initial_state))
    if log_gamma is not None:
        _validate.float_tensor(log_gamma, "log_gamma", 3, "(B, T, D) or (B, T, 1)")
        if tuple(log_gamma.shape) not in ((B, T, D), (B, T, 1)):
            raise ValueError(f"log_gamma must have shape (B, T, D) = {(B, T, D)} or (B, T, 1); "
                             f"got {tuple(log_gamma.shape)}")
        named.append(("log_gamma", log_gamma))
    _validate.same_kind(named)
    return call("mingru_cell", mingru_cell_eager, k, initial_state, log_gamma, signed, coupled,
                bool(return_final_state))
