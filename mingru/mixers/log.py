"""MinGRU: the minimal GRU of Feng et al. 2024 ("Were RNNs All We Needed?", arXiv:2410.01201),
on the fused MinGRU cell (:func:`mingru.cells.mingru_cell`), whose eager reference is the
log-space parallel scan (Heinsen 2023, arXiv:2311.06281).

    z_t = σ(W_z x_t),   h̃_t = g(W_h x_t),   h_t = γ_t (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t

with ``g(x) = x + 0.5`` (x ≥ 0), ``σ(x)`` (x < 0), so every state is positive and the eager scan
runs on ``log a = −softplus(W_z x) + log γ`` and ``log b = −softplus(−W_z x) + log g(W_h x)``.
Both projections run as one GEMM (:func:`mingru.mixers._common.project`); the cell forms the
gates from its output inside the kernel.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mingru._sharding import check_group
from mingru._validate import states_trusted
from mingru.cells import _run_mingru_cell
from mingru.mixers._common import (
    TimeDecay,
    check_sequence,
    check_state,
    check_token,
    g,
    packed_offsets,
    project,
)
from mingru_kernels._spec import check_size

__all__ = ["MinGRU", "check_non_negative", "check_size"]


class MinGRU(nn.Module):
    """Minimal GRU (Feng et al. 2024) with positive states, on the log-space scan.

    Args:
        input_size: features of ``x``.
        hidden_size: features of the state ``h``.
        bias: bias in ``linear_z`` and ``linear_h``.
        learnable_h0: learn the initial state as ``g(h0)`` with the parameter ``h0`` starting
            at 0 (so ``h_0 = 0.5`` at init); otherwise the default ``h_0`` is ``0.5 = g(0)``.
        decay: ``None``, ``"fixed"`` or ``"learnable"`` time decay ``γ_t = exp(−λ f(Δt_t))``
            of the transition (one rate per hidden unit when learnable).
        decay_rate: ``λ`` (fixed) or its initial value (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` on the time gaps.

    Shapes: ``forward(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None (B, T) or
    (B, T, 1)) -> h (B, T, hidden)``, the states ``h_1 … h_T``; ``step(x_t (B, input_size),
    h_prev=None (B, hidden), delta_t=None (B,) or (B, 1)) -> h_t (B, hidden)``. A given state
    must be non-negative (it enters the scan as ``log h_0``, so a zero entry is a valid start
    but has no gradient; states this module returns are always positive): ``forward`` checks
    ``h_0`` in eager calls (one device read), ``step`` checks shapes only, never values, so
    that it never waits for the device (CUDA graphs, ``torch.compile(fullgraph=True)``).
    Computes in the dtype of the projections (the input dtype, or the autocast dtype).

    Example:
        >>> import torch
        >>> from mingru import MinGRU
        >>> m = MinGRU(8, 16)
        >>> h = m(torch.randn(2, 10, 8))
        >>> h.shape, bool((h > 0).all())
        (torch.Size([2, 10, 16]), True)
        >>> h2 = m(torch.randn(2, 5, 8), h_0=h[:, -1:])   # continue the sequence
        >>> m.step(torch.randn(2, 8), h2[:, -1]).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        learnable_h0: bool = False,
        decay: str | None = None,
        decay_rate: float = 1.0,
        log1p_delta: bool = False,
    ) -> None:
        super().__init__()
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.linear_z = nn.Linear(input_size, hidden_size, bias=bias)
        self.linear_h = nn.Linear(input_size, hidden_size, bias=bias)
        if learnable_h0:
            self.h0 = nn.Parameter(torch.zeros(hidden_size))
        else:
            self.register_parameter("h0", None)
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=hidden_size)

    def _h0(self, h_0: torch.Tensor | None, batch: int, like: torch.Tensor) -> torch.Tensor:
        """``h_0`` as ``(B, hidden)``."""
        H = self.hidden_size
        if h_0 is None:
            if self.h0 is not None:
                return g(self.h0.to(like.dtype)).expand(batch, H)
            return like.new_full((batch, H), 0.5)
        h_0 = check_state(h_0, batch, H, name="h_0", sequence=True, like=like)
        check_non_negative(h_0, "h_0")
        return h_0[:, 0]

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
        states; a returned state is the whole sequence's (see :func:`mingru.linear_recurrence`)."""
        check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        cu, n_states = packed_offsets(cu_seqlens, x, sequence_group is not None)
        k = project(x, self.linear_z, self.linear_h)  # its dtype (autocast's, not x's) rules
        log_gamma = self.decay.log_gamma(delta_t, B, T, like=k)
        h0 = self._h0(h_0, n_states, k)
        if sequence_group is not None:
            check_group(sequence_group)
        # The cell's own checks would repeat the ones above on what they built: its route.
        out = _run_mingru_cell(k, initial_state=h0, log_gamma=log_gamma, signed=False,
                               coupled=False, return_final_state=bool(return_state),
                               cu_seqlens=cu, sequence_group=sequence_group)
        return (out[0], out[1][:, None]) if return_state else out

    def step(
        self,
        x_t: torch.Tensor,
        h_prev: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token: ``h_t (B, hidden)`` from ``x_t (B, input_size)``, ``h_prev (B, hidden)``.

        Checks shapes, dtypes and devices, not values (no host synchronisation): a negative
        ``h_prev`` is not caught here, unlike ``h_0`` in :meth:`forward`."""
        check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        # The forward's route at T = 1: one GEMM, then the fused cell (one kernel on a GPU)
        # forms the gates and the update, where the gate math alone is a dozen small kernels.
        k = project(x_t[:, None], self.linear_z, self.linear_h)
        if h_prev is None:
            h_prev = self._h0(None, B, k)
        else:
            h_prev = check_state(h_prev, B, self.hidden_size, name="h_prev", sequence=False,
                                 like=k)
        log_gamma = self.decay.log_gamma(delta_t, B, None, like=k)
        h = _run_mingru_cell(k, initial_state=h_prev,
                             log_gamma=None if log_gamma is None else log_gamma[:, None],
                             signed=False, coupled=False, return_final_state=False)
        return h[:, 0]

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, "
            f"learnable_h0={self.h0 is not None}"
        )


def check_non_negative(h: torch.Tensor, name: str) -> None:
    """Reject negative or NaN MinGRU states (``h >= 0`` is False for NaN, so NaN cannot slip
    through). Skipped while torch.compile traces (a data-dependent branch would break the
    graph) and for states the library computed itself (:func:`mingru._validate.trusted_states`);
    eager calls on a caller's state always check."""
    if torch.compiler.is_compiling() or states_trusted():
        return
    if not bool((h >= 0).all()):
        n_nan = int(torch.isnan(h).sum())
        if n_nan:
            raise ValueError(f"{name} must be a non-negative MinGRU state; got {n_nan} NaN entries")
        raise ValueError(
            f"{name} must be a non-negative MinGRU state (not a pre-activation); "
            f"got a minimum of {h.min().item():.4g}"
        )
