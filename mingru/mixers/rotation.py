"""RotationMinGRU: 2×2 block transitions ``M_t = R(θ_t) · diag(1, tanh(u_t))``.

A rotation by ``2π/K`` generates the cyclic group ``Z_K``, so snapping the input-dependent
angle to multiples of ``2π/K`` lets a linear RNN count modulo K exactly over any length
(the state-tracking argument of Merrill, Petty & Sabharwal 2024 and Grazzi et al. 2025, with
the rotation view of unitary/orthogonal RNNs, Jing et al. 2017). The ``tanh(u)`` scale on the
second channel lets each block also forget.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from mingru._eager.rotation_cell import snap_angles
from mingru.cells import _run_rotation_cell
from mingru.mixers._common import TimeDecay
from mingru.mixers.givens import BlockRotationBase
from mingru_kernels._spec import check_rotation_hidden, check_size, check_snap, snap_per_block

__all__ = ["RotationMinGRU"]


class RotationMinGRU(BlockRotationBase):
    """MinGRU with 2×2 rotation-and-scale blocks (Merrill et al. 2024; Grazzi et al. 2025).

    Block j (channels ``2j, 2j+1``) has ``M_t = γ_t R(θ_t) diag(1, tanh(u_t))`` with
    ``θ = W_θ x`` and ``u = W_u x`` (one each per block) and input ``σ(W_z x) ⊙ (W_h x)``.

    Args:
        input_size: features of ``x``.
        hidden_size: features of the state; even (``n = hidden/2`` blocks).
        bias: bias in the linear layers.
        snap: angles are rounded (half to even) to multiples of ``2π/K_j`` with
            ``K_j = snap[j % len(snap)]`` and a straight-through gradient; ``None`` disables.
        decay: ``None``, ``"fixed"`` or ``"learnable"`` time decay (one rate per block).
        decay_rate: ``λ`` (fixed) or its initial value (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` on the time gaps.

    Shapes: ``forward(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None) ->
    h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden), delta_t=None) ->
    h_t (B, hidden)``. The initial state is the parameter ``h0 ~ N(0, 0.5²)`` unless given.

    Example:
        >>> import torch
        >>> from mingru import RotationMinGRU
        >>> m = RotationMinGRU(8, 16, snap=(2, 3))
        >>> h = m(torch.randn(2, 10, 8))
        >>> m.step(torch.randn(2, 8), h[:, -1]).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        snap: Sequence[int] | None = (2, 3, 4, 6),
        decay: str | None = None,
        decay_rate: float = 1.0,
        log1p_delta: bool = False,
    ) -> None:
        super().__init__()
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        n = check_rotation_hidden(hidden_size)
        self.snap = check_snap(snap)
        self.block_size = 2
        self.n_blocks = n
        self.linear_theta = nn.Linear(input_size, n, bias=bias)
        self.linear_u = nn.Linear(input_size, n, bias=bias)
        self.linear_z = nn.Linear(input_size, hidden_size, bias=bias)
        self.linear_h = nn.Linear(input_size, hidden_size, bias=bias)
        self.h0 = nn.Parameter(torch.randn(hidden_size) * 0.5)
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=n)
        if self.snap is not None:
            K = [float(K_j) for K_j in snap_per_block(self.snap, n)]
            # Not persistent: derived from the constructor, so state_dicts stay framework-neutral.
            self.register_buffer("snap_k", torch.tensor(K), persistent=False)
        else:
            self.register_buffer("snap_k", None, persistent=False)

    def snap_angles(self, theta: torch.Tensor) -> torch.Tensor:
        """Round ``theta (..., n)`` to multiples of ``2π/K_j`` (half to even), straight-through.

        The value is exactly ``round(θ / (2π/K)) · (2π/K)``; the gradient is the identity.
        """
        return snap_angles(theta, self.snap_k)

    transition_layers = ("linear_theta", "linear_u")

    def _run_cell(self, k: torch.Tensor, *, initial_state: torch.Tensor,
                  log_gamma: torch.Tensor | None) -> torch.Tensor:
        """:func:`mingru.cells.rotation_cell` (its checks hold by construction): on CUDA one
        kernel each way snaps the angles and forms the scale and the gates from the
        projection in place."""
        return _run_rotation_cell(k, initial_state=initial_state, log_gamma=log_gamma,
                                  snap_k=self.snap_k)

    def transition_from(self, parts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Angles ``(..., n, 1, 1)`` and the scale ``[1, tanh(u)]`` ``(..., n, 2)`` from the
        outputs of ``linear_theta`` and ``linear_u``."""
        k_theta, k_u = parts
        theta = self.snap_angles(k_theta)
        s = torch.tanh(k_u)
        scale = torch.stack([torch.ones_like(s), s], dim=-1)
        return theta[..., None, None], scale

    def extra_repr(self) -> str:
        return f"input_size={self.input_size}, hidden_size={self.hidden_size}, snap={self.snap}"
