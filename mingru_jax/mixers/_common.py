"""Pieces every Flax mixer shares: ``g``, time decay, PyTorch-style layers, argument checks,
and the generic ``flax.nnx.RNN`` cell. The twin of :mod:`mingru.mixers._common`.

Conventions (SPEC §5.1), identical to the PyTorch frontend so weights and numbers carry over:

* ``g(x) = x + 0.5`` for ``x ≥ 0``, ``σ(x)`` for ``x < 0``; ``log g`` takes the ``x ≥ 0``
  branch at 0, and its gradient there is ``1/0.5 = 2`` as in PyTorch (``jnp.maximum`` would
  split the tie and give 1, so the branch input is selected with ``where`` instead).
* Δt sanitizing: NaN → 0, negative → 0, +inf → 1e10, then ``log1p`` if ``log1p_delta``.
* Decay ``γ_t = exp(−λ f(Δt_t))`` scales only the transition; ``λ = decay_rate`` (fixed) or
  ``softplus(ρ)`` per channel with ``ρ`` initialised so that ``softplus(ρ) = decay_rate``.
* Linear layers are initialised like ``torch.nn.Linear`` (kernel and bias
  ``U(−1/√fan_in, 1/√fan_in)``), LayerNorm has ``eps = 1e-5`` and the exact two-pass variance.

Checks run on static shapes and dtypes, so every module works under ``jit``/``grad``/``vmap``.
Value checks (MinGRU's non-negative state) run only on concrete arrays.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from mingru_jax import _validate
from mingru_jax._eager.mingru_cell import g as g
from mingru_jax._eager.mingru_cell import log_g as log_g
from mingru_jax._packed_sharding import row_length
from mingru_jax._packing import check_cu_seqlens
from mingru_kernels._checks import shape_in
from mingru_kernels._spec import DECAY_MODES as DECAY_MODES
from mingru_kernels._spec import MAX_GAP, check_decay, check_packed_state, inverse_softplus
from mingru_kernels._spec import check_size as check_size

LN_EPS = 1e-5


def sanitize_delta_t(delta_t: jax.Array, log1p_delta: bool) -> jax.Array:
    """NaN → 0, negative → 0, +inf → 1e10, then ``log1p`` if asked."""
    dt = jnp.clip(jnp.nan_to_num(delta_t, nan=0.0, posinf=MAX_GAP, neginf=0.0), 0.0, MAX_GAP)
    return jnp.log1p(dt) if log1p_delta else dt


def check_dtypes(dtype: Any, param_dtype: Any) -> None:
    """A 64-bit ``dtype`` or ``param_dtype`` needs ``jax_enable_x64``: without it JAX makes
    every array 32-bit, so a module built that way could never be called (no input could
    have its parameters' dtype). A ``ValueError`` at construction naming both instead. Every
    module builds its layers through :func:`linear` and :func:`layer_norm`, which check."""
    for name, value in (("param_dtype", param_dtype), ("dtype", dtype)):
        if value is None:
            continue
        wanted = jnp.dtype(value)
        if jax.dtypes.canonicalize_dtype(wanted) != wanted:
            raise ValueError(
                f"{name}={wanted.name} needs 64-bit JAX, but jax_enable_x64 is off: call "
                "jax.config.update('jax_enable_x64', True) (or set JAX_ENABLE_X64=1) before "
                f"building the module, or pass {name}=jnp.float32")


def _torch_uniform(fan_in: int):
    bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0

    def init(key: jax.Array, shape: tuple[int, ...], dtype: Any = jnp.float32) -> jax.Array:
        return jax.random.uniform(key, shape, dtype, -bound, bound)

    return init


def linear(
    in_features: int,
    out_features: int,
    *,
    bias: bool = True,
    dtype: Any = None,
    param_dtype: Any = jnp.float32,
    rngs: nnx.Rngs,
) -> nnx.Linear:
    """An :class:`flax.nnx.Linear` initialised like ``torch.nn.Linear`` (kernel ``(in, out)``);
    a 64-bit dtype without ``jax_enable_x64`` is a ``ValueError`` (:func:`check_dtypes`)."""
    check_dtypes(dtype, param_dtype)
    init = _torch_uniform(in_features)
    return nnx.Linear(
        in_features,
        out_features,
        use_bias=bias,
        dtype=dtype,
        param_dtype=param_dtype,
        kernel_init=init,
        bias_init=init,
        # Full float32 products, as torch.nn.Linear computes them (JAX's GPU default is TF32).
        precision=jax.lax.Precision.HIGHEST,
        rngs=rngs,
    )


def project(x: jax.Array, *layers: nnx.Linear) -> jax.Array:
    """``x`` through several :class:`flax.nnx.Linear` layers as ONE matmul: their outputs side
    by side (the twin of ``mingru.mixers._common.project``).

    The kernels are concatenated at call time, so the parameters (and their names, the
    initialisation and weight conversion) stay those of the separate layers.
    """
    first = layers[0]
    kernel = jnp.concatenate([layer.kernel[...] for layer in layers], axis=1)
    bias = (None if first.bias is None
            else jnp.concatenate([layer.bias[...] for layer in layers]))
    x, kernel, bias = first.promote_dtype((x, kernel, bias), dtype=first.dtype)
    y = jax.lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())),
                            precision=first.precision)
    return y if bias is None else y + bias


def layer_norm(
    features: int, *, dtype: Any = None, param_dtype: Any = jnp.float32, rngs: nnx.Rngs
) -> nnx.LayerNorm:
    """``nnx.LayerNorm`` matching ``torch.nn.LayerNorm(features, eps=1e-5)`` (dtypes checked as
    in :func:`linear`)."""
    check_dtypes(dtype, param_dtype)
    return nnx.LayerNorm(
        features,
        epsilon=LN_EPS,
        dtype=dtype,
        param_dtype=param_dtype,
        use_fast_variance=False,
        rngs=rngs,
    )


class TimeDecay(nnx.Module):
    """Per-token transition decay ``γ_t = exp(−λ f(Δt_t))``; inert when ``decay is None``.

    Args:
        decay: ``None``, ``"fixed"`` or ``"learnable"``.
        decay_rate: ``λ`` (fixed) or the initial ``softplus(ρ)`` (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` instead of the identity.
        channels: number of independent learnable rates (hidden units, blocks or heads).
        param_dtype: dtype of ``rho``.

    ``rho`` (learnable only) is initialised deterministically, so enabling decay never
    changes the random initialisation of the mixer's other parameters.
    """

    def __init__(
        self,
        decay: str | None,
        decay_rate: float,
        log1p_delta: bool,
        channels: int,
        *,
        param_dtype: Any = jnp.float32,
    ) -> None:
        self.decay_rate = check_decay(decay, decay_rate)
        self.mode = decay
        self.log1p_delta = bool(log1p_delta)
        self.channels = channels
        if decay == "learnable":
            self.rho = nnx.Param(
                jnp.full((channels,), inverse_softplus(self.decay_rate), dtype=param_dtype)
            )
        else:
            self.rho = nnx.data(None)

    @property
    def enabled(self) -> bool:
        return self.mode is not None

    def rate(self) -> jax.Array | float:
        """``λ``: a float (fixed) or a ``(channels,)`` array (learnable)."""
        return jax.nn.softplus(self.rho[...]) if self.rho is not None else self.decay_rate

    def log_gamma(
        self, delta_t: jax.Array | None, batch: int, steps: int | None, dtype: Any
    ) -> jax.Array | None:
        """``log γ`` for a sequence (``steps`` = T) or one step (``steps=None``).

        Returns ``None`` when decay is off, else ``(B, T, C)`` / ``(B, C)`` with ``C`` =
        ``channels`` (learnable) or 1 (fixed), in ``dtype``.
        """
        where = "__call__" if steps is not None else "step"
        if not self.enabled:
            if delta_t is not None:
                raise ValueError(
                    f"delta_t was given to {where}() but this mixer has decay=None; "
                    "construct it with decay='fixed' or 'learnable'"
                )
            return None
        if delta_t is None:
            raise ValueError(
                f"this mixer has decay={self.mode!r}, so {where}() needs delta_t "
                f"({'(B, T) or (B, T, 1)' if steps is not None else '(B,) or (B, 1)'})"
            )
        if steps is not None:
            shapes = [(batch, steps), (batch, steps, 1)]
            shape_txt = f"(B, T) or (B, T, 1) = ({batch}, {steps})"
        else:
            shapes = [(batch,), (batch, 1)]
            shape_txt = f"(B,) or (B, 1) = ({batch},)"
        if not hasattr(delta_t, "shape") or not hasattr(delta_t, "dtype"):
            raise TypeError(f"delta_t must be a jax.Array of shape {shape_txt}")
        if not shape_in(delta_t, shapes):
            raise ValueError(f"delta_t must have shape {shape_txt}; got {tuple(delta_t.shape)}")
        # Sanitize in at least fp32: the 1e10 cap would overflow fp16.
        work = jnp.promote_types(dtype, jnp.float32)
        dt = jnp.asarray(delta_t).astype(work)
        dt = dt.reshape(batch, steps, 1) if steps is not None else dt.reshape(batch, 1)
        rate = self.rate()
        rate = rate.astype(work) if isinstance(rate, jax.Array) else rate
        return (-(sanitize_delta_t(dt, self.log1p_delta) * rate)).astype(dtype)


def check_sequence(
    x: object, input_size: int, name: str = "x", *, module: nnx.Module | None = None
) -> jax.Array:
    """``x`` must be a floating ``(B, T, input_size)`` array with ``B, T ≥ 1`` (and of
    ``module``'s dtype, see :func:`check_input_dtype`)."""
    x = _validate.float_array(x, name, 3, shape=f"(B, T, {input_size})")
    if x.shape[-1] != input_size or x.shape[1] < 1 or x.shape[0] < 1:
        raise ValueError(
            f"{name} must have shape (B, T, {input_size}) with B, T ≥ 1; got {tuple(x.shape)}"
        )
    if module is not None:
        check_input_dtype(x, module, name)
    return x


def check_token(
    x: object, input_size: int, name: str = "x_t", *, module: nnx.Module | None = None
) -> jax.Array:
    """``x_t`` must be a floating ``(B, input_size)`` array (of ``module``'s dtype)."""
    x = _validate.float_array(x, name, 2, shape=f"(B, {input_size})")
    if x.shape[-1] != input_size:
        raise ValueError(f"{name} must have shape (B, {input_size}); got {tuple(x.shape)}")
    if module is not None:
        check_input_dtype(x, module, name)
    return x


def _module_dtypes(module: nnx.Module) -> tuple[Any, Any] | None:
    """``(dtype, param_dtype)`` of the first ``nnx.Linear`` / ``nnx.LayerNorm`` in ``module``."""
    for _, node in nnx.iter_graph(module):
        if isinstance(node, (nnx.Linear, nnx.LayerNorm)):
            return node.dtype, node.param_dtype
    return None


def check_input_dtype(x: jax.Array, module: nnx.Module, name: str = "x") -> None:
    """The input-dtype rule of every mixer, block and stack (the same in ``mingru``).

    ``x`` must have the module's parameter dtype (``param_dtype``), unless a compute dtype is
    set: a module built with ``dtype=...`` computes in that dtype and casts ``x`` to it, as
    Flax layers do (the twin of ``torch.autocast`` in the PyTorch frontend). A mismatch is a
    ``TypeError`` naming ``x`` and the module dtype, never a silent promotion.
    """
    dtypes = _module_dtypes(module)
    if dtypes is None:
        return
    dtype, param_dtype = dtypes
    if dtype is not None or jnp.dtype(x.dtype) == jnp.dtype(param_dtype):
        return
    raise TypeError(
        f"{name} has dtype {jnp.dtype(x.dtype)}, but {type(module).__name__}'s parameters are "
        f"{jnp.dtype(param_dtype)}: cast the input ({name}.astype({jnp.dtype(param_dtype)})), "
        f"build the module with param_dtype={jnp.dtype(x.dtype)}, or pass dtype= to compute "
        "in a given dtype"
    )


def check_state(
    h: object, batch: int, size: int, *, name: str, sequence: bool, dtype: Any
) -> jax.Array:
    """A state: ``(B, 1, size)`` for ``__call__`` (``sequence=True``) or ``(B, size)`` for
    ``step``; returned in ``dtype``."""
    shape = (batch, 1, size) if sequence else (batch, size)
    txt = f"(B, 1, {size})" if sequence else f"(B, {size})"
    h = _validate.float_array(h, name, len(shape), shape=txt)
    if tuple(h.shape) != shape:
        raise ValueError(f"{name} must have shape {txt} = {shape}; got {tuple(h.shape)}")
    return h.astype(dtype)


def packed_offsets(
    cu_seqlens: object, x: jax.Array, axis_name: str | None = None
) -> tuple[jax.Array | None, int]:
    """The checked offsets of a packed call on ``x (1, T, ·)`` (or ``None``) and the number of
    states the call carries: ``N`` sequences when packed, else the batch size ``B``.
    ``axis_name``: ``x`` is one device's slice of the packed row (the offsets are the whole
    row's, ending at ``T`` times the axis size; see :mod:`mingru_jax._packed_sharding`)."""
    if cu_seqlens is None:
        return None, x.shape[0]
    cu = check_cu_seqlens(cu_seqlens, x.shape[0], row_length(x.shape[1], axis_name))
    return cu, cu.shape[0] - 1


def check_call_state(h: object, cu_seqlens: jax.Array | None, n_states: int, *, size: int,
                     name: str, dtype: Any) -> jax.Array:
    """A ``__call__``'s initial state: ``(B, 1, size)``, or with ``cu_seqlens`` ``(N, 1,
    size)``, one row per sequence (``n_states`` from :func:`packed_offsets`); returned in
    ``dtype``."""
    if cu_seqlens is None:
        return check_state(h, n_states, size, name=name, sequence=True, dtype=dtype)
    h = _validate.float_array(h, name, 3, shape=f"(N, 1, {size})")
    check_packed_state(h, n_states, (1, size), name=name)
    return h.astype(dtype)


def is_concrete(x: jax.Array) -> bool:
    """True for a concrete array (value checks possible), False for a tracer."""
    return not isinstance(x, jax.core.Tracer)


class MixerCell(nnx.RNNCellBase):
    """Adapter that runs a mixer's ``step`` inside :class:`flax.nnx.RNN`.

    Subclasses set ``mixer_type``. Construct with the mixer's own arguments
    (``MinGRUCell(8, 16, rngs=nnx.Rngs(0))``) or wrap an existing mixer to share its weights
    (``MinGRUCell(mixer=m)``).

    Protocol: ``initialize_carry(input_shape) -> carry (*batch, S)`` (the mixer's default
    initial state), ``__call__(carry, x) -> (carry, y)``. With time decay on, the last input
    feature is ``Δt``: inputs are ``(*batch, input_size + 1)``. Leading batch dims are
    flattened around the mixer's ``step``.
    """

    mixer_type: type = type(None)

    def __init__(self, *args: Any, mixer: Any = None, rngs: nnx.Rngs | None = None, **kwargs):
        if mixer is None:
            if rngs is None:
                raise TypeError(f"{type(self).__name__} needs rngs= (or an existing mixer=)")
            mixer = self.mixer_type(*args, rngs=rngs, **kwargs)
        elif args or kwargs:
            raise TypeError("pass either mixer= or the mixer's constructor arguments, not both")
        if not isinstance(mixer, self.mixer_type):
            raise TypeError(
                f"mixer must be a {self.mixer_type.__name__}; got {type(mixer).__name__}"
            )
        self.mixer = mixer

    @property
    def num_feature_axes(self) -> int:
        return 1

    def _features(self) -> int:
        return self.mixer.input_size + (1 if self.mixer.decay.enabled else 0)

    def initialize_carry(
        self,
        input_shape: tuple[int, ...],
        rngs: Any = None,
        carry_init: Any = None,
    ) -> jax.Array:
        """The default initial state, ``(*input_shape[:-1], S)``."""
        batch = tuple(input_shape[:-1])
        n = math.prod(batch)
        if carry_init is not None:
            key = rngs() if callable(rngs) else jax.random.key(0)
            return carry_init(key, (*batch, self.mixer.state_size), jnp.float32)
        h = self.mixer.initial_state(n)
        return h.reshape(*batch, h.shape[-1])

    def __call__(self, carry: jax.Array, inputs: jax.Array) -> tuple[jax.Array, jax.Array]:
        F = self._features()
        if inputs.shape[-1] != F:
            extra = " (input_size + 1: the last feature is Δt)" if F > self.mixer.input_size else ""
            raise ValueError(f"cell inputs must have {F} features{extra}; got {inputs.shape}")
        batch = inputs.shape[:-1]
        x = inputs.reshape(-1, F)
        h = carry.reshape(x.shape[0], carry.shape[-1])
        dt = None
        if self.mixer.decay.enabled:
            x, dt = x[:, :-1], x[:, -1]
        y, h = self._step(x, h, dt)
        return h.reshape(*batch, h.shape[-1]), y.reshape(*batch, y.shape[-1])

    def _step(self, x, h, dt):
        h = self.mixer.step(x, h, delta_t=dt)
        return h, h
