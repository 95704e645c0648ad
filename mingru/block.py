"""MinGRUBlock: a pre-norm residual block around any of the five sequence mixers.

    y   = x + Dropout(out_proj(mixer(LayerNorm(x))))
    out = y + Dropout(MLP(LayerNorm(y)))          (MLP: Linear d→e·d, GELU, Linear e·d→d)

``out_proj`` (``Linear m·d→d``) is there only with a ``mixer_expansion`` ``m > 1``, whose mixer
has an ``m·d``-wide state (:func:`mingru_kernels._spec.check_mixer_expansion`).

The mixer is chosen by name (``"log"``, ``"signed"``, ``"rotation"``, ``"givens"``,
``"delta"``) and imported on first use, so a block never imports mixers it does not use.
"""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch import nn

from mingru._validate import checks_state
from mingru.dispatch import select
from mingru.mixers._common import check_sequence, check_token, fused_linear
from mingru_kernels._spec import (
    DECAY_KWARGS,
    block_mixer_kwargs,
    check_block_args,
    check_mixer_expansion,
    check_mixer_name,
    check_size,
    mixer_registry,
)

__all__ = ["DECAY_KWARGS", "MIXERS", "MinGRUBlock", "check_mixer_name", "layer_norm",
           "mixer_class"]

# name -> (module, class). Module names match the names so the registry reads like the tree.
MIXERS: dict[str, tuple[str, str]] = mixer_registry("mingru")
_SET_BY_BLOCK = ("input_size", "hidden_size", "learnable_h0")


def mixer_class(name: str) -> type[nn.Module]:
    """The mixer class registered under ``name``."""
    module, cls = MIXERS[check_mixer_name(name)]
    return getattr(importlib.import_module(module), cls)


def layer_norm(norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
    """``norm(x)`` for a LayerNorm over the last axis of ``x (..., D)``; on the Triton path
    (``MINGRU_SCAN=triton``; ``auto`` from 2^24 elements, where it is the faster path: see
    :func:`mingru._launch.layer_norm.prefer_over_eager`) one fused kernel per direction
    that normalises in float32 and returns the autocast dtype directly when autocast is on
    for ``x``'s device (the dtype the projection after it would cast to), else ``x``'s.
    Under ``torch.compile`` always ``norm(x)``: inductor fuses the norm and its cast.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> norm = nn.LayerNorm(8)
        >>> layer_norm(norm, torch.randn(2, 3, 8)).shape
        torch.Size([2, 3, 8])
    """
    if torch.compiler.is_compiling() or len(norm.normalized_shape) != 1:
        return norm(x)
    # The output dtype does not decide whether the kernels serve: asked only once they do.
    launcher = select("layer_norm", x, weight=norm.weight, bias=norm.bias, eps=norm.eps,
                      out_dtype=None)
    if launcher is None:
        return norm(x)
    device = x.device.type
    out_dtype = (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device)
                 else x.dtype)
    return launcher.run(x, weight=norm.weight, bias=norm.bias, eps=norm.eps, out_dtype=out_dtype)


