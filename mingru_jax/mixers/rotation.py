"""RotationMinGRU (Flax NNX): 2×2 block transitions ``M_t = R(θ_t) · diag(1, tanh(u_t))``.
The twin of :mod:`mingru.mixers.rotation`.

A rotation by ``2π/K`` generates the cyclic group ``Z_K``, so snapping the input-dependent
angle to multiples of ``2π/K`` lets a linear RNN count modulo K exactly over any length
(Merrill, Petty & Sabharwal 2024; Grazzi et al. 2025; Jing et al. 2017). The ``tanh(u)``
scale on the second channel lets each block also forget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from mingru_jax.mixers._common import MixerCell, TimeDecay, check_size, linear
from mingru_jax.mixers.givens import BlockRotationBase
from mingru_kernels._spec import check_rotation_hidden, check_snap, snap_per_block

__all__ = ["RotationMinGRU", "RotationMinGRUCell"]


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
        dtype: computation dtype of the projections (``None``: promote input and params).
        param_dtype: dtype of the parameters.
        rngs: :class:`flax.nnx.Rngs` for the initialisation.

    Shapes: ``__call__(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None) ->
    h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden), delta_t=None) ->
    h_t (B, hidden)``. The initial state is the parameter ``h0 ~ N(0, 0.5²)`` unless given.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import RotationMinGRU
        >>> m = RotationMinGRU(8, 16, snap=(2, 3), rngs=nnx.Rngs(0))
        >>> h = m(jnp.ones((2, 10, 8)))
        >>> m.step(jnp.ones((2, 8)), h[:, -1]).shape
        (2, 16)
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
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.state_size = hidden_size
        n = check_rotation_hidden(hidden_size)
        self.snap = check_snap(snap)
        self.block_size = 2
        self.n_blocks = n
        kw = dict(bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_theta = linear(input_size, n, **kw)
        self.linear_u = linear(input_size, n, **kw)
        self.linear_z = linear(input_size, hidden_size, **kw)
        self.linear_h = linear(input_size, hidden_size, **kw)
        self.h0 = nnx.Param(0.5 * jax.random.normal(rngs.params(), (hidden_size,), param_dtype))
        self.decay = TimeDecay(decay, decay_rate, log1p_delta, channels=n, param_dtype=param_dtype)

    def snap_angles(self, theta: jax.Array) -> jax.Array:
        """Round ``theta (..., n)`` to multiples of ``2π/K_j`` (half to even), straight-through.

        The value is exactly ``round(θ / (2π/K)) · (2π/K)``; the gradient is the identity.
        """
        if self.snap is None:
            return theta
        K = np.array(snap_per_block(self.snap, self.n_blocks), np.float64)
        unit = jnp.asarray(2 * math.pi, theta.dtype) / jnp.asarray(K, theta.dtype)
        snapped = jnp.round(theta / unit) * unit
        # theta - stop_gradient(theta) is exactly 0, so the value stays exactly `snapped`.
        return jax.lax.stop_gradient(snapped) + (theta - jax.lax.stop_gradient(theta))

    transition_layers = ("linear_theta", "linear_u")

    def transition_from(self, parts: Sequence[jax.Array]) -> tuple[jax.Array, jax.Array]:
        """Angles ``(..., n, 1, 1)`` and the scale ``[1, tanh(u)]`` ``(..., n, 2)`` from the
        outputs of ``linear_theta`` and ``linear_u``."""
        k_theta, k_u = parts
        theta = self.snap_angles(k_theta)
        s = jnp.tanh(k_u)
        scale = jnp.stack([jnp.ones_like(s), s], axis=-1)
        return theta[..., None, None], scale


class RotationMinGRUCell(MixerCell):
    """:class:`RotationMinGRU` as a :class:`flax.nnx.RNN` cell (carry = output = ``h``).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import RotationMinGRUCell
        >>> rnn = nnx.RNN(RotationMinGRUCell(3, 4, rngs=nnx.Rngs(0)))
        >>> rnn(jnp.ones((2, 5, 3))).shape
        (2, 5, 4)
    """

    mixer_type = RotationMinGRU
