"""GivensMinGRU: block-orthogonal transitions built from brick-wall Givens rotations.

Per block of ``k = block_size`` channels, the transition of token t is

    M_t = γ_t · G_{R−1} ⋯ G_0 ∈ SO(k),   h_t = M_t h_{t−1} + σ(W_z x_t) ⊙ (W_h x_t),

where round r rotates the planes (0,1),(2,3),… (r even) or (1,2),…,(k−1,0) (r odd), each by
its own input-dependent angle — the rectangular mesh of Clements et al. 2016 (Optica 3, 1460)
as used by EUNN (Jing et al. 2017, arXiv:1612.05231); Givens rotations after Golub & Van Loan.
Orthogonal transitions never blow up or vanish the state, and non-commuting rotations give
the state-tracking power of non-abelian groups. :class:`BlockRotationBase` holds what
this mixer shares with :class:`~mingru.mixers.rotation.RotationMinGRU`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from mingru._eager.givens_recurrence import givens_transitions
from mingru._packing import final_states, segments
from mingru._sharding import (
    chain_product,
    check_group,
    check_not_packed,
    matrix_sequence_parallel,
)
from mingru._validate import checks_state
from mingru.cells import _run_givens_cell
from mingru.mixers._common import (
    TimeDecay,
    check_sequence,
    check_state,
    check_token,
    packed_offsets,
    project,
)
from mingru.scans import _run_givens_recurrence
from mingru_kernels._spec import check_givens, check_size

__all__ = ["BlockRotationBase", "GivensMinGRU"]


def _cast(t: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t.to(like.dtype)


class BlockRotationBase(nn.Module):
    """Shared forward/step of the rotation-family mixers (``n`` blocks of ``k`` channels).

    Subclasses create ``linear_z``, ``linear_h``, ``h0`` and ``decay``, name the layers of
    their transition in ``transition_layers`` and implement :meth:`transition_from` (angles
    ``(..., n, R, k/2)`` and an optional pre-rotation scale, from those layers' outputs). The
    forward runs every projection as one GEMM.
    """

    transition_layers: tuple[str, ...] = ()

    input_size: int
    hidden_size: int
    n_blocks: int
    block_size: int
    h0: nn.Parameter
    decay: TimeDecay

    def transition_from(
        self, parts: Sequence[torch.Tensor]
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        raise NotImplementedError

    def transition(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Angles and scale for ``x (..., input_size)``."""
        return self.transition_from([getattr(self, name)(x) for name in self.transition_layers])

    def _input_term(self, k_z: torch.Tensor, k_h: torch.Tensor) -> torch.Tensor:
        b = torch.sigmoid(k_z) * k_h
        return b.reshape(*k_z.shape[:-1], self.n_blocks, self.block_size)

    def _projections(self, x: torch.Tensor):
        """``(b, theta, scale)`` from one GEMM over every projection of ``x``."""
        layers = [getattr(self, name) for name in self.transition_layers]
        layers += [self.linear_z, self.linear_h]
        k = project(x, *layers)  # its dtype (not x's, which autocast may differ from) rules
        *parts, k_z, k_h = k.split([layer.out_features for layer in layers], dim=-1)
        return (self._input_term(k_z, k_h), *self.transition_from(parts))

    def _log_gamma(self, delta_t, batch: int, steps: int | None, *, like: torch.Tensor):
        lg = self.decay.log_gamma(delta_t, batch, steps, like=like)
        if lg is None:
            return None
        shape = (batch, self.n_blocks) if steps is None else (batch, steps, self.n_blocks)
        return lg.expand(shape).contiguous()  # fixed decay gives one channel: one per block

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
        """States ``h (B, T, hidden)`` for ``x (B, T, input_size)``; ``h_0 (B, 1, hidden)``
        overrides the learned initial state; ``delta_t (B, T)`` or ``(B, T, 1)`` with decay.
        With ``return_state`` also the last state ``(B, 1, hidden)``.

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one
        row, ``B = 1``) every sequence starts from its own state: ``h_0`` is ``(N, 1, hidden)``
        (default: the learned ``h0`` for each), ``delta_t`` ``(1, T)``, and the state returned
        is ``(N, 1, hidden)``, each sequence's last (an empty one's is its ``h_0``).

        With ``sequence_group`` (a ``torch.distributed`` process group) the sequence is split
        along T across its ranks: ``x (B, T_r, input_size)`` and ``delta_t (B, T_r)`` are this
        rank's contiguous slice (in rank order; lengths may differ), ``h_0 (B, 1, hidden)`` the
        state before the whole sequence, the result this slice's states ``(B, T_r, hidden)``
        and a returned state ``(B, 1, hidden)`` the whole sequence's, on every rank. Each
        slice acts on every block's state as ``h ↦ P h + Z`` (``P (B, n, k, k)`` the product
        of its transitions): ONE all-gather of ``(k·k + k)·n·B`` values per rank
        (:func:`mingru._sharding.matrix_sequence_parallel`).

        A NaN in ``h_0`` is a ``ValueError`` (checked in eager calls, one small device read;
        not under ``torch.compile``)."""
        check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        n, k = self.n_blocks, self.block_size
        check_not_packed(cu_seqlens, sequence_group, type(self).__name__)
        cu, n_states = packed_offsets(cu_seqlens, x)
        if cu is None and sequence_group is None:
            k, h0, log_gamma = self._cell_inputs(x, h_0, delta_t)
            fused = self._run_cell(k, initial_state=h0, log_gamma=log_gamma)
            return (fused, fused[:, -1:]) if return_state else fused
        b, theta, scale = self._projections(x)
        if h_0 is None:
            h0 = self.h0.to(b.dtype).reshape(1, n, k).expand(n_states, n, k).contiguous()
        else:
            h0 = check_state(h_0, n_states, self.hidden_size, name="h_0", sequence=True, like=b)
            h0 = h0.reshape(n_states, n, k)
        log_gamma = self._log_gamma(delta_t, B, T, like=b)
        if sequence_group is not None:
            out = _sharded_givens(theta.to(b.dtype), b, h0=h0, scale=_cast(scale, b),
                                  log_gamma=log_gamma, group=check_group(sequence_group),
                                  return_final_state=return_state)
            if not return_state:
                return out.reshape(B, T, self.hidden_size)
            return out[0].reshape(B, T, self.hidden_size), out[1].reshape(B, 1, self.hidden_size)
        h = _run_givens_recurrence(theta.to(b.dtype), b, h0=h0, scale=_cast(scale, b),
                                   log_gamma=log_gamma, cu_seqlens=cu
                                   ).reshape(B, T, self.hidden_size)
        if not return_state:
            return h
        if cu is None:
            return h, h[:, -1:]
        last = final_states(h, segments(cu, T), h0.reshape(n_states, self.hidden_size))
        return h, last[:, None]

    def _run_cell(self, k: torch.Tensor, *, initial_state: torch.Tensor,
                  log_gamma: torch.Tensor | None) -> torch.Tensor:
        """The subclass's fused cell on checked inputs: ``h (B, T, hidden)`` from ``k (B, T,
        W)``, ``initial_state (B, hidden)`` and ``log_gamma (B, T, n)`` or ``None``."""
        raise NotImplementedError

    def _cell_inputs(self, x: torch.Tensor, h_0: torch.Tensor | None,
                     delta_t: torch.Tensor | None, *, token: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """What the fused cell takes: the one projection ``k (B, T, W)`` (the transition's
        layers, then ``linear_z`` and ``linear_h``, side by side), ``h0 (B, hidden)`` and
        ``log γ (B, T, n)`` (or ``None``), in ``k``'s dtype. With ``token``, ``x (B, 1,
        input_size)`` is one step's input, ``h_0`` is the step's ``h_prev (B, hidden)`` and
        ``delta_t`` the step's gaps, checked as :meth:`step` takes them."""
        B, T, _ = x.shape
        layers = [getattr(self, name) for name in self.transition_layers]
        k = project(x, *layers, self.linear_z, self.linear_h)
        if h_0 is None:
            h0 = self.h0.to(k.dtype).expand(B, self.hidden_size)
        else:
            h0 = check_state(h_0, B, self.hidden_size, name="h_prev" if token else "h_0",
                             sequence=not token, like=k)
        log_gamma = self._log_gamma(delta_t, B, None if token else T, like=k)
        if token and log_gamma is not None:
            log_gamma = log_gamma[:, None]
        return k, h0.reshape(B, self.hidden_size).contiguous(), log_gamma

    def step(
        self,
        x_t: torch.Tensor,
        h_prev: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """One token: ``h_t (B, hidden)`` from ``x_t (B, input_size)`` and ``h_prev (B, hidden)``
        (default: the learned ``h0``): the forward's fused cell at T = 1, one kernel on a GPU.

        Checks shapes, dtypes and devices, never values: no host synchronisation, so the
        step can be captured in a CUDA graph or compiled with ``fullgraph=True``."""
        check_token(x_t, self.input_size, module=self)
        k, h0, log_gamma = self._cell_inputs(x_t[:, None], h_prev, delta_t, token=True)
        return self._run_cell(k, initial_state=h0, log_gamma=log_gamma)[:, 0]


def _sharded_givens(
    theta: torch.Tensor,
    b: torch.Tensor,
    *,
    h0: torch.Tensor,
    scale: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
    group: Any,
    return_final_state: bool,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """This rank's states ``h (B, T_r, n, k)`` of the Givens recurrence sharded along T over
    ``group`` (and the whole sequence's final state ``(B, n, k)``).

    Shapes as in :func:`mingru.scans._givens_recurrence` for this rank's slice; ``h0
    (B, n, k)`` is the state before the whole sequence. The slice's map per block is
    ``P = M_T ⋯ M_1`` (``(B, n, k, k)``, from the transitions ``M_t = γ_t G(θ_t)
    diag(scale_t)``) and ``Z`` its final state from zero.
    """

    def run(h_in: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = _run_givens_recurrence(theta, b, h0=h_in[..., 0], scale=scale, log_gamma=log_gamma)
        return h, h[:, -1, ..., None]

    product = slice_product(theta, scale, log_gamma)
    _, zero_start = run(torch.zeros_like(h0).unsqueeze(-1))
    out = matrix_sequence_parallel(run, product, zero_start=zero_start,
                                   initial_state=h0.unsqueeze(-1), group=group,
                                   return_final_state=return_final_state)
    return (out[0], out[1][..., 0]) if return_final_state else out


PRODUCT_CHUNK = 256  # steps whose k×k transitions exist at once in :func:`slice_product`


def slice_product(
    theta: torch.Tensor,
    scale: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
    chunk: int = PRODUCT_CHUNK,
) -> torch.Tensor:
    """``P = M_T ⋯ M_1`` ``(B, n, k, k)`` of the Givens transitions of ``theta (B, T, n, R,
    k/2)``, ``scale (B, T, n, k)`` or ``None``, ``log_gamma (B, T, n)`` or ``None``.

    Chunks of ``chunk`` steps form their ``k×k`` transitions and reduce them under activation
    checkpointing, so only one chunk's matrices (not ``T·n·k²`` numbers, which the fused
    kernel never forms) are held at a time and the backward recomputes them; the chunk
    products are then reduced in turn. Differentiable.
    """

    def product(th: torch.Tensor, sc: torch.Tensor | None,
                lg: torch.Tensor | None) -> torch.Tensor:
        return chain_product(givens_transitions(th, sc, lg))

    T = theta.shape[1]
    if T <= chunk:
        return product(theta, scale, log_gamma)
    parts = []
    for lo in range(0, T, chunk):
        part = [None if t is None else t[:, lo:lo + chunk] for t in (theta, scale, log_gamma)]
        parts.append(checkpoint(product, *part, use_reentrant=False))
    return chain_product(torch.stack(parts, dim=1))


class GivensMinGRU(BlockRotationBase):
    """MinGRU with block transitions in SO(k) from ``rounds`` layers of Givens rotations
    (Clements et al. 2016; EUNN, Jing et al. 2017).

    Args:
        input_size: features of ``x``.
        hidden_size: features of the state; a multiple of ``block_size``.
        bias: bias in the linear layers.
        block_size: ``k``, even; the state is ``n = hidden/k`` independent blocks.
        rounds: ``R ≥ 1`` brick-wall layers; ``W_θ x`` gives ``n·R·k/2`` angles, reshaped
            ``(…, n, R, k/2)``: angle ``[b, r, m]`` rotates plane ``m`` of round ``r`` of block
            ``b``; round 0 acts first.
        decay: ``None``, ``"fixed"`` or ``"learnable"`` time decay (one rate per block).
        decay_rate: ``λ`` (fixed) or its initial value (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` on the time gaps.

    Shapes: ``forward(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None) ->
    h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden), delta_t=None) ->
    h_t (B, hidden)``. The initial state is the parameter ``h0 ~ N(0, 0.5²)`` unless given.

    Example:
        >>> import torch
        >>> from mingru import GivensMinGRU
        >>> m = GivensMinGRU(8, 16, block_size=4, rounds=2)
        >>> h = m(torch.randn(2, 10, 8))
        >>> m.step(torch.randn(2, 8), h[:, -1]).shape
        torch.Size([2, 16])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        block_size: int = 8,
        rounds: int = 3,
        decay: str | None = None,
        decay_rate: float = 1.0,
        log1p_delta: bool = False,
    ) -> None:
        super().__init__()
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.n_blocks = check_givens(hidden_size, block_size, rounds)
        self.block_size = block_size
        self.rounds = rounds
        n_angles = self.n_blocks * rounds * (block_size // 2)
        self.linear_theta = nn.Linear(input_size, n_angles, bias=bias)
        self.linear_z = nn.Linear(input_size, hidden_size, bias=bias)
        self.linear_h = nn.Linear(input_size, hidden_size, bias=bias)
        self.h0 = nn.Parameter(torch.randn(hidden_size) * 0.5)
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=self.n_blocks)

    transition_layers = ("linear_theta",)

    def _run_cell(self, k: torch.Tensor, *, initial_state: torch.Tensor,
                  log_gamma: torch.Tensor | None) -> torch.Tensor:
        """:func:`mingru.cells.givens_cell` (its checks hold by construction): on CUDA one
        kernel each way reads the angles and gates from the projection in place (no per-gate
        tensor)."""
        return _run_givens_cell(k, initial_state=initial_state, log_gamma=log_gamma,
                                block_size=self.block_size, rounds=self.rounds)

    def transition_from(self, parts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, None]:
        """Angles ``(..., n, rounds, k/2)`` from ``linear_theta``'s output; no scale."""
        (theta,) = parts
        lead = theta.shape[:-1]
        return theta.reshape(*lead, self.n_blocks, self.rounds, self.block_size // 2), None

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, "
            f"block_size={self.block_size}, rounds={self.rounds}"
        )
