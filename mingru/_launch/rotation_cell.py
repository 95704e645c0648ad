"""Triton launcher for RotationMinGRU's fused cell (dispatch op ``rotation_cell``).

The kernels are the Givens recurrence's (:mod:`mingru_kernels.givens_recurrence`) with one
round on 2×2 blocks, gated and in rotation mode: they read ``k_θ``, ``k_u``, ``k_z`` and
``k_h`` as column views of the mixer's one projection ``k`` (rows ``W`` elements apart, never
copied out), snap the angles to multiples of ``2π/K_j``, form the scale ``[1, tanh(k_u)]`` and
the input ``σ(k_z) ⊙ k_h`` as they load them, and the backward writes the whole gradient of
``k`` in place (the snap's gradient is the identity, straight-through). Saved for backward:
``k``, ``h0``, ``log_gamma``, the snap table and the output ``h``.

Forward and backward are ``torch.library`` custom ops (``mingru::rotation_cell_fwd`` and
``_bwd``) with fake implementations, so ``torch.compile(fullgraph=True)`` traces them.
Imported only by :mod:`mingru.dispatch`, after :func:`mingru.available` returned ``True``.
"""

from __future__ import annotations

import torch

from mingru._eager.givens_cell import block_start
from mingru._eager.rotation_cell import split_projection
from mingru._launch._alloc import new_tensor
from mingru._launch._op import dual_entry
from mingru._launch.givens_recurrence import KERNEL_DTYPES, walk_backward, walk_forward
from mingru_kernels._seam import interpreter_mode

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                       snap_k: torch.Tensor | None) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    if k.dtype not in KERNEL_DTYPES:
        return f"{k.dtype} runs eager (kernels take float32, bfloat16, float16)"
    if not k.is_cuda and not interpreter_mode():
        return f"inputs on {k.device} (the kernels need CUDA, or TRITON_INTERPRET=1)"
    return None


def prefer_over_eager(*args, **kwargs) -> bool:
    """``True``: the kernel reads the projection once where the plain form adds a snap,
    ``tanh``, scale, sigmoid and product pass around the same recurrence kernel (which
    ``auto`` already picks on every supported shape class)."""
    return True


def run(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
        snap_k: torch.Tensor | None) -> torch.Tensor:
    """``h (B, T, 2n)``; differentiable in ``k``, ``h0`` and ``log_gamma``."""
    return _entry(k, h0, log_gamma, snap_k)


def _forward(k, h0, log_gamma, snap_k) -> torch.Tensor:
    k = k.contiguous()
    theta, u, k_z, k_h = split_projection(k)
    B, T, n, _ = k_z.shape
    row = k.shape[-1]  # every view's rows are W apart
    h = walk_forward(theta, k_h, k_z, h0=block_start(k, h0, n, block_size=2), scale=u,
                     log_gamma=log_gamma, th_row=row, in_row=row, rotation=True, snap=snap_k)
    return h.reshape(B, T, 2 * n)


def _backward(k, h0, log_gamma, snap_k, h, dh):
    k = k.contiguous()
    theta, u, k_z, k_h = split_projection(k)
    B, T, n, _ = k_z.shape
    row = k.shape[-1]
    dk = new_tensor(k.shape, k.dtype, k.device)
    d_theta, d_u, d_z, d_h = split_projection(dk)
    shape = (B, T, n, 2)
    dh0, _, dlog_gamma = walk_backward(theta, block_start(k, h0, n, block_size=2), u,
                                       log_gamma=log_gamma, h=h.reshape(shape),
                                       dh=dh.reshape(shape), hh=k_h, z=k_z, dtheta=d_theta, db=d_h,
                                       dz=d_z, th_row=row, in_row=row, rotation=True, snap=snap_k,
                                       du=d_u)
    return dk, dh0.reshape(B, 2 * n), dlog_gamma


# ----------------------------------------------------------------------------- custom ops


@torch.library.custom_op("mingru::rotation_cell_fwd", mutates_args=())
def rotation_cell_fwd(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                      snap_k: torch.Tensor | None) -> torch.Tensor:
    """``h`` of RotationMinGRU's fused cell on the Triton kernels."""
    return _forward(k, h0, log_gamma, snap_k=snap_k)


@rotation_cell_fwd.register_fake
def _(k, h0, log_gamma, snap_k):
    return k.new_empty(*k.shape[:-1], k.shape[-1] // 3)


@torch.library.custom_op("mingru::rotation_cell_bwd", mutates_args=())
def rotation_cell_bwd(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                      snap_k: torch.Tensor | None, h: torch.Tensor, dh: torch.Tensor
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dk, dh0, dlog_gamma)``; an absent ``log_gamma`` gets an empty placeholder gradient
    (``dh0`` is always formed: the gradient of the zero start when ``h0`` is absent)."""
    dk, dh0, dlog_gamma = _backward(k, h0, log_gamma, snap_k=snap_k, h=h, dh=dh)
    return dk, dh0, k.new_empty(0) if dlog_gamma is None else dlog_gamma


@rotation_cell_bwd.register_fake
def _(k, h0, log_gamma, snap_k, h, dh):
    return (k.new_empty(k.shape), h.new_empty(h.shape[0], h.shape[-1]),
            k.new_empty(0) if log_gamma is None else log_gamma.new_empty(log_gamma.shape))


def _setup_context(ctx, inputs, output) -> None:
    k, h0, log_gamma, snap_k = inputs
    ctx.has_h0, ctx.has_gamma = h0 is not None, log_gamma is not None
    ctx.save_for_backward(k, h0, log_gamma, snap_k, output)


def _autograd_backward(ctx, dh, bwd=rotation_cell_bwd):
    k, h0, log_gamma, snap_k, h = ctx.saved_tensors
    if dh is None:
        return None, None, None, None
    dk, dh0, dlog_gamma = bwd(k, h0, log_gamma, snap_k, h, dh)
    return dk, dh0 if ctx.has_h0 else None, dlog_gamma if ctx.has_gamma else None, None


_entry = dual_entry("rotation_cell", rotation_cell_fwd, _forward, setup_context=_setup_context,
                    formula=_autograd_backward, bwd_impl=_backward)
