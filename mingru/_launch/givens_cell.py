"""Triton launcher for GivensMinGRU's fused cell (dispatch op ``givens_cell``).

The kernels are the Givens recurrence's (:mod:`mingru_kernels.givens_recurrence`) in their
gated form: they read the angles, ``k_z`` and ``k_h`` as column views of the mixer's one
projection ``k = [k_θ | k_z | k_h]`` (rows ``W`` elements apart, never copied out), form
``b = σ(k_z) ⊙ k_h`` in the kernel, and the backward writes the whole gradient of ``k`` in
place: ``dθ``, ``dk_z`` and ``dk_h`` into one ``(B, T, W)`` tensor. No per-gate tensor, no
copy of the angle columns and no concatenation of gradients. Saved for backward: ``k``,
``h0``, ``log_gamma`` and the output ``h``.

Forward and backward are ``torch.library`` custom ops (``mingru::givens_cell_fwd`` and
``_bwd``) with fake implementations, so ``torch.compile(fullgraph=True)`` traces them.
Imported only by :mod:`mingru.dispatch`, after :func:`mingru.available` returned ``True``.
"""

from __future__ import annotations

import torch

from mingru._eager.givens_cell import block_start, split_projection
from mingru._launch._alloc import new_tensor
from mingru._launch._op import dual_entry
from mingru._launch.givens_recurrence import KERNEL_DTYPES, walk_backward, walk_forward
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import givens_recurrence as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                       block_size: int, rounds: int) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    if k.dtype not in KERNEL_DTYPES:
        return f"{k.dtype} runs eager (kernels take float32, bfloat16, float16)"
    if block_size not in meta.SUPPORTED_K:
        return f"block_size={block_size} not in {{2, 4, 8, 16}}"
    if not k.is_cuda and not interpreter_mode():
        return f"inputs on {k.device} (the kernels need CUDA, or TRITON_INTERPRET=1)"
    return None


def prefer_over_eager(*args, **kwargs) -> bool:
    """``True``: the gated kernel reads and writes less than the Givens recurrence kernel with
    the gate math around it, which ``auto`` already picks on every supported shape class."""
    return True


def run(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
        block_size: int, rounds: int) -> torch.Tensor:
    """``h (B, T, D)``; differentiable in ``k``, ``h0`` and ``log_gamma``."""
    return _entry(k, h0, log_gamma, block_size, rounds)


def _forward(k, h0, log_gamma, block_size, rounds) -> torch.Tensor:
    k = k.contiguous()
    theta, k_z, k_h = split_projection(k, block_size, rounds)
    B, T, n, _ = k_z.shape
    row = k.shape[-1]  # every view's rows are W apart
    h = walk_forward(theta, k_h, k_z, h0=block_start(k, h0, n, block_size=block_size), scale=None,
                     log_gamma=log_gamma, th_row=row, in_row=row)
    return h.reshape(B, T, n * block_size)


def _backward(k, h0, log_gamma, h, dh, block_size, rounds):
    k = k.contiguous()
    theta, k_z, k_h = split_projection(k, block_size, rounds)
    B, T, n, _ = k_z.shape
    row = k.shape[-1]
    dk = new_tensor(k.shape, k.dtype, k.device)
    d_theta, d_z, d_h = split_projection(dk, block_size, rounds)
    shape = (B, T, n, block_size)
    dh0, _, dlog_gamma = walk_backward(theta, block_start(k, h0, n, block_size=block_size), None,
                                       log_gamma=log_gamma, h=h.reshape(shape),
                                       dh=dh.reshape(shape), hh=k_h, z=k_z, dtheta=d_theta, db=d_h,
                                       dz=d_z, th_row=row, in_row=row)
    return dk, dh0.reshape(B, n * block_size), dlog_gamma


# ----------------------------------------------------------------------------- custom ops


@torch.library.custom_op("mingru::givens_cell_fwd", mutates_args=())
def givens_cell_fwd(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                    block_size: int, rounds: int) -> torch.Tensor:
    """``h`` of GivensMinGRU's fused cell on the Triton kernels."""
    return _forward(k, h0, log_gamma, block_size=block_size, rounds=rounds)


@givens_cell_fwd.register_fake
def _(k, h0, log_gamma, block_size, rounds):
    return k.new_empty(*k.shape[:-1], 2 * k.shape[-1] // (rounds + 4))


@torch.library.custom_op("mingru::givens_cell_bwd", mutates_args=())
def givens_cell_bwd(k: torch.Tensor, h0: torch.Tensor | None, log_gamma: torch.Tensor | None,
                    h: torch.Tensor, dh: torch.Tensor, block_size: int, rounds: int
                    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dk, dh0, dlog_gamma)``; an absent ``log_gamma`` gets an empty placeholder gradient
    (``dh0`` is always formed: the gradient of the zero start when ``h0`` is absent)."""
    dk, dh0, dlog_gamma = _backward(k, h0, log_gamma, h=h, dh=dh, block_size=block_size,
                                    rounds=rounds)
    return dk, dh0, k.new_empty(0) if dlog_gamma is None else dlog_gamma


@givens_cell_bwd.register_fake
def _(k, h0, log_gamma, h, dh, block_size, rounds):
    return (k.new_empty(k.shape), h.new_empty(h.shape[0], h.shape[-1]),
            k.new_empty(0) if log_gamma is None else log_gamma.new_empty(log_gamma.shape))


def _setup_context(ctx, inputs, output) -> None:
    k, h0, log_gamma, block_size, rounds = inputs
    ctx.block_size, ctx.rounds = block_size, rounds
    ctx.has_h0, ctx.has_gamma = h0 is not None, log_gamma is not None
    ctx.save_for_backward(k, h0, log_gamma, output)


def _autograd_backward(ctx, dh, bwd=givens_cell_bwd):
    k, h0, log_gamma, h = ctx.saved_tensors
    if dh is None:
        return None, None, None, None, None
    dk, dh0, dlog_gamma = bwd(k, h0, log_gamma, h, dh, ctx.block_size, ctx.rounds)
    return (dk, dh0 if ctx.has_h0 else None, dlog_gamma if ctx.has_gamma else None, None,
            None)


_entry = dual_entry("givens_cell", givens_cell_fwd, _forward, setup_context=_setup_context,
                    formula=_autograd_backward, bwd_impl=_backward)
