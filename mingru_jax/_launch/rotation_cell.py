"""jax-triton launcher for RotationMinGRU's fused cell (dispatch op ``rotation_cell``; the twin
of :mod:`mingru._launch.rotation_cell`).

The kernels are the Givens recurrence's (:mod:`mingru_kernels.givens_recurrence`) with one
round on 2×2 blocks, gated and in rotation mode: they read ``k_θ``, ``k_u``, ``k_z`` and
``k_h`` as columns of the mixer's one projection ``k`` (rows ``W`` elements apart), snap the
angles to multiples of ``2π/K_j``, form the scale ``[1, tanh(k_u)]`` and the input
``σ(k_z) ⊙ k_h`` as they load them, and the backward writes the whole gradient of ``k`` as one
array (the snap's gradient is the identity, straight-through). A ``jax.custom_vjp`` saves
``k``, ``h_0``, the log-decay, the snap table and the output ``h``; the snap table gets a
zero cotangent. The launch sequences are :mod:`mingru_jax._launch.givens_cell`'s.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager.givens_cell import block_start
from mingru_jax._launch import _common as common
from mingru_jax._launch.givens_cell import walk_backward, walk_forward

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(k, h0, log_gamma, snap_k) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    return common.unsupported_dtype_or_device(k)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: always, as in the PyTorch frontend (it reads
    the projection once where the plain form adds a snap, ``tanh``, scale, sigmoid and
    product pass around the same recurrence kernel)."""
    return True


def run(k: jax.Array, h0: jax.Array | None, log_gamma: jax.Array | None,
        snap_k: jax.Array | None) -> jax.Array:
    """``h (B, T, 2n)``; jit/grad/vmap-compatible, differentiable in ``k``, ``h0`` and
    ``log_gamma``."""
    B, T, W = k.shape
    n = W // 6
    if snap_k is not None:
        snap_k = snap_k.astype(jnp.float32)
    h = _op(k, block_start(k, h0, n, block_size=2), log_gamma, snap_k)
    return h.reshape(B, T, 2 * n)


def _cols(W: int) -> tuple[int, int, int]:
    """Where ``(k_u, k_z, k_h)`` start in a row of ``[k_θ | k_u | k_z | k_h]``."""
    n = W // 6
    return n, 2 * n, 4 * n


def _forward(k, h0, log_gamma, snap):
    return walk_forward(k, h0, log_gamma, snap=snap, R=1, cols=_cols(k.shape[-1]), rotation=True)


def _backward(k, h0, log_gamma, snap, h, dh):
    dk, dh0, dg = walk_backward(k, h0, log_gamma, snap=snap, h=h, dh=dh, R=1,
                                cols=_cols(k.shape[-1]), rotation=True)
    return (dk, dh0) if log_gamma is None else (dk, dh0, dg)


# The snap table (n,) has no leading batch axis, so a vmapped call runs its items one after
# another rather than folding the vmapped axis into B.
_forward_batched = common.batched_by_map(_forward)
_backward_batched = common.batched_by_map(_backward)


@common.custom_vjp
def _op(k, h0, log_gamma, snap):
    return _forward_batched(k, h0, log_gamma, snap)[0]


def _op_fwd(k, h0, log_gamma, snap):
    (h,) = _forward_batched(k, h0, log_gamma, snap)
    return h, (k, h0, log_gamma, snap, h)


def _op_bwd(res, dh):
    k, h0, log_gamma, snap, h = res
    grads = _backward_batched(k, h0, log_gamma, snap, h, jnp.asarray(dh, h.dtype))
    return (grads[0], grads[1], None if log_gamma is None else grads[2],
            None if snap is None else jnp.zeros_like(snap))


_op.defvjp(_op_fwd, _op_bwd)
