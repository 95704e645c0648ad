"""Eager log-space scan (Heinsen 2023) for ``h_t = a_t h_{t-1} + b_t`` with ``a, b > 0``.

The twin of :mod:`mingru._eager.parallel_scan_log`. Inputs are ``log a`` ``(B, T, D)`` and
``log_values`` ``(B, T+1, D)`` (slot 0 = ``log h_0``). The start state is the constant map
``(log 1, log h_0)`` prepended to the sequence, and the whole sequence is one
:func:`jax.lax.associative_scan` over ``(log a, log b)`` pairs with the log-pair combine
``(A₁ + A₂, logaddexp(A₂ + L₁, L₂))``. It never forms a whole-sequence cumulative sum of
``log a`` minus a running log-sum-exp (Heinsen's closed form, whose cancellation error grows
with ``T``), so ``T = 20000`` in float32 keeps full accuracy even where products underflow.
Gradients come from JAX's autodiff (finite at ``h_0 = 0``, see ``_combine.logaddexp``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager._combine import log_pair, scan


def parallel_scan_log_eager(log_coeffs: jax.Array, log_values: jax.Array) -> jax.Array:
    """``h (B, T, D)`` for ``log_coeffs (B, T, D)`` and ``log_values (B, T+1, D)``.

    Example:
        >>> import jax.numpy as jnp
        >>> h = parallel_scan_log_eager(jnp.full((1, 3, 1), jnp.log(0.5)), jnp.zeros((1, 4, 1)))
        >>> h[0, :, 0].tolist()   # h_t = h_{t-1}/2 + 1 from h_0 = 1
        [1.5, 1.75, 1.875]
    """
    log_a = jnp.concatenate([jnp.zeros_like(log_coeffs[:, :1]), log_coeffs], axis=1)
    _, log_h = scan(log_a, log_values, log_pair)
    return jnp.exp(log_h[:, 1:])
