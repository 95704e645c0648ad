"""DeltaMinGRU (Flax NNX): a matrix-state mixer on the delta rule (DeltaNet / DeltaProduct).
The twin of :mod:`mingru.mixers.delta`.

DeltaNet: Yang, Wang, Zhang, Shen & Kim 2024, arXiv:2406.06484 (the chunked WY / UT-transform
form). DeltaProduct (``nh > 1`` micro-steps per token): Siems et al. 2025, arXiv:2502.10297.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax._sharding import check_axis, check_not_packed, sequence_parallel
from mingru_jax._validate import checks_state
from mingru_jax.mixers._common import (
    MixerCell,
    TimeDecay,
    check_call_state,
    check_sequence,
    check_state,
    check_token,
    linear,
    packed_offsets,
    project,
)
from mingru_jax.scans import _run_delta_rule
from mingru_kernels._spec import KEY_NORM_EPS, check_delta, check_flag

__all__ = ["KEY_NORM_EPS", "DeltaMinGRU", "DeltaMinGRUCell"]

# Full float32 products in the step form too (JAX's GPU default for float32 dots is TF32).
_FP32 = jax.lax.Precision.HIGHEST


def _l2_normalize(x: jax.Array) -> jax.Array:
    norm = jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True))
    return x / jnp.maximum(norm, KEY_NORM_EPS)


class DeltaMinGRU(nnx.Module):
    """Delta-rule mixer with ``n_heads`` matrix states ``S (d_k × d_v)`` per sequence.

    For each token ``t``: ``S ← γ_t S`` (only with decay), then for each micro-step
    ``j = 0..nh-1``: ``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``, with
    ``k_j = normalize(W_k[j] x_t)`` (L2 per head), ``v_j = W_v[j] x_t``,
    ``β_j = 2σ(W_β[j] x_t) ∈ (0, 2)``; then ``y_t = out_proj(concat_heads(Sᵀ q_t))`` with
    ``q_t = W_q x_t`` (not normalized). ``nh = 1`` is DeltaNet, ``nh > 1`` DeltaProduct. The
    output is NOT the state.

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
        decay: ``None``, ``"fixed"`` or ``"learnable"`` (one rate per head) time decay.
        decay_rate: ``λ`` (fixed) or its initial value (learnable), ``> 0``.
        log1p_delta: use ``f = log1p`` on the time gaps.
        allow_tf32: let the Triton kernels multiply float32 inputs in TF32 on the tensor
            cores (faster, products to about 1e-3 relative); off by default (products with
            float32 accuracy: FMAs, or 3xTF32 split products at 64-wide heads). Half-
            precision inputs always use the tensor cores.
        dtype: computation dtype of the projections (``None``: promote input and params).
        param_dtype: dtype of the parameters.
        rngs: :class:`flax.nnx.Rngs` for the initialisation.

    Shapes (state size ``Z = n_heads · d_k · d_v``, row-major from ``(n_heads, d_k, d_v)``):

    * ``__call__(x (B, T, input_size), h_0=None (B, 1, Z), delta_t=None (B, T) | (B, T, 1),
      return_state=False) -> y (B, T, hidden_size)`` or ``(y, state (B, 1, Z))``;
    * packed, ``__call__(x (1, T, input_size), h_0=None (N, 1, Z), delta_t=None (1, T) |
      (1, T, 1), return_state=False, cu_seqlens=(N+1,)) -> y (1, T, hidden_size)`` or
      ``(y, state (N, 1, Z))``: ``N`` sequences laid end to end in one row, each starting
      from its own ``h_0[n]`` (zeros by default); ``state[n]`` is sequence ``n``'s final
      state (an empty sequence's is its ``h_0[n]``). Equal to running each sequence alone;
    * ``step(x_t (B, input_size), h_prev=None (B, Z), delta_t=None (B,) | (B, 1))
      -> (y_t (B, hidden_size), h_t (B, Z))``.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import DeltaMinGRU
        >>> mixer = DeltaMinGRU(8, 16, n_heads=2, nh=2, chunk_size=4, rngs=nnx.Rngs(0))
        >>> x = jnp.ones((3, 10, 8))
        >>> y, state = mixer(x, return_state=True)
        >>> y.shape, state.shape
        ((3, 10, 16), (3, 1, 128))
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
        *,
        dtype: Any = None,
        param_dtype: Any = jnp.float32,
        rngs: nnx.Rngs,
    ) -> None:
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

        # Creation order is part of the interface (the same as the PyTorch twin).
        kw = dict(bias=bias, dtype=dtype, param_dtype=param_dtype, rngs=rngs)
        self.linear_q = linear(input_size, n_heads * d_k, **kw)
        self.linear_k = nnx.List([linear(input_size, n_heads * d_k, **kw) for _ in range(nh)])
        self.linear_v = nnx.List([linear(input_size, n_heads * d_v, **kw) for _ in range(nh)])
        self.linear_beta = nnx.List([linear(input_size, n_heads, **kw) for _ in range(nh)])
        self.out_proj = linear(n_heads * d_v, hidden_size, **kw)
        self.decay = TimeDecay(
            decay, decay_rate, log1p_delta, channels=n_heads, param_dtype=param_dtype
        )

    def initial_state(self, batch: int, dtype: Any = None) -> jax.Array:
        """The default state (zeros) as a step state ``(batch, n_heads·d_k·d_v)``."""
        return jnp.zeros((batch, self.state_size), jnp.float32 if dtype is None else dtype)

    def _project(self, x: jax.Array):
        """``q (…, H, d_k)``, ``k (…, nh, H, d_k)``, ``v (…, nh, H, d_v)``, ``β (…, nh, H)``,
        from one matmul over every projection."""
        lead = x.shape[:-1]
        H, dk, dv, nh = self.n_heads, self.d_k, self.d_v, self.nh
        layers = [self.linear_q, *self.linear_k, *self.linear_v, *self.linear_beta]
        out = project(x, *layers)
        cuts = [H * dk, H * dk * (1 + nh), H * (dk + nh * (dk + dv))]
        q, k, v, beta = jnp.split(out, cuts, axis=-1)
        k = _l2_normalize(k.reshape(*lead, nh, H, dk))
        beta = 2.0 * jax.nn.sigmoid(beta.reshape(*lead, nh, H))
        return q.reshape(*lead, H, dk), k, v.reshape(*lead, nh, H, dv), beta

    @checks_state("h_0")
    def __call__(
        self,
        x: jax.Array,
        h_0: jax.Array | None = None,
        delta_t: jax.Array | None = None,
        return_state: bool = False,
        *,
        axis_name: str | None = None,
        cu_seqlens: jax.Array | None = None,
    ) -> jax.Array | tuple[jax.Array, jax.Array]:
        """Parallel (chunked WY) forward; see the class docstring for shapes.

        With ``cu_seqlens`` (``(N+1,)`` integer offsets of ``N`` sequences packed into one
        row, ``B = 1``; keyword-only) every sequence starts from its own state: ``h_0`` is
        ``(N, 1, Z)`` (default zeros), ``delta_t`` ``(1, T)`` or ``(1, T, 1)``, ``y``
        ``(1, T, hidden_size)`` and the state returned ``(N, 1, Z)``, each sequence's final
        state (an empty one's is its ``h_0``). Not combined with ``axis_name`` yet.

        With ``axis_name`` (a mesh axis bound by :func:`jax.shard_map`; keyword-only) the
        sequence is split along T across that axis: ``x (B, T_local, input_size)`` and
        ``delta_t`` are this device's contiguous slice (slices in ``jax.lax.axis_index``
        order), ``h_0`` the state before the whole sequence (the same on every device), ``y``
        this slice's outputs ``(B, T_local, hidden_size)`` and ``state`` the whole sequence's
        final state (the same on every device). A slice acts on each head's state as
        ``S ↦ A S + Z`` with ``A (d_k × d_k)``: ``A`` is the slice's delta rule run with
        ``v = 0`` from the identity, ``Z`` from zero; see :mod:`mingru_jax._sharding`.

        A NaN in ``h_0`` is a ``ValueError`` (checked when ``h_0`` is concrete, one small
        device read; not under ``jax.jit``)."""
        x = check_sequence(x, self.input_size, module=self)
        B, T, _ = x.shape
        H, dk, dv = self.n_heads, self.d_k, self.d_v
        q, k, v, beta = self._project(x)
        dtype = q.dtype
        check_not_packed(cu_seqlens, axis_name, "DeltaMinGRU")
        cu, n_states = packed_offsets(cu_seqlens, x)
        h0 = None
        if h_0 is not None:
            h0 = check_call_state(h_0, cu, n_states, size=self.state_size, name="h_0", dtype=dtype)
            h0 = h0.reshape(n_states, H, dk, dv)
        log_gamma = self.decay.log_gamma(delta_t, B, T, dtype=dtype)
        if log_gamma is not None:
            log_gamma = jnp.broadcast_to(log_gamma, (B, T, H))  # fixed rate: one channel
        if axis_name is not None:
            check_axis(axis_name)
            eye = jnp.broadcast_to(jnp.eye(dk, dtype=dtype), (B, H, dk, dk))
            _, product = _run_delta_rule(q, k=k, v=jnp.zeros((*k.shape[:-1], dk), dtype),
                                         beta=beta, log_gamma=log_gamma, h0=eye,
                                         chunk_size=self.chunk_size, allow_tf32=self.allow_tf32)
            o, h_T = sequence_parallel(
                lambda S: _run_delta_rule(q, k=k, v=v, beta=beta, log_gamma=log_gamma, h0=S,
                                          chunk_size=self.chunk_size, allow_tf32=self.allow_tf32),
                product, initial_state=h0, axis_name=axis_name, return_final_state=True,
                matrix=True)
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
        x_t: jax.Array,
        h_prev: jax.Array | None = None,
        delta_t: jax.Array | None = None,
    ) -> tuple[jax.Array, jax.Array]:
        """One token, ``O(1)`` in ``T``: ``(y_t (B, hidden_size), h_t (B, Z))``."""
        x_t = check_token(x_t, self.input_size, module=self)
        B = x_t.shape[0]
        H, dk, dv = self.n_heads, self.d_k, self.d_v
        q, k, v, beta = self._project(x_t)
        dtype = q.dtype
        if h_prev is None:
            S = jnp.zeros((B, H, dk, dv), dtype)
        else:
            S = check_state(h_prev, B, self.state_size, name="h_prev", sequence=False, dtype=dtype)
            S = S.reshape(B, H, dk, dv)
        log_gamma = self.decay.log_gamma(delta_t, B, None, dtype=dtype)
        if log_gamma is not None:
            S = jnp.exp(jnp.broadcast_to(log_gamma, (B, H)))[..., None, None] * S
        for j in range(self.nh):
            kj = k[:, j]
            err = v[:, j] - jnp.einsum("bhk,bhkv->bhv", kj, S, precision=_FP32)  # v − Sᵀk
            S = S + beta[:, j, :, None, None] * kj[..., None] * err[..., None, :]
        o = jnp.einsum("bhk,bhkv->bhv", q, S, precision=_FP32)
        return self.out_proj(o.reshape(B, H * dv)), S.reshape(B, self.state_size)


class DeltaMinGRUCell(MixerCell):
    """:class:`DeltaMinGRU` as a :class:`flax.nnx.RNN` cell: carry = the flat state
    ``(*batch, n_heads·d_k·d_v)``, output = ``y (*batch, hidden)``.

    Example:
        >>> import jax.numpy as jnp
        >>> from flax import nnx
        >>> from mingru_jax import DeltaMinGRUCell
        >>> rnn = nnx.RNN(DeltaMinGRUCell(3, 8, n_heads=2, rngs=nnx.Rngs(0)))
        >>> rnn(jnp.ones((2, 5, 3))).shape
        (2, 5, 8)
    """

    mixer_type = DeltaMinGRU

    def _step(self, x, h, dt):
        return self.mixer.step(x, h, delta_t=dt)
