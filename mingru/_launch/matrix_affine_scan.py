"""Triton launcher for ``matrix_affine_scan`` (and ``matrix_scan``, which is its ``k=2, v=1``).

Thin: shapes, buffers, grids and the autograd/compile registration. The kernels live in
:mod:`mingru_kernels.matrix_affine_scan`, their launch metadata in
:mod:`mingru_kernels.launch.matrix_affine_scan`. The forward and backward are
``torch.library`` custom ops (``mingru::matrix_affine_scan_fwd`` and ``_bwd``) with fake
implementations, so ``torch.compile(fullgraph=True)`` traces them without graph breaks.
Saved for backward: ``A`` and the outputs ``P, Z`` only.

Imported only by :mod:`mingru.dispatch`, after :func:`mingru.available` returned ``True``.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch._alloc import device_guard, new_tensor, poison
from mingru._launch._op import dual_entry
from mingru_kernels import matrix_affine_scan as matrix_affine_scan_kernels
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import matrix_affine_scan as meta
from mingru_kernels.launch import switches

kernels = CachedKernels(matrix_affine_scan_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

KERNEL_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

def unsupported_reason(A: torch.Tensor, Bm: torch.Tensor) -> str | None:
    """Why the kernel cannot run ``matrix_affine_scan(A, Bm)``, or ``None``."""
    k, v = A.shape[-1], Bm.shape[-1]
    if A.dtype not in KERNEL_DTYPES:
        return f"{A.dtype} runs eager (kernels take float32, bfloat16, float16)"
    if k not in meta.SUPPORTED_SIZES:
        return f"k={k} not in {{1, 2, 4, 8, 16}}"
    if v not in meta.SUPPORTED_SIZES:
        return f"v={v} not in {{1, 2, 4, 8, 16}}"
    if not A.is_cuda and not interpreter_mode():
        return f"inputs on {A.device} (the kernels need CUDA, or TRITON_INTERPRET=1)"
    return None


def prefer_over_eager(A: torch.Tensor, Bm: torch.Tensor) -> bool:
    """``True``: ``auto`` picks the kernel on every supported shape class (``False`` would
    keep a class on eager, where eager is the faster path)."""
    return True


def run(A: torch.Tensor, Bm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Z)`` for ``H_t = A_t H_{t-1} + B_t``; differentiable in ``A`` and ``Bm``."""
    return _entry(A, Bm)


# ----------------------------------------------------------------------------- plumbing


def _empty(shape, like: torch.Tensor, dtype: torch.dtype | None = None,
           *, poisoned: bool = False) -> torch.Tensor:
    return new_tensor(shape, like.dtype if dtype is None else dtype, like.device, poisoned=poisoned)


def _plan(A: torch.Tensor, v: int) -> meta.WalkPlan:
    """The launch over ``A``'s blocks with ``k×v`` states (a test may force the segments)."""
    return meta.walk_plan(A.shape, v,
                          seg_len=switches.plan_choices("matrix_affine_scan").get("seg_len"))


def _walk(kernel, tensors: dict[str, torch.Tensor], *, unread: tuple, v: int, width: int,
          poisoned: bool, **flags: bool) -> None:
    """Run the walk ``kernel`` on ``tensors`` (its pointer arguments before the composites'
    scratch, by parameter name) for ``k×v`` states. Where T is split, a composites pass first
    writes float32 scratch (per pair and segment a ``k×k`` transition and a ``k×width`` map);
    on one segment ``unread`` stands in for the scratch. ``flags``: the kernel's constexprs
    beyond the plan's."""
    A = tensors["a_ptr"]
    k = A.shape[-1]
    plan = _plan(A, v)
    with device_guard(A):
        m, c = unread
        if plan.nseg > 1:
            m = _empty((plan.npair, plan.nseg, k, k), A, torch.float32, poisoned=poisoned)
            c = _empty((plan.npair, plan.nseg, k, width), A, torch.float32, poisoned=poisoned)
            kernel[plan.grid](**tensors, m_ptr=m, c_ptr=c, **plan.sizes, COMPOSITE=True,
                              **flags, **plan.constants)
        kernel[plan.grid](**tensors, m_ptr=m, c_ptr=c, **plan.sizes, COMPOSITE=False, **flags,
                          **plan.constants)


