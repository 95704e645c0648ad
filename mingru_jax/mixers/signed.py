"""SignedMinGRU (Flax NNX): a minGRU whose transition may be negative, on the states-only
linear recurrence.
The twin of :mod:`mingru.mixers.signed`.

    z_t = σ(W_z x_t),   s_t = tanh(W_s x_t),   a_t = γ_t s_t  (or γ_t (1 − z_t) s_t when coupled),
    h_t = a_t ⊙ h_{t−1} + z_t ⊙ (W_h x_t).

Negative eigenvalues let a diagonal linear RNN track state such as parity (Merrill, Petty &
Sabharwal 2024, arXiv:2404.08819; Grazzi et al. 2025, arXiv:2411.12537).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax._sharding import check_axis
from mingru_jax._validate import checks_state
from mingru_jax.cells import _run_mingru_cell
from mingru_jax.mixers._common import (
    MixerCell,
    TimeDecay,
    check_call_state,
    check_sequence,
    check_size,
    check_state,
    check_token,
    linear,
    packed_offsets,
    project,
)

__all__ = ["SignedMinGRU", "SignedMinGRUCell"]


class SignedMinGRU(nnx.Module):
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
        dtype: computation dtype of the projections (``None``: promote input and params).
        param_dtype: dtype of the parameters.
        rngs: :class:`flax.nnx.Rngs` for the initialisation.

    Shapes: ``__call__(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None (B, T) or
    (B, T, 1)) -> h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden),
    delta_t=None (B,) or (B, 1)) -> h_t (B, hidden)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import SignedMinGRU
        >>> m = SignedMinGRU(8, 16, coupled=True, rngs=nnx.Rngs(0))
        >>> h = m(jnp.ones((2, 10, 8)))
        >>> m.step(jnp.ones((2, 8)), h[:, -1]).shape
        (2, 16)
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
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.state_size = hidden_size
        self.coupled = bool(coupled)
        kw = dict(bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_z = linear(input_size, hidden_size, **kw)
        self.linear_s = linear(input_size, hidden_size, **kw)
        self.linear_h = linear(input_size, hidden_size, **kw)
        if learnable_h0:
            self.h0 = nnx.Param(jnp.zeros((hidden_size,), param_dtype))
        else:
            self.h0 = nnx.data(None)
        self.decay = TimeDecay(
            decay, decay_rate, log1p_delta, channels=hidden_size, param_dtype=param_dtype
        )

    def initial_state(self, batch: int, dtype: Any = None) -> jax.Array:
        """The default ``h_0`` as a step state ``(batch, hidden)``: 0 or the ``h0`` parameter."""
        if self.h0 is None:
            return jnp.zeros((batch, self.hidden_size), jnp.float32 if dtype is None else dtype)
        h0 = self.h0[...]
        h0 = h0 if dtype is None else h0.astype(dtype)
        return jnp.broadcast_to(h0, (batch, self.hidden_size))

    def _gates(self, x: jax.Array, delta_t: Any, steps: int | None) -> tuple[jax.Array, jax.Array]:
        """Transition ``a`` and input ``b``, both shaped like ``x`` with ``hidden`` features."""
        z = jax.nn.sigmoid(self.linear_z(x))
        a = jnp.tanh(self.linear_s(x))
        if self.coupled:
            a = (1 - z) * a
        log_gamma = self.decay.log_gamma(delta_t, x.shape[0], steps, dtype=a.dtype)
        if log_gamma is not None:
            a = a * jnp.exp(log_gamma)
        return a, z * self.linear_h(x)

    @checks_state("h_0")
    def __call__(
        self,
        x: jax.Array,
        h_0: jax.Array | None = None,
        delta_t: jax.Array | None = None,
        return_state: bool = False,
        *,
        cu_seqlens: jax.Array | None = None,
        axis_name: str | None = None,
    ) -> jax.Array | tuple[jax.Array, jax.Array]:
        """States ``h (B, T, hidden)`` for ``x (B, T, input_size)``; see the class docstring.

        ``return_state=True`` returns ``(h, state)`` with ``state (B, 1, hidden)`` the last
        state (the ``h_0`` of a continuation).

        With ``cu_seqlens`` (keyword-only: ``(N+1,)`` integer offsets, starting at 0,
        non-decreasing, ending at T, of ``N`` sequences packed in one row) ``x`` is
        ``(1, T, input_size)``, ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, ``h_0`` ``(N, 1,
        hidden)`` (default: the mixer's initial state for every sequence), every sequence
        restarts from its own ``h_0`` row, and ``state`` is ``(N, 1, hidden)``, each
        sequence's last state (an empty sequence's is its ``h_0``).

        With ``axis_name`` (a mesh axis bound by :func:`jax.shard_map`; keyword-only) the
        sequence is split along T across that axis: ``x (B, T_local, input_size)`` and
        ``delta_t`` are this device's contiguous slice (slices in ``jax.lax.axis_index``
        order), ``h_0`` the state before the whole sequence (the same on every device), and
        the result this slice's states ``(B, T_local, hidden)``; a returned state is the
        whole sequence's, the same on every device (see :func:`mingru_jax.linear_recurrence`;
        the parameters are replicated). With ``cu_seqlens`` too, the offsets are those of the
        whole packed row (the same on every device) and sequences may straddle devices.

        A NaN in ``h_0`` is a ``ValueError`` (checked when ``h_0`` is concrete, one small
        device read; not under ``jax.jit``)."""
        x = check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        cu, n_states = packed_offsets(cu_seqlens, x, axis_name)
        # One matmul for the three projections; the cell forms the gates inside the kernel.
        k = project(x, self.linear_z, self.linear_s, self.linear_h)
        log_gamma = self.decay.log_gamma(delta_t, B, T, dtype=k.dtype)
        if h_0 is not None:
            h_0 = check_call_state(h_0, cu, n_states, size=self.hidden_size, name="h_0",
                                   dtype=k.dtype)[:, 0]
        elif self.h0 is not None:
            h_0 = jnp.broadcast_to(self.h0[...].astype(k.dtype), (n_states, self.hidden_size))
        if axis_name is not None and cu is None:  # packed_offsets checked it otherwise
            check_axis(axis_name)
        # The cell's own checks would repeat the ones above on what they built: its route.
        out = _run_mingru_cell(k, initial_state=h_0, log_gamma=log_gamma, signed=True,
                               coupled=self.coupled, return_final_state=bool(return_state),
                               cu_seqlens=cu, axis_name=axis_name)
        return (out[0], out[1][:, None]) if return_state else out

    def step(
        self,
        x_t: jax.Array,
        h_prev: jax.Array | None = None,
        delta_t: jax.Array | None = None,
    ) -> jax.Array:
        """One token: ``h_t (B, hidden)`` from ``x_t (B, input_size)``, ``h_prev (B, hidden)``."""
        x_t = check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        a, b = self._gates(x_t, delta_t, None)
        if h_prev is not None:
            h_prev = check_state(
                h_prev, B, self.hidden_size, name="h_prev", sequence=False, dtype=a.dtype
            )
        elif self.h0 is not None:
            h_prev = self.h0[...].astype(a.dtype)
        return b if h_prev is None else a * h_prev + b


class SignedMinGRUCell(MixerCell):
    """:class:`SignedMinGRU` as a :class:`flax.nnx.RNN` cell (carry = output = ``h``).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import SignedMinGRUCell
        >>> rnn = nnx.RNN(SignedMinGRUCell(3, 4, rngs=nnx.Rngs(0)))
        >>> rnn(jnp.ones((2, 5, 3))).shape
        (2, 5, 4)
    """

    mixer_type = SignedMinGRU
