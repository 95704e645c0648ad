"""MinGRUStack: input projection → ``n_layers`` :class:`~mingru.block.MinGRUBlock` → LayerNorm.

Layers may mix different mixers (e.g. ``["signed", "givens"]``: a parity-capable diagonal
layer under a rotation layer). Every layer returns its recurrent state, so a long sequence
can be processed in chunks with results identical to one call on the whole sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from mingru._validate import checked_call
from mingru.block import MinGRUBlock, add_layer_norm
from mingru.mixers._common import check_sequence, check_token
from mingru_kernels._spec import check_size, check_stack_state, layer_gaps, stack_layer_specs

__all__ = ["MinGRUStack"]

State = list[torch.Tensor | None]


class MinGRUStack(nn.Module):
    """A stack of pre-norm residual mixer blocks.

    Args:
        input_size: features of ``x``; projected to ``d_model`` (identity when equal).
        d_model: width of every block.
        n_layers: number of blocks (≥ 1).
        mlp_expansion: MLP width factor in each block; ``0`` drops the MLPs.
        dropout: dropout on each block's branch outputs.
        learnable_h0: forwarded to the layers whose mixer takes it (``"log"``, ``"signed"``).
        mixer: one mixer name for every layer, or a list of ``n_layers`` names.
        mixer_kwargs: with one name, a flat dict of that mixer's arguments; with a list, a
            dict keyed by mixer name (``{"givens": {"block_size": 4}}``).
        decay_layers: ``"all"`` keeps the decay arguments (``decay``, ``decay_rate``,
            ``log1p_delta``) on every layer; ``"last"`` keeps them on the last layer only.
        mixer_expansion: width factor ``m`` of every layer's mixer state (keyword only; see
            :class:`~mingru.block.MinGRUBlock`): ``S_l = m·d_model`` for the state-output
            mixers, ``n_heads·d_k·d_v`` for ``"delta"`` (which takes ``m = 1`` only).

    Shapes: ``forward(x (B, T, input_size), state=None, delta_t=None) -> (out (B, T, d_model),
    [state (B, 1, S_l) per layer])``; ``step(x_t (B, input_size), state, delta_t=None) ->
    (out_t (B, d_model), [state (B, S_l) per layer])``. ``delta_t`` (``(B, T)`` / ``(B,)``)
    goes only to the layers with decay.

    Example:
        >>> import torch
        >>> from mingru import MinGRUStack
        >>> model = MinGRUStack(3, 16, 2, mixer=["signed", "givens"],
        ...                     mixer_kwargs={"givens": {"block_size": 4}})
        >>> x = torch.randn(2, 12, 3)
        >>> out, state = model(x[:, :5])
        >>> out2, state = model(x[:, 5:], state)      # same as model(x)[0][:, 5:]
        >>> state = model.init_state()
        >>> out_t, state = model.step(x[:, 0], state)
    """

    def __init__(
        self,
        input_size: int,
        d_model: int,
        n_layers: int,
        mlp_expansion: int = 4,
        dropout: float = 0.0,
        learnable_h0: bool = False,
        mixer: str | Sequence[str] = "log",
        mixer_kwargs: dict[str, Any] | None = None,
        decay_layers: str = "all",
        *,
        mixer_expansion: int = 1,
    ) -> None:
        super().__init__()
        self.input_size = check_size(input_size, "input_size")
        self.d_model = check_size(d_model, "d_model")
        self.n_layers = check_size(n_layers, "n_layers")
        specs = stack_layer_specs(mixer, mixer_kwargs, n_layers, decay_layers=decay_layers)
        self.decay_layers = decay_layers
        self.in_proj = nn.Linear(input_size, d_model) if input_size != d_model else nn.Identity()
        self.blocks = nn.ModuleList(
            MinGRUBlock(d_model, mlp_expansion, dropout, learnable_h0=learnable_h0, mixer=name,
                        mixer_kwargs=kwargs, mixer_expansion=mixer_expansion)
            for name, kwargs in specs
        )
        self.norm = nn.LayerNorm(d_model, eps=1e-5)

    def init_state(self) -> State:
        """The start state: ``[None] * n_layers`` (each layer uses its mixer's default)."""
        return [None] * self.n_layers

    def _check_state(self, state: Sequence[torch.Tensor | None] | None) -> State:
        return check_stack_state(state, self.n_layers)

    def _gaps(self, delta_t: torch.Tensor | None) -> list[torch.Tensor | None]:
        return layer_gaps(delta_t, [block.decay_enabled for block in self.blocks])

    def forward(
        self,
        x: torch.Tensor,
        state: Sequence[torch.Tensor | None] | None = None,
        delta_t: torch.Tensor | None = None,
        *,
        cu_seqlens: torch.Tensor | None = None,
        sequence_group: Any = None,
    ) -> tuple[torch.Tensor, State]:
        """``(out (B, T, d_model), new_state)`` for ``x (B, T, input_size)``.

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one row,
        ``B = 1``) every layer restarts at every sequence: each layer's state in ``state`` and
        ``new_state`` is ``(N, 1, S_l)``, one per sequence.

        With ``sequence_group`` (a ``torch.distributed`` process group) the sequence is split
        along T across its ranks: ``x (B, T_r, input_size)`` and ``delta_t (B, T_r)`` are this
        rank's contiguous slice (in rank order), each layer's ``state`` ``(B, 1, S_l)`` the
        state before the whole sequence; ``out (B, T_r, d_model)`` is this slice's and every
        ``new_state`` entry the whole sequence's, on every rank (one exchange per layer).

        A NaN in a layer's ``state`` is a ``ValueError`` naming it (``state[l]``; checked here,
        once for every layer, in eager calls: one small device read; not under
        ``torch.compile``)."""
        check_sequence(x, self.input_size, module=self)
        state = self._check_state(state)
        return checked_call([(f"state[{i}]", s) for i, s in enumerate(state)], self._forward,
                            x, state, delta_t, cu_seqlens=cu_seqlens,
                            sequence_group=sequence_group)

    def _forward(
        self,
        x: torch.Tensor,
        state: State,
        delta_t: torch.Tensor | None,
        *,
        cu_seqlens: torch.Tensor | None,
        sequence_group: Any,
    ) -> tuple[torch.Tensor, State]:
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        if sequence_group is not None:
            packed["sequence_group"] = sequence_group
        h = self.in_proj(x)
        new_state: State = []
        for block, s, dt in zip(self.blocks, state, self._gaps(delta_t), strict=True):
            h, s = block(h, s, dt, **packed)
            new_state.append(s)
        return self.norm(h), new_state

    def step(
        self,
        x_t: torch.Tensor,
        state: Sequence[torch.Tensor | None] | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, State]:
        """``(out_t (B, d_model), new_state)`` for one token ``x_t (B, input_size)``.

        Checks shapes, dtypes and devices, never values: no host synchronisation, so the
        step can be captured in a CUDA graph or compiled with ``fullgraph=True``."""
        check_token(x_t, self.input_size, module=self)
        state = self._check_state(state)
        h, branch = self.in_proj(x_t), None
        new_state: State = []
        # Each block's residual add is left to the next norm (fused with it where it can be).
        for block, s, dt in zip(self.blocks, state, self._gaps(delta_t), strict=True):
            h, branch, s = block._step_residual(h, branch, h_prev=s, delta_t=dt)
            new_state.append(s)
        return add_layer_norm(self.norm, h, branch)[1], new_state