def _forward(A: torch.Tensor, Bm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    A, Bm = A.contiguous(), Bm.contiguous()
    poisoned = poison()
    P, Z = _empty(A.shape, A, poisoned=poisoned), _empty(Bm.shape, Bm, poisoned=poisoned)
    if A.shape[0] * A.shape[2] > 0:  # any block pairs
        v = Bm.shape[-1]
        _walk(kernels.matrix_affine_scan_fwd_kernel, dict(a_ptr=A, b_ptr=Bm, p_ptr=P, z_ptr=Z),
              unread=(A, Bm), v=v, width=v, poisoned=poisoned)
    return P, Z


def _backward(
    A: torch.Tensor, P: torch.Tensor, Z: torch.Tensor,
    dP: torch.Tensor | None, dZ: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    A, P, Z, dZ = A.contiguous(), P.contiguous(), Z.contiguous(), dZ.contiguous()
    has_dp = dP is not None
    dP = dP.contiguous() if has_dp else dZ  # dummy pointer when absent
    poisoned = poison()
    dA, dB = _empty(A.shape, A, poisoned=poisoned), _empty(Z.shape, Z, poisoned=poisoned)
    if A.shape[0] * A.shape[2] > 0:  # any block pairs
        k, v = A.shape[-1], Z.shape[-1]
        # The adjoint scan carries [dZ | dP]: its maps are k×(v + k).
        _walk(kernels.matrix_affine_scan_bwd_kernel,
              dict(a_ptr=A, p_ptr=P, z_ptr=Z, dp_ptr=dP, dz_ptr=dZ, da_ptr=dA, db_ptr=dB),
              unread=(A, Z), v=v, width=v + k, poisoned=poisoned, HAS_DP=has_dp)
    return dA, dB


# ----------------------------------------------------------------------------- custom ops


@torch.library.custom_op("mingru::matrix_affine_scan_fwd", mutates_args=())
def matrix_affine_scan_fwd(A: torch.Tensor, Bm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Z)`` of the block affine scan on the Triton kernels."""
    return _forward(A, Bm)


@matrix_affine_scan_fwd.register_fake
def _(A: torch.Tensor, Bm: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return A.new_empty(A.shape), Bm.new_empty(Bm.shape)


@torch.library.custom_op("mingru::matrix_affine_scan_bwd", mutates_args=())
def matrix_affine_scan_bwd(
    A: torch.Tensor, P: torch.Tensor, Z: torch.Tensor,
    dP: torch.Tensor | None, dZ: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(dA, dBm)`` from the saved ``A, P, Z`` and the output gradients."""
    return _backward(A, P, Z, dP=dP, dZ=dZ)


@matrix_affine_scan_bwd.register_fake
def _(A, P, Z, dP, dZ):
    return A.new_empty(A.shape), Z.new_empty(Z.shape)


def _setup_context(ctx, inputs, output) -> None:
    A, _ = inputs
    P, Z = output
    ctx.save_for_backward(A, P, Z)
    ctx.set_materialize_grads(value=False)  # dP = None skips its scan; dZ = None becomes zeros


def _autograd_backward(ctx, dP, dZ, bwd=matrix_affine_scan_bwd):
    if dP is None and dZ is None:
        return None, None
    A, P, Z = ctx.saved_tensors
    if dZ is None:
        dZ = torch.zeros_like(Z)
    return bwd(A, P, Z, dP, dZ)


_entry = dual_entry("matrix_affine_scan", matrix_affine_scan_fwd, _forward,
                    setup_context=_setup_context, formula=_autograd_backward, bwd_impl=_backward)
