"""MinGRU (Flax NNX): the minimal GRU of Feng et al. 2024 (arXiv:2410.01201) on the fused
MinGRU cell (:func:`mingru_jax.cells.mingru_cell`), whose eager reference is the log-space
parallel scan (Heinsen 2023, arXiv:2311.06281). The twin of :mod:`mingru.mixers.log`.

    z_t = σ(W_z x_t),   h̃_t = g(W_h x_t),   h_t = γ_t (1 − z_t) ⊙ h_{t−1} + z_t ⊙ h̃_t

with ``g(x) = x + 0.5`` (x ≥ 0), ``σ(x)`` (x < 0), so every state is positive and the scan runs
on ``log a = −softplus(W_z x) + log γ`` and ``log b = −softplus(−W_z x) + log g(W_h x)``.
Both projections run as one matmul (:func:`mingru_jax.mixers._common.project`).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.experimental import checkify

from mingru_jax._sharding import check_axis
from mingru_jax.cells import _run_mingru_cell
from mingru_jax.mixers._common import (
    MixerCell,
    TimeDecay,
    check_call_state,
    check_sequence,
    check_size,
    check_state,
    check_token,
    g,
    is_concrete,
    linear,
    log_g,
    packed_offsets,
    project,
)

__all__ = ["MinGRU", "MinGRUCell"]


def _check_non_negative(h: jax.Array, name: str) -> None:
    """Reject negative or NaN MinGRU states (``h >= 0`` is False for NaN).

    On concrete arrays this raises ``ValueError`` at once. Under ``jit`` the values are not
    known while tracing, so the rule becomes a :func:`jax.experimental.checkify.check`: wrap the
    jitted function in ``checkify.checkify(..., errors=checkify.user_checks)`` and call
    ``err.throw()`` to raise it (without ``checkify`` the check costs nothing and a negative
    state gives NaN states, as the log-space scan must take ``log h_0``).
    """
    message = (f"{name} must be a non-negative MinGRU state (not a pre-activation, not NaN); "
               "got a minimum of {minimum}")
    if is_concrete(h):
        if not bool(jnp.all(h >= 0)):
            raise ValueError(message.format(minimum=f"{float(jnp.min(h)):.4g}"))
        return
    checkify.check(jnp.all(h >= 0), message, minimum=jnp.min(h), debug=True)


class MinGRU(nnx.Module):
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
        dtype: computation dtype of the projections (``None``: promote input and params).
        param_dtype: dtype of the parameters.
        rngs: :class:`flax.nnx.Rngs` for the initialisation.

    Shapes: ``__call__(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None (B, T) or
    (B, T, 1)) -> h (B, T, hidden)``, the states ``h_1 … h_T``; ``step(x_t (B, input_size),
    h_prev=None (B, hidden), delta_t=None (B,) or (B, 1)) -> h_t (B, hidden)``. A given state
    must be non-negative and not NaN: a ``ValueError`` on concrete arrays; under ``jit`` a
    ``checkify`` check (wrap the jitted function in ``checkify.checkify(...,
    errors=checkify.user_checks)`` to raise it; unwrapped, a negative state gives NaN).

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRU
        >>> m = MinGRU(8, 16, rngs=nnx.Rngs(0))
        >>> h = m(jax.random.normal(jax.random.key(1), (2, 10, 8)))
        >>> h.shape, bool((h > 0).all())
        ((2, 10, 16), True)
        >>> h2 = m(jnp.ones((2, 5, 8)), h_0=h[:, -1:])   # continue the sequence
        >>> m.step(jnp.ones((2, 8)), h2[:, -1]).shape
        (2, 16)
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
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.state_size = hidden_size
        kw = dict(bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_z = linear(input_size, hidden_size, **kw)
        self.linear_h = linear(input_size, hidden_size, **kw)
        if learnable_h0:
            self.h0 = nnx.Param(jnp.zeros((hidden_size,), param_dtype))
        else:
            self.h0 = nnx.data(None)
        self.decay = TimeDecay(
            decay, decay_rate, log1p_delta, channels=hidden_size, param_dtype=param_dtype
        )

    def _log_h0_default(self, batch: int, dtype: Any) -> jax.Array:
        H = self.hidden_size
        if self.h0 is not None:
            return jnp.broadcast_to(log_g(self.h0[...].astype(dtype)), (batch, H))
        return jnp.full((batch, H), math.log(0.5), dtype)

    def initial_state(self, batch: int, dtype: Any = None) -> jax.Array:
        """The default ``h_0`` as a step state ``(batch, hidden)``: ``0.5`` or ``g(h0)``."""
        if dtype is None:
            dtype = self.h0[...].dtype if self.h0 is not None else jnp.float32
        return jnp.exp(self._log_h0_default(batch, dtype))

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
        whole packed row (the same on every device) and sequences may straddle devices."""
        x = check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        cu, n_states = packed_offsets(cu_seqlens, x, axis_name)
        k = project(x, self.linear_z, self.linear_h)
        dtype = k.dtype
        log_gamma = self.decay.log_gamma(delta_t, B, T, dtype=dtype)
        if h_0 is None:
            h0 = jnp.exp(self._log_h0_default(n_states, dtype))
        else:
            h_0 = check_call_state(h_0, cu, n_states, size=self.hidden_size, name="h_0",
                                   dtype=dtype)
            _check_non_negative(h_0, "h_0")
            h0 = h_0[:, 0]
        if axis_name is not None and cu is None:  # packed_offsets checked it otherwise
            check_axis(axis_name)
        # The cell's own checks would repeat the ones above on what they built: its route.
        out = _run_mingru_cell(k, initial_state=h0, log_gamma=log_gamma, signed=False,
                               coupled=False, return_final_state=bool(return_state),
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
        k_z = self.linear_z(x_t)
        dtype = k_z.dtype
        if h_prev is None:
            h_prev = jnp.exp(self._log_h0_default(B, dtype))
        else:
            h_prev = check_state(h_prev, B, self.hidden_size, name="h_prev", sequence=False,
                                 dtype=dtype)
            _check_non_negative(h_prev, "h_prev")
        log_a = -jax.nn.softplus(k_z)
        log_gamma = self.decay.log_gamma(delta_t, B, None, dtype=dtype)
        if log_gamma is not None:
            log_a = log_a + log_gamma
        return jnp.exp(log_a) * h_prev + jnp.exp(-jax.nn.softplus(-k_z)) * g(self.linear_h(x_t))


class MinGRUCell(MixerCell):
    """:class:`MinGRU` as a :class:`flax.nnx.RNN` cell: carry = output = ``h (*batch, hidden)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import MinGRU, MinGRUCell
        >>> m = MinGRU(3, 4, rngs=nnx.Rngs(0))
        >>> rnn = nnx.RNN(MinGRUCell(mixer=m))
        >>> x = jnp.ones((2, 5, 3))
        >>> bool(jnp.allclose(rnn(x), m(x), atol=1e-6))
        True
    """

    mixer_type = MinGRU
