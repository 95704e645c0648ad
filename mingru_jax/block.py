"""MinGRUBlock (Flax NNX): a pre-norm residual block around any of the five mixers.
The twin of :mod:`mingru.block`.

    y   = x + Dropout(out_proj(mixer(LayerNorm(x))))
    out = y + Dropout(MLP(LayerNorm(y)))          (MLP: Linear d→e·d, GELU (erf), Linear e·d→d)

``out_proj`` (``Linear m·d→d``) is there only with a ``mixer_expansion`` ``m > 1``, whose mixer
has an ``m·d``-wide state (:func:`mingru_kernels._spec.check_mixer_expansion`).

The mixer is chosen by name (``"log"``, ``"signed"``, ``"rotation"``, ``"givens"``,
``"delta"``) and imported on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax._sharding import check_axis
from mingru_jax._validate import checks_state
from mingru_jax.mixers._common import check_sequence, check_token, layer_norm, linear
from mingru_kernels._spec import (
    DECAY_KWARGS,
    block_mixer_kwargs,
    check_block_args,
    check_mixer_expansion,
    check_mixer_name,
    check_size,
    mixer_registry,
)

__all__ = ["DECAY_KWARGS", "MIXERS", "MinGRUBlock", "check_mixer_name", "mixer_class"]

# name -> (module, class), the same registry as the PyTorch frontend.
MIXERS: dict[str, tuple[str, str]] = mixer_registry("mingru_jax")
_SET_BY_BLOCK = ("input_size", "hidden_size", "learnable_h0", "rngs", "dtype", "param_dtype")


def mixer_class(name: str) -> type[nnx.Module]:
    """The mixer class registered under ``name``."""
    module, cls = MIXERS[check_mixer_name(name)]
    return getattr(importlib.import_module(module), cls)


def _gelu(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)  # exact erf GELU, as torch.nn.GELU()


class MinGRUBlock(nnx.Module):
    """Pre-norm residual block: ``x + mixer(LN(x))``, then ``x + MLP(LN(x))``.

    Args:
        d_model: features in and out (the mixer gets ``input_size = d_model`` and
            ``hidden_size = mixer_expansion·d_model``).
        mlp_expansion: hidden width factor ``e`` of the MLP; ``0`` drops the MLP.
        dropout: dropout probability on the mixer and MLP branch outputs (active unless the
            module is put in eval mode, ``block.eval()``; needs a ``"dropout"`` stream in
            ``rngs`` when ``> 0``).
        learnable_h0: forwarded to the mixers that take it (``"log"``, ``"signed"``).
        mixer: mixer name: ``"log"``, ``"signed"``, ``"rotation"``, ``"givens"`` or ``"delta"``.
        mixer_kwargs: extra keyword arguments of the mixer (e.g. ``block_size``, ``decay``).
        mixer_expansion: width factor ``m`` of the mixer's state (keyword only; int ≥ 1):
            ``m > 1`` builds the mixer with ``hidden_size = m·d_model`` followed by
            ``out_proj = Linear(m·d_model, d_model)``; ``1`` adds no layer. Not for
            ``"delta"``, which projects its own output (a ``ValueError`` names it).
        dtype, param_dtype: as in every layer; passed to the mixer too.
        rngs: :class:`flax.nnx.Rngs`.

    Shapes: ``__call__(x (B, T, d_model), h_0=None, delta_t=None) -> (out (B, T, d_model),
    state (B, 1, S))`` and ``step(x_t (B, d_model), h_prev=None, delta_t=None) -> (out_t
    (B, d_model), state (B, S))``, where the state is the mixer's last state (``S =
    mixer_expansion·d_model`` for the four state-output mixers; ``n_heads·d_k·d_v`` for
    ``"delta"``).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRUBlock
        >>> block = MinGRUBlock(16, mixer="givens", mixer_kwargs={"block_size": 4},
        ...                     rngs=nnx.Rngs(0))
        >>> out, state = block(jnp.ones((2, 10, 16)))
        >>> out.shape, state.shape
        ((2, 10, 16), (2, 1, 16))
        >>> out_t, state_t = block.step(jnp.ones((2, 16)), state[:, 0])
        >>> wide = MinGRUBlock(16, mixer="log", mixer_expansion=3, rngs=nnx.Rngs(0))
        >>> [t.shape for t in wide(jnp.ones((2, 10, 16)))]
        [(2, 10, 16), (2, 1, 48)]
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
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.d_model = check_size(d_model, "d_model")
        check_block_args(mlp_expansion, dropout)
        self.mixer_name, kwargs = block_mixer_kwargs(
            mixer, mixer_kwargs, learnable_h0,
            reserved=_SET_BY_BLOCK,
            own_args="learnable_h0, dtype, param_dtype and rngs as its own arguments",
        )
        self.mixer_expansion = check_mixer_expansion(mixer_expansion, self.mixer_name)
        width = mixer_expansion * d_model
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        # Creation order as in the PyTorch twin: norm1, mixer, out_proj, norm2, mlp.
        self.norm1 = layer_norm(d_model, **kw)
        self.mixer = mixer_class(self.mixer_name)(d_model, width, **kwargs, **kw)
        # Only when widened, so unexpanded blocks keep their parameters (and checkpoints).
        if mixer_expansion > 1:
            self.out_proj = linear(width, d_model, **kw)
        else:
            self.out_proj = nnx.data(None)
        # The MLP's norm only with an MLP, as in the PyTorch twin.
        self.norm2 = layer_norm(d_model, **kw) if mlp_expansion > 0 else nnx.data(None)
        if mlp_expansion > 0:
            width = mlp_expansion * d_model
            self.mlp = nnx.Sequential(
                linear(d_model, width, **kw), _gelu, linear(width, d_model, **kw)
            )
        else:
            self.mlp = nnx.data(None)
        self.dropout = nnx.Dropout(dropout, rngs=rngs if dropout > 0 else None)

    @property
    def decay_enabled(self) -> bool:
        """Whether the mixer has time decay (and so needs ``delta_t``)."""
        decay = getattr(self.mixer, "decay", None)
        return bool(decay is not None and decay.enabled)

    def _mixed(self, x: jax.Array, y: jax.Array) -> jax.Array:
        """The block's output from its input ``x`` and the mixer's output ``y``."""
        if self.out_proj is not None:
            y = self.out_proj(y)
        return self._feed_forward(x + self.dropout(y))

    def _feed_forward(self, x: jax.Array) -> jax.Array:
        if self.mlp is None:
            return x
        return x + self.dropout(self.mlp(self.norm2(x)))

    @checks_state("h_0")
    def __call__(
        self,
        x: jax.Array,
        h_0: jax.Array | None = None,
        delta_t: jax.Array | None = None,
        *,
        cu_seqlens: jax.Array | None = None,
        axis_name: str | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(out (B, T, d_model), state (B, 1, S))`` for ``x (B, T, d_model)``; ``h_0`` is
        a previous ``state`` (``None``: the mixer's default).

        With ``cu_seqlens`` (keyword-only: ``(N+1,)`` integer offsets, starting at 0,
        non-decreasing, ending at T, of ``N`` sequences packed in one row; passed to the
        mixer, the norms and the MLP being per token) ``x`` is ``(1, T, d_model)``,
        ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, ``h_0`` ``(N, 1, S)`` (default: the mixer's
        initial state for every sequence), every sequence restarts from its own ``h_0`` row,
        and ``state`` is ``(N, 1, S)``, each sequence's last state (an empty sequence's is
        its ``h_0``).

        With ``axis_name`` (a mesh axis bound by :func:`jax.shard_map`; keyword-only; passed
        to the mixer) the sequence is split along T across that axis: ``x (B, T_local,
        d_model)`` and ``delta_t`` are this device's contiguous slice (slices in
        ``jax.lax.axis_index`` order), ``h_0`` the state before the whole sequence, ``out``
        this slice's outputs and ``state`` the whole sequence's final state (the same on
        every device).

        A NaN in ``h_0`` is a ``ValueError`` (checked here, once, when ``h_0`` is concrete:
        one small device read; not under ``jax.jit``)."""
        x = check_sequence(x, self.d_model, module=self)
        if axis_name is not None:
            check_axis(axis_name)
        u = self.norm1(x)
        # Every mixer returns its final state (the whole sequence's under axis_name, one per
        # sequence when packed); cu_seqlens is passed only when given.
        packed = {} if cu_seqlens is None else {"cu_seqlens": cu_seqlens}
        y, state = self.mixer(u, h_0=h_0, delta_t=delta_t, return_state=True,
                              axis_name=axis_name, **packed)
        return self._mixed(x, y), state

    def step(
        self,
        x_t: jax.Array,
        h_prev: jax.Array | None = None,
        delta_t: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """``(out_t (B, d_model), state (B, S))`` for one token ``x_t (B, d_model)``."""
        x_t = check_token(x_t, self.d_model, module=self)
        u = self.norm1(x_t)
        if self.mixer_name == "delta":
            y, state = self.mixer.step(u, h_prev=h_prev, delta_t=delta_t)
        else:
            y = state = self.mixer.step(u, h_prev=h_prev, delta_t=delta_t)
        return self._mixed(x_t, y), state
