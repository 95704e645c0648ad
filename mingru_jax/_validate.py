"""Argument checks shared by the scans and the mixers: clear errors naming the argument.

The twin of :mod:`mingru._validate`. Checks run on static shapes and dtypes, so they work
on tracers under ``jit``/``grad``/``vmap`` (where ``B`` is the per-example shape); the one
value check, :func:`no_nan` on initial states, reads concrete arrays only.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from mingru_kernels._checks import ArrayKind, OncePerCall, check_float, nonempty_time, shape_is

__all__ = [
    "FLOAT_DTYPES", "check_states", "checked_call", "checks_state", "float_array", "floating",
    "no_nan", "nonempty_time", "same_dtype", "shape_is",
]

FLOAT_DTYPES = tuple(np.dtype(d) for d in (jnp.float16, jnp.bfloat16, jnp.float32, jnp.float64))
_ARRAY = ArrayKind((jax.Array, np.ndarray), "jax.Array", "array", float_dtypes=FLOAT_DTYPES)


def float_array(x: object, name: str, ndim: int, shape: str) -> jax.Array:
    """Check ``x`` is a floating array of rank ``ndim``; return it as a ``jax.Array``.

    NumPy arrays are accepted and converted; anything else is a :class:`TypeError`.
    """
    check_float(x, name, ndim=ndim, shape=shape, kind=_ARRAY)
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


# The NaN check of initial states, once per public call and of concrete arrays only (no_nan
# reads nothing under jax.jit): check_states(states) at an entry; checked_call(states, fn,
# *args, **kwargs) runs fn after it, and the calls fn makes (a stack's blocks, a block's mixer)
# skip it; @checks_state("h_0") does the same for a public call whose argument h_0 is a state.
_ONCE = OncePerCall("mingru_jax_states_checked", no_nan=no_nan)
check_states = _ONCE.check_states
checked_call = _ONCE.checked_call
checks_state = _ONCE.checks_state