def add_layer_norm(norm: nn.LayerNorm, x: torch.Tensor,
                   branch: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(s, layer_norm(norm, s))`` with ``s = x + branch`` (``s = x`` when ``branch`` is
    ``None``): a residual add and the norm after it. One fused kernel where the norm takes the
    Triton path and nothing needs a gradient, with ``x`` and ``branch`` of one shape and the
    norm's dtype and autocast off (a captured decode step's case); else the add, then
    :func:`layer_norm`.

    Example:
        >>> import torch
        >>> from torch import nn
        >>> norm, x, branch = nn.LayerNorm(8), torch.randn(2, 8), torch.randn(2, 8)
        >>> total, y = add_layer_norm(norm, x, branch)
        >>> torch.equal(total, x + branch), torch.allclose(y, norm(x + branch))
        (True, True)
    """
    if branch is None:
        return x, layer_norm(norm, x)
    # The norm's parameters read directly: a decode step runs this per norm, and the
    # parameters() generator costs several times the attribute reads.
    params = [p for p in (norm.weight, norm.bias) if p is not None]
    if (not torch.compiler.is_compiling() and len(norm.normalized_shape) == 1
            and x.shape == branch.shape and x.dtype == branch.dtype
            and all(p.dtype == x.dtype for p in params)
            and not torch.is_autocast_enabled(x.device.type)
            and not (torch.is_grad_enabled() and any(
                t.requires_grad for t in (x, branch, *params)))):
        launcher = select("layer_norm", x, weight=norm.weight, bias=norm.bias, eps=norm.eps,
                          out_dtype=None)
        if launcher is not None:
            return launcher.run_add(x, branch, norm.weight, bias=norm.bias, eps=norm.eps)
    total = x + branch
    return total, layer_norm(norm, total)


class MinGRUBlock(nn.Module):
    """Pre-norm residual block: ``x + mixer(LN(x))``, then ``x + MLP(LN(x))``.

    Args:
        d_model: features in and out (the mixer gets ``input_size = d_model`` and
            ``hidden_size = mixer_expansion·d_model``).
        mlp_expansion: hidden width factor ``e`` of the MLP; ``0`` drops the MLP.
        dropout: dropout probability on the mixer and MLP branch outputs.
        learnable_h0: forwarded to the mixers that take it (``"log"``, ``"signed"``).
        mixer: mixer name: ``"log"``, ``"signed"``, ``"rotation"``, ``"givens"`` or ``"delta"``.
        mixer_kwargs: extra keyword arguments of the mixer (e.g. ``block_size``, ``decay``).
        mixer_expansion: width factor ``m`` of the mixer's state (keyword only; int ≥ 1):
            ``m > 1`` builds the mixer with ``hidden_size = m·d_model`` followed by
            ``out_proj = nn.Linear(m·d_model, d_model)``; ``1`` adds no layer. Not for
            ``"delta"``, which projects its own output (a ``ValueError`` names it).

    Shapes: ``forward(x (B, T, d_model), h_0=None, delta_t=None) -> (out (B, T, d_model),
    state (B, 1, S))`` and ``step(x_t (B, d_model), h_prev=None, delta_t=None) -> (out_t
    (B, d_model), state (B, S))``, where the state is the mixer's last state (``S =
    mixer_expansion·d_model`` for the four state-output mixers; ``n_heads·d_k·d_v`` for
    ``"delta"``).

    Example:
        >>> import torch
        >>> from mingru import MinGRUBlock
        >>> block = MinGRUBlock(16, mixer="givens", mixer_kwargs={"block_size": 4})
        >>> out, state = block(torch.randn(2, 10, 16))
        >>> out.shape, state.shape
        (torch.Size([2, 10, 16]), torch.Size([2, 1, 16]))
        >>> out_t, state_t = block.step(torch.randn(2, 16), state[:, 0])
        >>> wide = MinGRUBlock(16, mixer="log", mixer_expansion=3)
        >>> [t.shape for t in wide(torch.randn(2, 10, 16))]
        [torch.Size([2, 10, 16]), torch.Size([2, 1, 48])]
    """

    def __init__(
        self,
        d_model: int,
        mlp_expansion: int = 4,
        dropout: float = 0.0,
        learnable_h0: bool = False,
        mixer: str = "log",
        mixer_kwargs: dict[str, Any] | None = None,
        *,
        mixer_expansion: int = 1,
    ) -> None:
        super().__init__()
        self.d_model = check_size(d_model, "d_model")
        check_block_args(mlp_expansion, dropout)
        self.mixer_name, kwargs = block_mixer_kwargs(
            mixer, mixer_kwargs, learnable_h0,
            reserved=_SET_BY_BLOCK, own_args="learnable_h0 as its own argument",
        )
        self.mixer_expansion = check_mixer_expansion(mixer_expansion, self.mixer_name)
        width = mixer_expansion * d_model
        self.norm1 = nn.LayerNorm(d_model, eps=1e-5)
        self.mixer = mixer_class(self.mixer_name)(d_model, width, **kwargs)
        # Only when widened, so unexpanded blocks keep their parameters (and checkpoints).
        self.out_proj = nn.Linear(width, d_model) if mixer_expansion > 1 else None
        # The MLP's norm only with an MLP: a parameter that never gets a gradient breaks
        # DistributedDataParallel (unused parameters) and misstates the model's size.
        self.norm2 = nn.LayerNorm(d_model, eps=1e-5) if mlp_expansion > 0 else None
        if mlp_expansion > 0:
            self.mlp: nn.Module | None = nn.Sequential(
                nn.Linear(d_model, mlp_expansion * d_model),
                nn.GELU(),
                nn.Linear(mlp_expansion * d_model, d_model),
            )
        else:
            self.mlp = None
        self.dropout = nn.Dropout(dropout)

    @property
    def decay_enabled(self) -> bool:
        """Whether the mixer has time decay (and so needs ``delta_t``)."""
        decay = getattr(self.mixer, "decay", None)
        return bool(decay is not None and decay.enabled)

    def _residual_tail(self, x: torch.Tensor,
                       y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """From the block's input ``x`` and the mixer's output ``y``: ``(x, branch)``, the
        block's output being ``x + branch`` (a stack's step leaves that add to the next norm)."""
        if self.out_proj is not None:
            y = self.out_proj(y)
        y = self.dropout(y)
        if self.mlp is None:
            return x, y
        x, u = add_layer_norm(self.norm2, x, y)
        return x, self.dropout(self._mlp_step(u))

    def _mlp_step(self, u: torch.Tensor) -> torch.Tensor:
        """``self.mlp(u)``; in a captured decode step its two GEMMs on the Triton kernels
        where they serve (:func:`fused_linear`, the GELU in the first one's epilogue)."""
        up, _, down = self.mlp
        hidden = fused_linear(u, up.weight, up.bias, gelu=True)
        if hidden is None:
            return self.mlp(u)
        out = fused_linear(hidden, down.weight, down.bias)
        return down(hidden) if out is None else out

    @checks_state("h_0")
    def forward(
        self,
        x: torch.Tensor,
        h_0: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
        *,
        cu_seqlens: torch.Tensor | None = None,
        sequence_group: Any = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(out (B, T, d_model), state (B, 1, S))`` for ``x (B, T, d_model)``; ``h_0`` is
        a previous ``state`` (``None``: the mixer's default).

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one row,
        ``B = 1``) the mixer restarts at every sequence: ``h_0`` and the returned state are
        ``(N, 1, S)``, one per sequence (the norms and the MLP act per token).

        With ``sequence_group`` (a ``torch.distributed`` process group) the sequence is split
        along T across its ranks: ``x (B, T_r, d_model)`` and ``delta_t (B, T_r)`` are this
        rank's contiguous slice (in rank order), ``h_0 (B, 1, S)`` the state before the whole
        sequence; ``out (B, T_r, d_model)`` is this slice's and ``state (B, 1, S)`` the whole
        sequence's, on every rank (the mixer's exchange is the only communication).

        A NaN in ``h_0`` is a ``ValueError`` (checked here, once, in eager calls: one small
        device read; not under ``torch.compile``)."""
        check_sequence(x, self.d_model, module=self)
        u = layer_norm(self.norm1, x)
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        if sequence_group is not None:
            packed["sequence_group"] = sequence_group
        y, state = self.mixer(u, h_0=h_0, delta_t=delta_t, return_state=True, **packed)
        x, branch = self._residual_tail(x, y)
        return x + branch, state

    def step(
        self,
        x_t: torch.Tensor,
        h_prev: torch.Tensor | None = None,
        delta_t: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(out_t (B, d_model), state (B, S))`` for one token ``x_t (B, d_model)``.

        Checks shapes, dtypes and devices, never values: no host synchronisation, so the
        step can be captured in a CUDA graph or compiled with ``fullgraph=True``."""
        check_token(x_t, self.d_model, module=self)
        x, branch, state = self._step_residual(x_t, None, h_prev=h_prev, delta_t=delta_t)
        return x + branch, state

    def _step_residual(
        self,
        x_t: torch.Tensor,
        branch: torch.Tensor | None,
        *,
        h_prev: torch.Tensor | None,
        delta_t: torch.Tensor | None,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """:meth:`step` on the input ``x_t + branch`` (``branch`` ``None``: ``x_t``), with its
        output left unsummed as well: ``(x, branch, state)``, the output being ``x + branch``.
        A stack passes each block's pair to the next, whose first norm then adds them (one
        fused kernel in a captured decode step). No checks: :meth:`step` makes them."""
        x, u = add_layer_norm(self.norm1, x_t, branch)
        if self.mixer_name == "delta":
            y, state = self.mixer.step(u, h_prev=h_prev, delta_t=delta_t)
        else:
            y = state = self.mixer.step(u, h_prev=h_prev, delta_t=delta_t)
        return *self._residual_tail(x, y), state

    def extra_repr(self) -> str:
        widened = f", mixer_expansion={self.mixer_expansion}" if self.mixer_expansion > 1 else ""
        return f"d_model={self.d_model}, mixer={self.mixer_name!r}{widened}"
