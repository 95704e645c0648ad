"""Argument checks shared by the scans and the mixers: clear errors naming the argument.

The twin of :mod:`mingru._validate`. Checks run on static shapes and dtypes, so they work
on tracers under ``jit``/``grad``/``vmap`` (where ``B`` is the per-example shape).
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np

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
