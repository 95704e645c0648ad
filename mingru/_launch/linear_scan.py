"""Triton launcher for :func:`mingru.linear_scan`: the custom ops ``mingru::linear_scan_fwd``
and ``mingru::linear_scan_bwd`` (kernels in :mod:`mingru_kernels.linear_scan`).

Registered with ``torch.library`` (fake + autograd) so ``torch.compile(fullgraph=True)``
traces them. Backward saves ``a`` and the outputs ``P, Z`` only.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor, poison
from mingru._launch._op import dual_entry
from mingru_kernels import linear_scan as linear_scan_kernels
from mingru_kernels.launch import linear_scan as meta

kernels = CachedKernels(linear_scan_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a: torch.Tensor, b: torch.Tensor) -> str | None:
    """Why the kernel cannot run ``linear_scan(a, b)``, or ``None``."""
    return elementwise.unsupported_reason(a)


def prefer_over_eager(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``auto`` should pick the kernel: always (one pass over the inputs, where the
    eager scan makes several)."""
    return True


def run(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(P, Z)`` for ``a, b (B, T, D)`` on the Triton kernels; differentiable."""
    return _entry(a, b)


def _forward(a, b, P, Z, cfg) -> None:
    B, T, D = a.shape
    grid, sizes = meta.grid(cfg, B), meta.size_kwargs(cfg, T, D)
    args = dict(a_ptr=a, b_ptr=b, p_ptr=P, z_ptr=Z, **sizes, **meta.launch_kwargs(cfg))
    with device_guard(a):
        if cfg["strategy"] == "walk":
            # The walk reads no chunk summaries: the outputs stand in for them.
            kernels.linear_scan_fwd_kernel[grid](**args, sa_ptr=P, sb_ptr=Z, MODE=meta.WALK)
            return
        sa, sb, ca, cb = elementwise.scratch(meta.FWD_SCRATCH, B, cfg, D=D, device=a.device)
        kernels.linear_scan_fwd_kernel[grid](**args, sa_ptr=sa, sb_ptr=sb, MODE=meta.SUMMARY)
        kernels.linear_carry_kernel[meta.carry_grid(cfg, B)](
            sa_ptr=sa, sx_ptr=sb, sy_ptr=sb, ca_ptr=ca, cx_ptr=cb, cy_ptr=cb,
            n_chunks=sizes["n_chunks"], D=D, n_dblk=sizes["n_dblk"],
            REVERSE=False, STORE_A=True, HAS_Y=False, **meta.carry_kwargs(cfg),
        )
        kernels.linear_scan_fwd_kernel[grid](**args, sa_ptr=ca, sb_ptr=cb, MODE=meta.APPLY)


def _backward(a, P, Z, dP, dZ, da, db, cfg) -> None:
    B, T, D = a.shape
    grid, sizes = meta.grid(cfg, B), meta.size_kwargs(cfg, T, D)
    has_dp = dP is not None
    dP = dZ if dP is None else dP  # a placeholder pointer when HAS_DP is False
    dz_sb, dz_st, dz_sd = dZ.stride()
    dp_sb, dp_st, dp_sd = dP.stride()
    args = dict(a_ptr=a, p_ptr=P, z_ptr=Z, dp_ptr=dP, dz_ptr=dZ, da_ptr=da, db_ptr=db, **sizes,
                dz_sb=dz_sb, dz_st=dz_st, dz_sd=dz_sd, dp_sb=dp_sb, dp_st=dp_st, dp_sd=dp_sd,
                HAS_DP=has_dp, **meta.launch_kwargs(cfg))
    with device_guard(a):
        if cfg["strategy"] == "walk":
            # The walk reads no chunk summaries: da stands in for them.
            kernels.linear_scan_bwd_kernel[grid](**args, sc_ptr=da, sg_ptr=da, sgp_ptr=da,
                                                 MODE=meta.WALK)
            return
        sc, sg, sgp, cg, cgp = elementwise.scratch(meta.BWD_SCRATCH, B, cfg, D=D, device=a.device)
        kernels.linear_scan_bwd_kernel[grid](**args, sc_ptr=sc, sg_ptr=sg, sgp_ptr=sgp,
                                             MODE=meta.SUMMARY)
        kernels.linear_carry_kernel[meta.carry_grid(cfg, B)](
            sa_ptr=sc, sx_ptr=sg, sy_ptr=sgp, ca_ptr=sc, cx_ptr=cg, cy_ptr=cgp,
            n_chunks=sizes["n_chunks"], D=D, n_dblk=sizes["n_dblk"],
            REVERSE=True, STORE_A=False, HAS_Y=has_dp, **meta.carry_kwargs(cfg),
        )
        kernels.linear_scan_bwd_kernel[grid](**args, sc_ptr=sc, sg_ptr=cg, sgp_ptr=cgp,
                                             MODE=meta.APPLY)


def _fwd_impl(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = a.contiguous(), b.contiguous()
    cfg = elementwise.make_plan("linear_scan", a)
    poisoned = poison()
    P = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    Z = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    _forward(a, b, P, Z=Z, cfg=cfg)
    return P, Z


def _bwd_impl(a, P, Z, dP, dZ) -> tuple[torch.Tensor, torch.Tensor]:
    a = a.contiguous()
    cfg = elementwise.make_plan("linear_scan", a)
    # The output gradients are read through their strides (an expanded gradient of a sum is
    # not copied); a missing dZ is a zero read with stride 0.
    dZ = Z.new_zeros(()).expand(Z.shape) if dZ is None else dZ
    poisoned = poison()
    da = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    db = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    _backward(a, P.contiguous(), Z.contiguous(), dP=dP, dZ=dZ, da=da, db=db, cfg=cfg)
    return da, db


@torch.library.custom_op("mingru::linear_scan_fwd", mutates_args=())
def linear_scan_fwd(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward op: ``(P, Z)`` for ``a, b (B, T, D)``."""
    return _fwd_impl(a, b)


@linear_scan_fwd.register_fake
def _(a, b):
    return torch.empty_like(a, memory_format=torch.contiguous_format), torch.empty_like(
        a, memory_format=torch.contiguous_format
    )


@torch.library.custom_op("mingru::linear_scan_bwd", mutates_args=())
def linear_scan_bwd(
    a: torch.Tensor,
    P: torch.Tensor,
    Z: torch.Tensor,
    dP: torch.Tensor | None,
    dZ: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward op: ``(da, db)`` from the saved ``a, P, Z`` and the output gradients."""
    return _bwd_impl(a, P, Z, dP=dP, dZ=dZ)


@linear_scan_bwd.register_fake
def _(a, P, Z, dP, dZ):
    return torch.empty_like(a, memory_format=torch.contiguous_format), torch.empty_like(
        a, memory_format=torch.contiguous_format
    )


def _setup_context(ctx, inputs, output) -> None:
    a, _ = inputs
    P, Z = output
    ctx.save_for_backward(a, P, Z)
    # Unused outputs arrive as None (in eager), which skips the dP scan entirely.
    ctx.set_materialize_grads(value=False)


def _backward_formula(ctx, dP, dZ, bwd=linear_scan_bwd):
    if dP is None and dZ is None:
        return None, None
    a, P, Z = ctx.saved_tensors
    return bwd(a, P, Z, dP, dZ)


_entry = dual_entry("linear_scan", linear_scan_fwd, _fwd_impl, setup_context=_setup_context,
                    formula=_backward_formula, bwd_impl=_bwd_impl)
