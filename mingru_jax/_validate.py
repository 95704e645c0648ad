"""Argument checks shared by the scans and the mixers: clear errors naming the argument.

The twin of :mod:`mingru._validate`. Checks run on static shapes and dtypes, so they work
on tracers under ``jit``/``grad``/``vmap`` (where ``B`` is the per-example shape); the one
value check, :func:`no_nan` on initial states, reads concrete arrays only.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from typing import TypeVar

import jax
import jax.numpy as jnp
import numpy as np

R = TypeVar("R")

FLOAT_DTYPES = tuple(np.dtype(d) for d in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))


def float_array(x: object, name: str, ndim: int, shape: str) -> jax.Array:
    """Check ``x`` is a floating array of rank ``ndim``; return it as a ``jax.Array``.

    NumPy arrays are accepted and converted; anything else is a :class:`TypeError`.
    """
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise TypeError(f"{name} must be a jax.Array of shape {shape}; got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"{name} must be a floating array (float16, bfloat16, float32 or float64); "
            f"got {x.dtype}"
        )
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape} ({ndim} dims); got {tuple(x.shape)}")
    return jnp.asarray(x)


def floating(x: object, name: str) -> jax.Array:
    """Check ``x`` is a floating array of any rank; return it as a ``jax.Array``."""
    if not isinstance(x, (jax.Array, np.ndarray)):
        raise TypeError(f"{name} must be a jax.Array; got {type(x).__name__}")
    if x.dtype not in FLOAT_DTYPES:
        raise TypeError(f"{name} must be a floating array; got {x.dtype}")
    return jnp.asarray(x)


def same_dtype(arrays: Sequence[tuple[str, jax.Array]]) -> None:
    """All arrays share one dtype (no silent promotion)."""
    (n0, a0), *rest = arrays
    for n, a in rest:
        if a.dtype != a0.dtype:
            raise TypeError(f"{n} must have the dtype of {n0} ({a0.dtype}); got {a.dtype}")


def shape_is(x: jax.Array, name: str, expected: Sequence[int], shape: str) -> None:
    if tuple(x.shape) != tuple(expected):
        raise ValueError(
            f"{name} must have shape {shape} = {tuple(expected)}; got {tuple(x.shape)}"
        )


def nonempty_time(x: jax.Array, name: str) -> None:
    if x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one time step (dim 1); got {tuple(x.shape)}")


# True inside a public call whose initial states were checked: the calls it makes (a stack's
# blocks, a block's mixer) skip the check, so one public call checks each state once.
_STATES_CHECKED: ContextVar[bool] = ContextVar("mingru_jax_states_checked", default=False)


def no_nan(states: Sequence[tuple[str, object]]) -> None:
    """A ``ValueError`` naming the first of the named initial states that holds NaN (a NaN
    state makes every later state NaN). Only concrete floating arrays are read (a tracer under
    ``jit``/``grad``/``vmap`` has no values yet); ``None`` and other objects pass (their own
    checks name them). One device-to-host copy for all of them."""
    present = [(n, a) for n, a in states if isinstance(a, (jax.Array, np.ndarray))
               and not isinstance(a, jax.core.Tracer) and a.dtype in FLOAT_DTYPES]
    if not present:
        return
    # device_get starts every copy before waiting on any: one wait, whatever the devices.
    flags = jax.device_get([jnp.isnan(a).any() for _, a in present])
    for (name, a), bad in zip(present, flags, strict=True):
        if bad:
            raise ValueError(
                f"{name} holds NaN ({int(jnp.isnan(a).sum())} of {a.size} entries): a NaN "
                "initial state makes every later state NaN (pass None for the default)")


def check_states(states: Sequence[tuple[str, object]]) -> bool:
    """:func:`no_nan` on ``states`` at the entry of a public call that takes an initial state
    (``linear_recurrence``, and through :func:`checked_call` a mixer's ``__call__``, a
    block's, a stack's). The check reads concrete arrays only (nothing under ``jax.jit``),
    and not inside a :func:`checked_call` (whose entry checked its own states); ``step``
    never checks. Returns whether it ran."""
    if _STATES_CHECKED.get():
        return False
    no_nan(states)
    return True


def checked_call(states: Sequence[tuple[str, object]], fn: Callable[..., R], /,
                 *args: object, **kwargs: object) -> R:
    """``fn(*args, **kwargs)`` after :func:`check_states` on ``states``; the calls ``fn``
    makes (a stack's blocks, a block's mixer) skip the check."""
    if not check_states(states):
        return fn(*args, **kwargs)
    token = _STATES_CHECKED.set(True)
    try:
        return fn(*args, **kwargs)
    finally:
        _STATES_CHECKED.reset(token)


def checks_state(param: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """Decorate a public call whose argument ``param`` is an initial state: the call runs
    through :func:`checked_call` with that state named ``param``."""

    def decorate(fn: Callable[..., R]) -> Callable[..., R]:
        index = list(inspect.signature(fn).parameters).index(param)

        @functools.wraps(fn)
        def call(*args: object, **kwargs: object) -> R:
            state = kwargs.get(param, args[index] if index < len(args) else None)
            return checked_call([(param, state)], fn, *args, **kwargs)

        return call

    return decorate
