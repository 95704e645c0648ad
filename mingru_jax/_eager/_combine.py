"""Combine rules for :func:`jax.lax.associative_scan` over affine maps along axis 1.

Element t is a map ``h ↦ a_t ∘ h + b_t``; ``combine(lo, hi)`` returns the map "apply ``lo``,
then ``hi``" (``lo`` holds the earlier elements, as ``associative_scan`` passes them). After
the scan, element t holds the map from the start to step t: its ``a`` part is the running
product ``P_t`` and its ``b`` part the zero-start solution ``Z_t``.

The three algebras are those of ``mingru/_eager/_odd_even.py``: diagonal (``a*b``), block
matrix (``matmul``) and log-space pairs.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

Pair = tuple[jax.Array, jax.Array]


def fp32_matmuls(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Trace ``fn`` with full-float32 matrix products.

    JAX's default on recent NVIDIA GPUs computes float32 dots with TF32 (10-bit mantissa)
    inputs; PyTorch's default, the Triton kernels and the float64 oracles do not, and the spec
    asks for no TF32 unless requested. The eager twins therefore pin the precision (it has no
    effect on the CPU, nor on half-precision inputs).
    """

    @functools.wraps(fn)
    def wrapped(*args: Any, **kwargs: Any) -> Any:
        with jax.default_matmul_precision("highest"):
            return fn(*args, **kwargs)

    return wrapped


def diagonal(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``h ↦ a ⊙ h + b``."""
    return hi[0] * lo[0], hi[0] * lo[1] + hi[1]


def block_matrix(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``H ↦ A H + B`` with ``A (…, k, k)``, ``B (…, k, v)``."""
    return hi[0] @ lo[0], hi[0] @ lo[1] + hi[1]


@jax.custom_jvp
def logaddexp(x: jax.Array, y: jax.Array) -> jax.Array:
    """``log(eˣ + eʸ)`` whose derivative is 0 (not NaN) where both are ``-inf``.

    ``-inf`` is a legal log value here (``h_0 = 0`` or ``b_t = 0``), and
    :func:`jax.numpy.logaddexp` differentiates ``(-inf, -inf)`` to NaN.
    """
    return jnp.logaddexp(x, y)


@logaddexp.defjvp
def _logaddexp_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    out = jnp.logaddexp(x, y)
    # Softmax weights of (x, y); where out = -inf both are -inf and both weights are 0.
    ref = jnp.where(jnp.isneginf(out), jnp.zeros_like(out), out)
    wx = jnp.exp(x - ref)
    wy = jnp.exp(y - ref)
    return out, wx * tx + wy * ty


def log_pair(lo: Pair, hi: Pair) -> Pair:
    """Composition for ``h ↦ a h + b`` held as ``(log a, log b)`` with ``a, b > 0``."""
    return lo[0] + hi[0], logaddexp(hi[0] + lo[1], hi[1])


def scan(a: jax.Array, b: jax.Array, combine) -> Pair:
    """Inclusive scan of the maps ``(a_t, b_t)`` along axis 1; returns ``(P, Z)``."""
    return jax.lax.associative_scan(combine, (a, b), axis=1)
