"""GivensMinGRU (Flax NNX): block-orthogonal transitions from brick-wall Givens rotations.
The twin of :mod:`mingru.mixers.givens`.

Per block of ``k = block_size`` channels, the transition of token t is

    M_t = γ_t · G_{R−1} ⋯ G_0 ∈ SO(k),   h_t = M_t h_{t−1} + σ(W_z x_t) ⊙ (W_h x_t),

where round r rotates the planes (0,1),(2,3),… (r even) or (1,2),…,(k−1,0) (r odd), each by
its own input-dependent angle — the rectangular mesh of Clements et al. 2016 as used by EUNN
(Jing et al. 2017); Givens rotations after Golub & Van Loan. :class:`BlockRotationBase` holds
what this mixer shares with :class:`~mingru_jax.mixers.rotation.RotationMinGRU`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax._eager.givens_recurrence import givens_step
from mingru_jax._packing import check_cu_seqlens, final_states, segments
from mingru_jax._sharding import check_axis, check_not_packed, gather_last, sequence_parallel
from mingru_jax._validate import checks_state
from mingru_jax.mixers._common import (
    MixerCell,
    TimeDecay,
    check_call_state,
    check_sequence,
    check_size,
    check_state,
    check_token,
    linear,
    project,
)
from mingru_jax.scans import _run_givens_recurrence
from mingru_kernels._spec import check_givens

__all__ = ["BlockRotationBase", "GivensMinGRU", "GivensMinGRUCell"]


class BlockRotationBase(nnx.Module):
    """Shared ``__call__``/``step`` of the rotation-family mixers (``n`` blocks of ``k``).

    Subclasses create ``linear_z``, ``linear_h``, ``h0`` and ``decay`` and implement
    :meth:`transition` (angles ``(..., n, R, k/2)`` and an optional pre-rotation scale).
    """

    input_size: int
    hidden_size: int
    n_blocks: int
    block_size: int

    transition_layers: tuple[str, ...] = ()

    def transition_from(self, parts: Sequence[jax.Array]) -> tuple[jax.Array, jax.Array | None]:
        raise NotImplementedError

    def transition(self, x: jax.Array) -> tuple[jax.Array, jax.Array | None]:
        """Angles and scale for ``x (..., input_size)``."""
        return self.transition_from([getattr(self, name)(x) for name in self.transition_layers])

    def _projections(self, x: jax.Array):
        """``(b, theta, scale)`` from one matmul over every projection of ``x``."""
        layers = [getattr(self, name) for name in self.transition_layers]
        layers += [self.linear_z, self.linear_h]
        k = project(x, *layers)
        sizes = [layer.out_features for layer in layers]
        *parts, k_z, k_h = jnp.split(k, list(itertools.accumulate(sizes[:-1])), axis=-1)
        b = (jax.nn.sigmoid(k_z) * k_h).reshape(*x.shape[:-1], self.n_blocks, self.block_size)
        return (b, *self.transition_from(parts))

    def initial_state(self, batch: int, dtype: Any = None) -> jax.Array:
        """The learned ``h0`` as a step state ``(batch, hidden)``."""
        h0 = self.h0[...]
        h0 = h0 if dtype is None else h0.astype(dtype)
        return jnp.broadcast_to(h0, (batch, self.hidden_size))

    def _log_gamma(self, delta_t: Any, batch: int, steps: int | None, *, dtype: Any):
        lg = self.decay.log_gamma(delta_t, batch, steps, dtype=dtype)
        if lg is None:
            return None
        shape = (batch, self.n_blocks) if steps is None else (batch, steps, self.n_blocks)
        return jnp.broadcast_to(lg, shape)  # fixed decay gives one channel: one per block

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
        """States ``h (B, T, hidden)`` for ``x (B, T, input_size)``; ``h_0 (B, 1, hidden)``
        overrides the learned initial state; ``delta_t (B, T)`` or ``(B, T, 1)`` with decay.
        ``return_state=True`` returns ``(h, state)`` with ``state (B, 1, hidden)`` the last
        state (the ``h_0`` of a continuation).

        With ``cu_seqlens`` (keyword-only: ``(N+1,)`` integer offsets, starting at 0,
        non-decreasing, ending at T, of ``N`` sequences packed in one row) ``x`` is
        ``(1, T, input_size)``, ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, ``h_0`` ``(N, 1,
        hidden)`` (default: the learned ``h0`` for every sequence), every sequence restarts
        from its own ``h_0`` row (see ``mingru_jax.scans._givens_recurrence``), and ``state``
        is ``(N, 1, hidden)``, each sequence's last state (an empty sequence's is its
        ``h_0``). Not combinable with ``axis_name`` yet.

        With ``axis_name`` (a mesh axis bound by :func:`jax.shard_map`; keyword-only) the
        sequence is split along T across that axis: ``x (B, T_local, input_size)`` and
        ``delta_t`` are this device's contiguous slice (slices in ``jax.lax.axis_index``
        order), ``h_0`` (or the learned ``h0``) the state before the whole sequence, and the
        result this slice's states ``(B, T_local, hidden)``. A slice's map on each block's
        state is ``h ↦ P h + Z`` with ``P (B, n, k, k)`` the product of its transitions,
        found by running the slice's recurrence from the ``k`` columns of the identity
        (``k×`` the local recurrence); see :mod:`mingru_jax._sharding`.

        A NaN in ``h_0`` is a ``ValueError`` (checked when ``h_0`` is concrete, one small
        device read; not under ``jax.jit``)."""
        x = check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        n, k = self.n_blocks, self.block_size
        b, theta, scale = self._projections(x)
        dtype = b.dtype
        log_gamma = self._log_gamma(delta_t, B, T, dtype=dtype)
        theta = theta.astype(dtype)
        if cu_seqlens is not None:
            return self._packed(theta, b, scale=scale, log_gamma=log_gamma, h_0=h_0,
                                cu_seqlens=cu_seqlens, return_state=return_state,
                                axis_name=axis_name)
        if h_0 is None:
            h0 = self.initial_state(B, dtype).reshape(B, n, k)
        else:
            h0 = check_state(h_0, B, self.hidden_size, name="h_0", sequence=True, dtype=dtype)
            h0 = h0.reshape(B, n, k)
        if axis_name is not None:
            check_axis(axis_name)

            def run(h_in):  # states (B, n, k, 1) for the maps' matrix products
                start = jnp.zeros_like(h0) if h_in is None else h_in[..., 0]
                h = _run_givens_recurrence(theta, b, h0=start, scale=scale, log_gamma=log_gamma)
                return h, h[:, -1, ..., None]

            product = _block_transition_product(theta, scale, log_gamma)
            h = sequence_parallel(run, product, initial_state=h0[..., None], axis_name=axis_name,
                                  return_final_state=False, matrix=True)
        else:
            h = _run_givens_recurrence(theta, b, h0=h0, scale=scale, log_gamma=log_gamma)
        h = h.reshape(B, T, self.hidden_size)
        if not return_state:
            return h
        state = h[:, -1:]
        if axis_name is not None:  # the last device's last state is the sequence's
            state = gather_last(state, axis_name)
        return h, state

    def _packed(self, theta, b, *, scale, log_gamma, h_0, cu_seqlens, return_state, axis_name):
        """The packed ``__call__`` (``B = 1``): states ``(1, T, hidden)`` and, with
        ``return_state``, the per-sequence last states ``(N, 1, hidden)``."""
        _, T, n, k = b.shape
        dtype = b.dtype
        check_not_packed(cu_seqlens, axis_name, type(self).__name__)
        cu = check_cu_seqlens(cu_seqlens, b.shape[0], T)
        N = cu.shape[0] - 1
        if h_0 is None:
            h0 = self.initial_state(N, dtype)
        else:
            h0 = check_call_state(h_0, cu, N, size=self.hidden_size, name="h_0", dtype=dtype)[:, 0]
        h = _run_givens_recurrence(theta, b, h0=h0.reshape(N, n, k), scale=scale,
                                   log_gamma=log_gamma, cu_seqlens=cu
                                   ).reshape(1, T, self.hidden_size)
        if not return_state:
            return h
        return h, final_states(h, segments(cu, T), h0)[:, None]

    def step(
        self,
        x_t: jax.Array,
        h_prev: jax.Array | None = None,
        delta_t: jax.Array | None = None,
    ) -> jax.Array:
        """One token: ``h_t (B, hidden)`` from ``x_t (B, input_size)`` and ``h_prev (B, hidden)``
        (default: the learned ``h0``); rotates the state vector, never forms a matrix."""
        x_t = check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        n, k = self.n_blocks, self.block_size
        b, theta, scale = self._projections(x_t)
        dtype = b.dtype
        if h_prev is None:
            h = self.initial_state(B, dtype).reshape(B, n, k)
        else:
            h = check_state(h_prev, B, self.hidden_size, name="h_prev", sequence=False, dtype=dtype)
            h = h.reshape(B, n, k)
        log_gamma = self._log_gamma(delta_t, B, None, dtype=dtype)
        h = givens_step(h, theta.astype(dtype), b, scale=scale, log_gamma=log_gamma)
        return h.reshape(B, self.hidden_size)


def _block_transition_product(
    theta: jax.Array, scale: jax.Array | None, log_gamma: jax.Array | None
) -> jax.Array:
    """``(B, n, k, k)``: the product ``M_T ⋯ M_1`` of a slice's block transitions, by the
    recurrence from the identity's ``k`` columns (batched) with zero inputs."""
    B, T, n, _, half = theta.shape
    k = 2 * half

    def columns(x: jax.Array | None) -> jax.Array | None:  # (B, ...) -> (k·B, ...)
        return None if x is None else jnp.broadcast_to(x, (k, *x.shape)).reshape(k * B,
                                                                                 *x.shape[1:])

    eye = jnp.broadcast_to(jnp.eye(k, dtype=theta.dtype)[:, None, None, :], (k, B, n, k))
    h = _run_givens_recurrence(columns(theta), jnp.zeros((k * B, T, n, k), theta.dtype),
                               h0=eye.reshape(k * B, n, k), scale=columns(scale),
                               log_gamma=columns(log_gamma))
    return jnp.moveaxis(h[:, -1].reshape(k, B, n, k), 0, -1)  # [b, blk, i, j] = (M e_j)_i


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
        dtype: computation dtype of the projections (``None``: promote input and params).
        param_dtype: dtype of the parameters.
        rngs: :class:`flax.nnx.Rngs` for the initialisation.

    Shapes: ``__call__(x (B, T, input_size), h_0=None (B, 1, hidden), delta_t=None) ->
    h (B, T, hidden)``; ``step(x_t (B, input_size), h_prev=None (B, hidden), delta_t=None) ->
    h_t (B, hidden)``. The initial state is the parameter ``h0 ~ N(0, 0.5²)`` unless given.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import GivensMinGRU
        >>> m = GivensMinGRU(8, 16, block_size=4, rounds=2, rngs=nnx.Rngs(0))
        >>> h = m(jnp.ones((2, 10, 8)))
        >>> m.step(jnp.ones((2, 8)), h[:, -1]).shape
        (2, 16)
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
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
        self.input_size = check_size(input_size, "input_size")
        self.hidden_size = check_size(hidden_size, "hidden_size")
        self.state_size = hidden_size
        self.n_blocks = check_givens(hidden_size, block_size, rounds)
        self.block_size = block_size
        self.rounds = rounds
        n_angles = self.n_blocks * rounds * (block_size // 2)
        kw = dict(bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_theta = linear(input_size, n_angles, **kw)
        self.linear_z = linear(input_size, hidden_size, **kw)
        self.linear_h = linear(input_size, hidden_size, **kw)
        self.h0 = nnx.Param(0.5 * jax.random.normal(rngs.params(), (hidden_size,), param_dtype))
        self.decay = TimeDecay(
            decay, decay_rate, log1p_delta, channels=self.n_blocks, param_dtype=param_dtype
        )

    transition_layers = ("linear_theta",)

    def transition_from(self, parts: Sequence[jax.Array]) -> tuple[jax.Array, None]:
        """Angles ``(..., n, rounds, k/2)`` from ``linear_theta``'s output; no scale."""
        (theta,) = parts
        lead = theta.shape[:-1]
        return theta.reshape(*lead, self.n_blocks, self.rounds, self.block_size // 2), None


class GivensMinGRUCell(MixerCell):
    """:class:`GivensMinGRU` as a :class:`flax.nnx.RNN` cell (carry = output = ``h``).

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import GivensMinGRUCell
        >>> rnn = nnx.RNN(GivensMinGRUCell(3, 8, block_size=4, rngs=nnx.Rngs(0)))
        >>> rnn(jnp.ones((2, 5, 3))).shape
        (2, 5, 8)
    """

    mixer_type = GivensMinGRU
