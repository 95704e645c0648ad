"""DeltaMinGRU: a matrix-state mixer on the delta rule (DeltaNet / DeltaProduct).

DeltaNet: Yang, Wang, Zhang, Shen & Kim 2024, "Parallelizing Linear Transformers with the
Delta Rule over Sequence Length", arXiv:2406.06484 (the chunked WY / UT-transform form).
DeltaProduct (``nh > 1`` micro-steps per token): Siems, Carstensen, Zela, Hutter, Pontil &
Grazzi 2025, "DeltaProduct: Improving State-Tracking in Linear RNNs via Householder
Products", arXiv:2502.10297.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from mingru._sharding import check_group, check_not_packed, matrix_sequence_parallel
from mingru._validate import checks_state
from mingru.cells import _run_delta_inputs, _run_delta_rule_step
from mingru.mixers._common import (
    TimeDecay,
    check_sequence,
    check_state,
    check_token,
    packed_offsets,
    project,
)
from mingru.scans import _run_delta_rule
from mingru_kernels._spec import KEY_NORM_EPS, check_delta, check_flag

__all__ = ["KEY_NORM_EPS", "DeltaMinGRU"]

class DeltaMinGRU(nn.Module):
    """Delta-rule mixer with ``n_heads`` matrix states ``S (d_k × d_v)`` per sequence.

    For each token ``t``: ``S ← γ_t S`` (only with decay), then for each micro-step
    ``j = 0..nh-1``: ``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``, with
    ``k_j = normalize(W_k[j] x_t)`` (L2 per head), ``v_j = W_v[j] x_t``,
    ``β_j = 2σ(W_β[j] x_t) ∈ (0, 2)`` (negative eigenvalues ``1 − β`` allow state tracking);
    then ``y_t = out_proj(concat_heads(Sᵀ q_t))`` with ``q_t = W_q x_t`` (not normalized).
    ``nh = 1`` is DeltaNet, ``nh > 1`` DeltaProduct. The output is NOT the state.

    Args:
        input_size: features of ``x``.
        hidden_size: features of the output ``y``.
        bias: biases in every projection, ``out_proj`` included.
        n_heads: number of heads ``H``.
        nh: micro-steps (Householder factors) per token, ``>= 1``.
        d_k: key size per head; defaults to ``hidden_size / n_heads`` (must divide then).
        d_v: value size per head; defaults to ``d_k``.
        chunk_size: tokens per chunk of the parallel (chunked WY) forward; changes speed,
            never the result.
        decay: ``None``, ``"fixed"`` or ``"learnable"`` (one rate per head) time decay
            ``γ_t = exp(−λ f(Δt_t))``.
        decay_rate: ``λ`` (fixed) or its initial value (learnable), ``> 0``.
        log1p_delta: use ``f = log1p`` instead of the identity.
        allow_tf32: let the Triton kernels multiply float32 inputs in TF32 on the tensor
            cores (faster, products to about 1e-3 relative); off by default (products with
            float32 accuracy: FMAs, or 3xTF32 split products at 64-wide heads). Half-
            precision inputs always use the tensor cores.

    Shapes (any float dtype; state size ``Z = n_heads · d_k · d_v``, row-major from
    ``(n_heads, d_k, d_v)``):

    * ``forward(x (B, T, input_size), h_0=None (B, 1, Z), delta_t=None (B, T) | (B, T, 1),
      return_state=False) -> y (B, T, hidden_size)`` or ``(y, state (B, 1, Z))``;
    * packed, ``forward(x (1, T, input_size), h_0=None (N, 1, Z), delta_t=None (1, T) |
      (1, T, 1), return_state=False, cu_seqlens=(N+1,)) -> y (1, T, hidden_size)`` or
      ``(y, state (N, 1, Z))``: ``N`` sequences laid end to end in one row, each starting
      from its own ``h_0[n]`` (zeros by default); ``state[n]`` is sequence ``n``'s final
      state (an empty sequence's is its ``h_0[n]``). Equal to running each sequence alone;
    * ``step(x_t (B, input_size), h_prev=None (B, Z), delta_t=None (B,) | (B, 1))
      -> (y_t (B, hidden_size), h_t (B, Z))``.

    Example:
        >>> import torch
        >>> from mingru.mixers.delta import DeltaMinGRU
        >>> mixer = DeltaMinGRU(8, 16, n_heads=2, nh=2, chunk_size=4)
        >>> x = torch.randn(3, 10, 8)
        >>> y, state = mixer(x, return_state=True)
        >>> y.shape, state.shape
        (torch.Size([3, 10, 16]), torch.Size([3, 1, 128]))
        >>> y_t, h = mixer.step(x[:, 0])
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        n_heads: int = 4,
        nh: int = 1,
        d_k: int | None = None,
        d_v: int | None = None,
        chunk_size: int = 64,
        decay: str | None = None,
        decay_rate: float = 1.0,
        log1p_delta: bool = False,
        allow_tf32: bool = False,
    ) -> None:
        super().__init__()
        check_flag(allow_tf32, "DeltaMinGRU: allow_tf32")
        sizes = check_delta(input_size, hidden_size, n_heads, nh=nh, d_k=d_k, d_v=d_v,
                            chunk_size=chunk_size)
        input_size, hidden_size, n_heads, nh, d_k, d_v, chunk_size = sizes

        self.input_size = input_size
        self.hidden_size = hidden_size
        self.n_heads = n_heads
        self.nh = nh
        self.d_k = d_k
        self.d_v = d_v
        self.chunk_size = chunk_size
        self.allow_tf32 = allow_tf32
        self.state_size = sizes.state_size

        # Creation order is part of the interface (weights convert to the Flax twin).
        self.linear_q = nn.Linear(input_size, n_heads * d_k, bias=bias)
        self.linear_k = nn.ModuleList(
            nn.Linear(input_size, n_heads * d_k, bias=bias) for _ in range(nh)
        )
        self.linear_v = nn.ModuleList(
            nn.Linear(input_size, n_heads * d_v, bias=bias) for _ in range(nh)
        )
        self.linear_beta = nn.ModuleList(
            nn.Linear(input_size, n_heads, bias=bias) for _ in range(nh)
        )
        self.out_proj = nn.Linear(n_heads * d_v, hidden_size, bias=bias)
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=n_heads)

    def _projection(self, x: torch.Tensor) -> torch.Tensor:
        """``p (…, W)``: every projection in one GEMM, columns ``[q | k | v | β-logits]``."""
        layers = [self.linear_q, *self.linear_k, *self.linear_v, *self.linear_beta]
        return project(x, *layers)

    def _project(self, x: torch.Tensor):
        """``q (…, H, d_k)``, ``k (…, nh, H, d_k)``, ``v (…, nh, H, d_v)``, ``β (…, nh, H)``,
        from one GEMM over every projection and one fused pass (:func:`mingru.cells.delta_inputs`)."""
        return _run_delta_inputs(self._projection(x), n_heads=self.n_heads, nh=self.nh,
                                 d_k=self.d_k, d_v=self.d_v, eps=KEY_NORM_EPS)

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
        """Parallel (chunked WY) forward; see the class docstring for shapes.

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one
        row, ``B = 1``; keyword-only) every sequence starts from its own state: ``h_0`` is
        ``(N, 1, Z)`` (default zeros), ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, ``y``
        ``(1, T, hidden_size)`` and the state returned ``(N, 1, Z)``, each sequence's final
        state (an empty one's is its ``h_0``).

        With ``sequence_group`` (a ``torch.distributed`` process group; keyword-only) the
        sequence is split along T across its ranks: ``x (B, T_r, input_size)`` and ``delta_t
        (B, T_r)`` are this rank's contiguous slice (in rank order; lengths may differ),
        ``h_0 (B, 1, Z)`` the state before the whole sequence, ``y (B, T_r, hidden_size)``
        this slice's outputs and a returned state ``(B, 1, Z)`` the whole sequence's, on
        every rank. Each slice maps every head's state as ``S ↦ A S + Z`` (``A (d_k × d_k)``
        the product of its ``γ_t (I − β k kᵀ)`` factors): ONE all-gather of
        ``H·d_k·(d_k + d_v)·B`` values per rank (:func:`_sharded_delta`).

        A NaN in ``h_0`` is a ``ValueError`` (checked in eager calls, one small device read;
        not under ``torch.compile``)."""
        x = check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        H, dk, dv = self.n_heads, self.d_k, self.d_v
        check_not_packed(cu_seqlens, sequence_group, "DeltaMinGRU")
        cu, n_states = packed_offsets(cu_seqlens, x)
        h0 = None
        if h_0 is not None:
            h0 = check_state(h_0, n_states, self.state_size, name="h_0", sequence=True, like=x)
            h0 = h0.reshape(n_states, H, dk, dv)
        log_gamma = self.decay.log_gamma(delta_t, B, T, like=x)
        if log_gamma is not None:
            log_gamma = log_gamma.expand(B, T, H).contiguous()  # fixed rate: one channel
        q, k, v, beta = self._project(x)
        if sequence_group is not None:
            o, h_T = _sharded_delta(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=h0,
                                    chunk_size=self.chunk_size, group=check_group(sequence_group),
                                    allow_tf32=self.allow_tf32)
        else:
            # _delta_rule's checks would repeat the mixer's on what it built: its route.
            o, h_T = _run_delta_rule(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=h0,
                                     chunk_size=self.chunk_size, cu_seqlens=cu,
                                     allow_tf32=self.allow_tf32)
        y = self.out_proj(o.reshape(B, T, H * dv))
        if return_state:
            return y, h_T.reshape(n_states, 1, self.state_size)
        return y

    def step(
        self,
        x_t: torch.Tensor,
        h_prev: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One token, ``O(1)`` in ``T``: ``(y_t (B, hidden_size), h_t (B, Z))``.

        Checks shapes, dtypes and devices, never values: no host synchronisation, so the
        step can be captured in a CUDA graph or compiled with ``fullgraph=True``. On CUDA,
        without gradients (``torch.no_grad()``, ``torch.inference_mode()``: decoding), the
        projection's GEMM, one Triton kernel for the whole delta-rule update
        (op ``delta_rule_step``) and ``out_proj``; with gradients, the eager step."""
        x_t = check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        H, dk, dv = self.n_heads, self.d_k, self.d_v
        S = None
        if h_prev is not None:
            S = check_state(h_prev, B, self.state_size, name="h_prev", sequence=False, like=x_t)
            S = S.reshape(B, H, dk, dv)
        log_gamma = self.decay.log_gamma(delta_t, B, None, like=x_t)
        o, S = _run_delta_rule_step(self._projection(x_t), log_gamma=log_gamma, h_prev=S,
                                    n_heads=H, nh=self.nh, d_k=dk, d_v=dv, eps=KEY_NORM_EPS)
        return self.out_proj(o.reshape(B, H * dv)), S.reshape(B, self.state_size)

    def extra_repr(self) -> str:
        return (
            f"input_size={self.input_size}, hidden_size={self.hidden_size}, "
            f"n_heads={self.n_heads}, nh={self.nh}, d_k={self.d_k}, d_v={self.d_v}, "
            f"chunk_size={self.chunk_size}"
            + (", allow_tf32=True" if self.allow_tf32 else "")
        )


def _sharded_delta(
    q: torch.Tensor,
    *,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_gamma: torch.Tensor | None,
    h0: torch.Tensor | None,
    chunk_size: int,
    group: Any,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule sharded along T over ``group``: ``(o (B, T_r, H, d_v), h_T (B, H, d_k,
    d_v))``, this rank's outputs and the whole sequence's final state.

    Shapes as in :func:`mingru.scans._delta_rule` for this rank's slice; ``h0 (B, H, d_k,
    d_v)`` (or ``None``: zeros) is the state before the whole sequence. Every factor acts on
    the state from the left, so the slice maps ``S ↦ A S + Z``; ONE extra delta-rule pass with
    the values ``[0 | v]`` from ``[I | 0]`` gives ``[A | Z]`` (``d_v + d_k`` columns), then the
    slice runs again from its incoming state for ``o``.
    """
    B, _, _, H, dk = k.shape
    eye = torch.eye(dk, dtype=v.dtype, device=v.device).expand(B, H, dk, dk)
    start = torch.cat([eye, v.new_zeros(B, H, dk, v.shape[-1])], dim=-1)
    wide_v = torch.cat([v.new_zeros(*v.shape[:-1], dk), v], dim=-1)
    _, maps = _run_delta_rule(q, k=k, v=wide_v, beta=beta, log_gamma=log_gamma, h0=start,
                              chunk_size=chunk_size, allow_tf32=allow_tf32)
    product, zero_start = maps[..., :dk], maps[..., dk:]
    return matrix_sequence_parallel(
        lambda h_in: _run_delta_rule(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=h_in,
                                     chunk_size=chunk_size, allow_tf32=allow_tf32),
        product, zero_start=zero_start, initial_state=h0, group=group, return_final_state=True)
