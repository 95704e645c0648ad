"""MinGRUStack (Flax NNX): input projection → ``n_layers`` blocks → LayerNorm.
The twin of :mod:`mingru.stack`.

Layers may mix different mixers (e.g. ``["signed", "givens"]``). Every layer returns its
recurrent state, so a long sequence can be processed in chunks with results identical to one
call on the whole sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax._validate import checked_call
from mingru_jax.block import MinGRUBlock
from mingru_jax.mixers._common import check_sequence, check_token, layer_norm, linear
from mingru_kernels._spec import check_size, check_stack_state, layer_gaps, stack_layer_specs

__all__ = ["MinGRUStack"]

State = list[jax.Array | None]


class MinGRUStack(nnx.Module):
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
            :class:`~mingru_jax.block.MinGRUBlock`): ``S_l = m·d_model`` for the state-output
            mixers, ``n_heads·d_k·d_v`` for ``"delta"`` (which takes ``m = 1`` only).
        dtype, param_dtype: as in every layer.
        rngs: :class:`flax.nnx.Rngs`.

    Shapes: ``__call__(x (B, T, input_size), state=None, delta_t=None) -> (out (B, T, d_model),
    [state (B, 1, S_l) per layer])``; ``step(x_t (B, input_size), state, delta_t=None) ->
    (out_t (B, d_model), [state (B, S_l) per layer])``. ``delta_t`` (``(B, T)`` / ``(B,)``)
    goes only to the layers with decay.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRUStack
        >>> model = MinGRUStack(3, 16, 2, mixer=["signed", "givens"],
        ...                     mixer_kwargs={"givens": {"block_size": 4}}, rngs=nnx.Rngs(0))
        >>> x = jnp.ones((2, 12, 3))
        >>> out, state = model(x[:, :5])
        >>> out2, state = model(x[:, 5:], state)      # same as model(x)[0][:, 5:]
        >>> out_t, state = model.step(x[:, 0], model.init_state())
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
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.input_size = check_size(input_size, "input_size")
        self.d_model = check_size(d_model, "d_model")
        self.n_layers = check_size(n_layers, "n_layers")
        specs = stack_layer_specs(mixer, mixer_kwargs, n_layers, decay_layers=decay_layers)
        self.decay_layers = decay_layers
        kw = dict(dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        if input_size != d_model:
            self.in_proj = linear(input_size, d_model, **kw)
        else:
            self.in_proj = nnx.data(None)  # identity (torch: nn.Identity, no parameters)
        self.blocks = nnx.List(
            [
                MinGRUBlock(d_model, mlp_expansion, dropout, learnable_h0=learnable_h0, mixer=name,
                            mixer_kwargs=kwargs, mixer_expansion=mixer_expansion, **kw)
                for name, kwargs in specs
            ]
        )
        self.norm = layer_norm(d_model, **kw)

    def init_state(self) -> State:
        """The start state: ``[None] * n_layers`` (each layer uses its mixer's default)."""
        return [None] * self.n_layers

    def _check_state(self, state: Sequence[jax.Array | None] | None) -> State:
        return check_stack_state(state, self.n_layers)

    def _gaps(self, delta_t: jax.Array | None) -> list[jax.Array | None]:
        return layer_gaps(delta_t, [block.decay_enabled for block in self.blocks])

    def _project(self, x: jax.Array) -> jax.Array:
        return x if self.in_proj is None else self.in_proj(x)

    def __call__(
        self,
        x: jax.Array,
        state: Sequence[jax.Array | None] | None = None,
        delta_t: jax.Array | None = None,
        *,
        cu_seqlens: jax.Array | None = None,
        axis_name: str | None = None,
    ) -> tuple[jax.Array, State]:
        """``(out (B, T, d_model), new_state)`` for ``x (B, T, input_size)``.

        With ``cu_seqlens`` (keyword-only: ``(N+1,)`` integer offsets, starting at 0,
        non-decreasing, ending at T, of ``N`` sequences packed in one row; passed to every
        block) ``x`` is ``(1, T, input_size)``, ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, each
        layer's ``state`` entry ``(N, 1, S_l)`` or ``None`` (the mixer's default for every
        sequence), and ``new_state`` holds each layer's per-sequence last states
        ``(N, 1, S_l)`` (an empty sequence's is its initial state).

        With ``axis_name`` (a mesh axis bound by :func:`jax.shard_map`; keyword-only; passed
        to every block) the sequence is split along T across that axis: ``x (B, T_local,
        input_size)`` and ``delta_t`` are this device's contiguous slice (slices in
        ``jax.lax.axis_index`` order), ``state`` the state before the whole sequence, ``out``
        this slice's outputs and ``new_state`` the whole sequence's final states (the same on
        every device).

        A NaN in a layer's ``state`` is a ``ValueError`` naming it (``state[l]``; checked here,
        once for every layer, when the states are concrete: one small device read; not under
        ``jax.jit``)."""
        x = check_sequence(x, self.input_size, module=self)
        state = self._check_state(state)
        return checked_call([(f"state[{i}]", s) for i, s in enumerate(state)], self._call, x,
                            state, delta_t, cu_seqlens=cu_seqlens, axis_name=axis_name)

    def _call(
        self,
        x: jax.Array,
        state: State,
        delta_t: jax.Array | None,
        *,
        cu_seqlens: jax.Array | None,
        axis_name: str | None,
    ) -> tuple[jax.Array, State]:
        h = self._project(x)
        new_state: State = []
        for block, s, dt in zip(self.blocks, state, self._gaps(delta_t), strict=True):
            h, s = block(h, s, dt, cu_seqlens=cu_seqlens, axis_name=axis_name)
            new_state.append(s)
        return self.norm(h), new_state

    def step(
        self,
        x_t: jax.Array,
        state: Sequence[jax.Array | None] | None = None,
        delta_t: jax.Array | None = None,
    ) -> tuple[jax.Array, State]:
        """``(out_t (B, d_model), new_state)`` for one token ``x_t (B, input_size)``."""
        x_t = check_token(x_t, self.input_size, module=self)
        state = self._check_state(state)
        h = self._project(x_t)
        new_state: State = []
        for block, s, dt in zip(self.blocks, state, self._gaps(delta_t), strict=True):
            h, s = block.step(h, s, dt)
            new_state.append(s)
        return self.norm(h), new_state
