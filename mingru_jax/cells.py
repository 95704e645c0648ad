"""The fused minGRU cells (the twin of :mod:`mingru.cells`): gates and recurrence in one op,
from the projection outputs.

A mixer computes ONE projection ``k`` holding its gates side by side and hands it to a cell,
which forms the gates and runs the recurrence without materialising any per-gate array (on a
GPU one Triton kernel each way through jax-triton; the eager twin is the reference). Each entry
validates here and dispatches through :mod:`mingru_jax.dispatch` (op ``mingru_cell``).
"""

from __future__ import annotations

import jax

from mingru_jax import _validate
from mingru_jax._eager.mingru_cell import mingru_cell_eager
from mingru_jax.dispatch import call
from mingru_kernels._spec import check_cell_shapes

__all__ = ["mingru_cell", "signed_mingru_cell"]


def mingru_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    return_final_state: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The MinGRU cell: ``h_t = γ_t (1 − z_t) h_{t−1} + z_t g(k_h)`` with ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 2·D)`` pre-activations ``[k_z | k_h]`` (one projection's output).
        initial_state: ``(B, D)`` non-negative ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay ``log γ ≤ 0`` of the transition.
        return_final_state: also return ``h_T``.

    Returns:
        ``h`` ``(B, T, D)``, positive, or ``(h, h_T)``; in ``k``'s dtype, differentiable in
        ``k``, ``initial_state`` and ``log_gamma``.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> from mingru_jax.cells import mingru_cell
        >>> h = mingru_cell(jax.random.normal(jax.random.key(0), (2, 7, 8)), jnp.full((2, 4), 0.5))
        >>> h.shape, bool((h > 0).all())
        ((2, 7, 4), True)
    """
    return _cell(k, 2, initial_state, log_gamma, False, False, return_final_state)


def signed_mingru_cell(
    k: jax.Array,
    initial_state: jax.Array | None = None,
    log_gamma: jax.Array | None = None,
    coupled: bool = False,
    return_final_state: bool = False,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """The signed cell: ``h_t = γ_t tanh(k_s) [(1 − z_t)] h_{t−1} + z_t k_h``, ``z = σ(k_z)``.

    Args:
        k: ``(B, T, 3·D)`` pre-activations ``[k_z | k_s | k_h]``.
        initial_state: ``(B, D)`` state ``h_0``; zeros when ``None``.
        log_gamma: ``(B, T, D)`` or ``(B, T, 1)`` log-decay of the transition.
        coupled: multiply the transition by ``1 − z``.
        return_final_state: also return ``h_T``.

    Returns:
        ``h`` ``(B, T, D)`` or ``(h, h_T)``, in ``k``'s dtype; differentiable in ``k``,
        ``initial_state`` and ``log_gamma``.

    Example:
        >>> import jax
        >>> from mingru_jax.cells import signed_mingru_cell
        >>> k = jax.random.normal(jax.random.key(0), (2, 7, 12))
        >>> h, h_T = signed_mingru_cell(k, return_final_state=True)
        >>> h.shape, h_T.shape
        ((2, 7, 4), (2, 4))
    """
    return _cell(k, 3, initial_state, log_gamma, True, bool(coupled), return_final_state)


def _cell(k, n_gates, initial_state, log_gamma, signed, coupled, return_final_state):
    k = _validate.floating(k, "k")
    named = [("k", k)]
    if initial_state is not None:
        initial_state = _validate.floating(initial_state, "initial_state")
        named.append(("initial_state", initial_state))
    if log_gamma is not None:
        log_gamma = _validate.floating(log_gamma, "log_gamma")
        named.append(("log_gamma", log_gamma))
    check_cell_shapes(k, n_gates, initial_state, log_gamma)
    _validate.same_dtype(named)
    return call("mingru_cell", mingru_cell_eager, k, initial_state, log_gamma, signed, coupled,
                bool(return_final_state))
