"""Triton launcher for :func:`mingru.parallel_scan_log`: the custom ops
``mingru::parallel_scan_log_fwd`` and ``mingru::parallel_scan_log_bwd`` (kernels in
:mod:`mingru_kernels.parallel_scan_log`).

Registered with ``torch.library`` (fake + autograd) so ``torch.compile(fullgraph=True)``
traces them. Backward saves the inputs and the output ``h`` (not ``log h``: the forward then
writes ``h`` only, the bandwidth floor; the backward takes ``log₂ h`` itself).
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor, poison
from mingru._launch._op import dual_entry
from mingru_kernels import parallel_scan_log as parallel_scan_log_kernels
from mingru_kernels.launch import parallel_scan_log as meta

kernels = CachedKernels(parallel_scan_log_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> str | None:
    """Why the kernel cannot run ``parallel_scan_log(log_coeffs, log_values)``, or ``None``."""
    return elementwise.unsupported_reason(log_coeffs)


def prefer_over_eager(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> bool:
    """Whether ``auto`` should pick the kernel: always (it reads its inputs once and writes
    ``h`` once, where the eager scan makes several passes)."""
    return True


def run(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    """``h (B, T, D)`` on the Triton kernels; differentiable in both inputs."""
    return _entry(log_coeffs, log_values)


def _forward(la, lv, h, cfg) -> None:
    B, T, D = la.shape
    with device_guard(la):
        elementwise.run_scan(kernels.parallel_scan_log_fwd_kernel, cfg, (B, T, D),
                             tensors=dict(la_ptr=la, lv_ptr=lv, h_ptr=h))


def _backward(la, lv, h, dh, dla, dlv, cfg) -> None:
    B, T, D = la.shape
    dh_sb, dh_st, dh_sd = dh.stride()
    with device_guard(la):
        elementwise.run_scan(kernels.parallel_scan_log_bwd_kernel, cfg, (B, T, D),
                             tensors=dict(la_ptr=la, lv_ptr=lv, h_ptr=h, dh_ptr=dh, dla_ptr=dla,
                                          dlv_ptr=dlv),
                             dh_sb=dh_sb, dh_st=dh_st, dh_sd=dh_sd)


def _fwd_impl(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    la, lv = log_coeffs.contiguous(), log_values.contiguous()
    cfg = elementwise.make_plan("parallel_scan_log", la, meta.TILES)
    h = new_tensor(la.shape, la.dtype, la.device)
    _forward(la, lv, h, cfg=cfg)
    return h


def _bwd_impl(log_coeffs, log_values, h, dh) -> tuple[torch.Tensor, torch.Tensor]:
    la, lv = log_coeffs.contiguous(), log_values.contiguous()
    cfg = elementwise.make_plan("parallel_scan_log", la, meta.bwd_tiles(la.element_size()))
    poisoned = poison()
    dla = new_tensor(la.shape, la.dtype, la.device, poisoned=poisoned)
    dlv = new_tensor(lv.shape, lv.dtype, lv.device, poisoned=poisoned)
    # dh is read through its strides (an expanded gradient of a sum is not copied).
    _backward(la, lv, h.contiguous(), dh=dh, dla=dla, dlv=dlv, cfg=cfg)
    return dla, dlv


@torch.library.custom_op("mingru::parallel_scan_log_fwd", mutates_args=())
def parallel_scan_log_fwd(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    """Forward op: ``h (B, T, D)``."""
    return _fwd_impl(log_coeffs, log_values)


@parallel_scan_log_fwd.register_fake
def _(log_coeffs, log_values):
    return torch.empty_like(log_coeffs, memory_format=torch.contiguous_format)


@torch.library.custom_op("mingru::parallel_scan_log_bwd", mutates_args=())
def parallel_scan_log_bwd(
    log_coeffs: torch.Tensor,
    log_values: torch.Tensor,
    h: torch.Tensor,
    dh: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Backward op: ``(d log_coeffs, d log_values)`` from the inputs, ``h`` and ``dh``."""
    return _bwd_impl(log_coeffs, log_values, h, dh=dh)


@parallel_scan_log_bwd.register_fake
def _(log_coeffs, log_values, h, dh):
    return (
        torch.empty_like(log_coeffs, memory_format=torch.contiguous_format),
        torch.empty_like(log_values, memory_format=torch.contiguous_format),
    )


def _setup_context(ctx, inputs, output) -> None:
    log_coeffs, log_values = inputs
    ctx.save_for_backward(log_coeffs, log_values, output)


def _backward_formula(ctx, dh, bwd=parallel_scan_log_bwd):
    log_coeffs, log_values, h = ctx.saved_tensors
    return bwd(log_coeffs, log_values, h, dh)


_entry = dual_entry("parallel_scan_log", parallel_scan_log_fwd, _fwd_impl,
                    setup_context=_setup_context, formula=_backward_formula, bwd_impl=_bwd_impl)
