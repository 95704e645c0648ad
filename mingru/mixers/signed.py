"""SignedMinGRU: a minGRU whose transition may be negative, on the fused signed cell
(:func:`mingru.cells.signed_mingru_cell`; eager reference: the states-only linear recurrence).

    z_t = σ(W_z x_t),   s_t = tanh(W_s x_t),   a_t = γ_t s_t  (or γ_t (1 − z_t) s_t when coupled),
    h_t = a_t ⊙ h_{t−1} + z_t ⊙ (W_h x_t).

Negative eigenvalues of the transition let a diagonal linear RNN track state such as parity,
which a positive-transition minGRU cannot (Merrill, Petty & Sabharwal 2024, arXiv:2404.08819;
Grazzi et al. 2025, arXiv:2411.12537).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mingru._sharding import check_group
from mingru._validate import checks_state
from mingru.cells import _run_mingru_cell
from mingru.mixers._common import (
    TimeDecay,
    check_sequence,
    check_state,
    check_token,
    packed_offsets,
    project,
)
from mingru_kernels._spec import check_size

__all__ = ["SignedMinGRU"]


class SignedMinGRU(nn.Module):
    """MinGRU with a signed transition ``a = tanh(W_s x)`` (Merrill et al. 2024; Grazzi et al.
    2025).

    Args:
        input_size: features of ``x``.
        hidden_size: features of the state ``h``.
        bias: bias in ``linear_z``, ``linear_s`` and ``linear_h``.
        learnable_h0: learn the initial state (parameter ``h0`` starting at 0); otherwise the
            default ``h_0`` is 0.
        coupled: use ``a = (1 − z) ⊙ tanh(W_s x)`` instead of ``tanh(W_s x)``.
        decay: ``None``, ``"fixed"`` or ``"learnable"`` time decay of the transition
            (one rate per hidden unit when learnable).
        decay_rate: ``λ`` (fixed) or its initial value (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` on the time gaps.

    Shapes: ``forward(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None (B, T) or
    (B, T, 1)) -> h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden),
    delta_t=None (B,) or (B, 1)) -> h_t (B, hidden)``. Computes in the input dtype.

    Example:
        >>> import torch
        >>> from mingru import SignedMinGRU
        >>> m = SignedMinGRU(8, 16, coupled=True)
        >>> h = m(torch.randn(2, 10, 8))
        >>> m.step(torch.randn(2, 8), h[:, -1]).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        learnable_h0: bool = False,
        coupled: bool = False,
        decay: str | None = None,
        decay_rate: float = 1.0,
        log1p_delta: bool = False,
    ) -> None:
        super().__init__()
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.coupled = bool(coupled)
        self.linear_z = nn.Linear(input_size, hidden_size, bias=bias)
        self.linear_s = nn.Linear(input_size, hidden_size, bias=bias)
        self.linear_h = nn.Linear(input_size, hidden_size, bias=bias)
        if learnable_h0:
            self.h0 = nn.Parameter(torch.zeros(hidden_size))
        else:
            self.register_parameter("h0", None)
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=hidden_size)

    @checks_state("h_0")
    def forward(
        self,
        x: torch.Tensor,
        h_0: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
        return_state: bool = False,
        *,
        cu_seqlens: torch.Tensor | None = None,
        sequence_group: Any = None,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """States ``h (B, T, hidden)`` for ``x (B, T, input_size)``; see the class docstring.

        With ``return_state`` also the last state ``(B, 1, hidden)``.

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one
        row, ``B = 1``) every sequence starts from its own state: ``h_0`` is ``(N, 1, hidden)``
        (default: the mixer's ``h_0`` for each), ``delta_t`` ``(1, T)``, and the state returned
        is ``(N, 1, hidden)``, each sequence's last (an empty one's is its ``h_0``).

        With ``sequence_group`` (a ``torch.distributed`` process group) the sequence is split
        along T across its ranks: ``x`` and ``delta_t`` are this rank's contiguous slice (in
        rank order), ``h_0`` the state before the whole sequence, and the result this slice's
        states; a returned state is the whole sequence's (see :func:`mingru.linear_recurrence`).

        A NaN in ``h_0`` is a ``ValueError`` (checked in eager calls, one small device read;
        not under ``torch.compile``)."""
        check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        cu, n_states = packed_offsets(cu_seqlens, x, sequence_group is not None)
        # One GEMM for the three projections; the cell forms the gates inside the kernel.
        k = project(x, self.linear_z, self.linear_s, self.linear_h)
        log_gamma = self.decay.log_gamma(delta_t, B, T, like=k)
        if h_0 is not None:
            h_0 = check_state(h_0, n_states, self.hidden_size, name="h_0", sequence=True,
                              like=k)[:, 0]
        elif self.h0 is not None:
            h_0 = self.h0.to(k.dtype).expand(n_states, self.hidden_size)
        if sequence_group is not None:
            check_group(sequence_group)
        # The cell's own checks would repeat the ones above on what they built: its route.
        out = _run_mingru_cell(k, initial_state=h_0, log_gamma=log_gamma, signed=True,
                               coupled=self.coupled, return_final_state=bool(return_state),
                               cu_seqlens=cu, sequence_group=sequence_group)
        return (out[0], out[1][:, None]) if return_state else out

    def step(
        self,
        x_t: torch.Tensor,
        h_prev: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token: ``h_t (B, hidden)`` from ``x_t (B, input_size)``, ``h_prev (B, hidden)``.

        Checks shapes, dtypes and devices, never values: no host synchronisation, so the
        step can be captured in a CUDA graph or compiled with ``fullgraph=True``."""
        check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        # The forward's route at T = 1: one GEMM, then the fused cell (one kernel on a GPU).
        k = project(x_t[:, None], self.linear_z, self.linear_s, self.linear_h)
        if h_prev is not None:
            h_prev = check_state(h_prev, B, self.hidden_size, name="h_prev", sequence=False,
                                 like=k)
        elif self.h0 is not None:
            h_prev = self.h0.to(k.dtype).expand(B, self.hidden_size)
        log_gamma = self.decay.log_gamma(delta_t, B, None, like=k)
        h = _run_mingru_cell(k, initial_state=h_prev,
                             log_gamma=None if log_gamma is None else log_gamma[:, None],
                             signed=True, coupled=self.coupled, return_final_state=False)
        return h[:, 0]

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, "
            f"learnable_h0={self.h0 is not None}, coupled={self.coupled}"
        )
