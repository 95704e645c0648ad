"""Triton launcher for :func:`mingru.linear_recurrence`: the custom ops
``mingru::linear_recurrence_fwd`` and ``mingru::linear_recurrence_bwd`` (kernels in
:mod:`mingru_kernels.linear_recurrence`).

Registered with ``torch.library`` (fake + autograd) so ``torch.compile(fullgraph=True)``
traces them. The forward always returns ``(h, h_T)`` (``h_T`` costs one row); backward saves
``a``, ``h_0`` and the output ``h`` only.
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor, poison
from mingru._launch._op import dual_entry
from mingru_kernels import linear_recurrence as linear_recurrence_kernels
from mingru_kernels.launch import linear_recurrence as meta

kernels = CachedKernels(linear_recurrence_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a: torch.Tensor, *args, **kwargs) -> str | None:
    """Why the kernel cannot run this call (``run``'s arguments; ``a``'s dtype and device
    decide), or ``None``."""
    return elementwise.unsupported_reason(a)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: one read and one write, never slower than the
    eager scan (which materialises the running product too)."""
    return True


def run(
    a: torch.Tensor,
    b: torch.Tensor,
    initial_state: torch.Tensor | None = None,
    return_final_state: bool = False,
    seq_id: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``h`` (or ``(h, h_T)``) for ``a, b (B, T, D)`` and ``initial_state (B, D)``;
    differentiable in all three. With ``seq_id`` (``(T,)`` int32, packed sequences, ``B = 1``)
    ``initial_state`` is ``(N, D)`` and the sequences restart inside the kernels (the caller
    gathers their final states; ``h_T`` is then not theirs)."""
    h, h_T = _entry(a, b, initial_state, seq_id)
    return (h, h_T) if return_final_state else h


def _forward(a, b, h0, seq_id, h, h_T, cfg) -> None:
    B, T, D = a.shape
    flags = dict(HAS_H0=h0 is not None, PACKED=seq_id is not None)
    h0 = a if h0 is None else h0  # placeholder pointers when absent
    seq_id = a if seq_id is None else seq_id
    with device_guard(a):
        elementwise.run_scan(kernels.linear_recurrence_fwd_kernel, cfg, (B, T, D),
                             tensors=dict(a_ptr=a, b_ptr=b, h0_ptr=h0, seq_ptr=seq_id, h_ptr=h,
                                          ht_ptr=h_T), **flags)


def _backward(a, h, h0, seq_id, dh, dh_T, da, db, dh0, cfg) -> None:
    B, T, D = a.shape
    flags = dict(HAS_H0=h0 is not None, HAS_DHT=dh_T is not None, PACKED=seq_id is not None)
    h0 = a if h0 is None else h0  # placeholder pointers when absent
    seq_id = a if seq_id is None else seq_id
    dh_T = a if dh_T is None else dh_T
    dh0 = da if dh0 is None else dh0
    dh_sb, dh_st, dh_sd = dh.stride()
    with device_guard(a):
        elementwise.run_scan(kernels.linear_recurrence_bwd_kernel, cfg, (B, T, D),
                             tensors=dict(a_ptr=a, h_ptr=h, h0_ptr=h0, seq_ptr=seq_id, dh_ptr=dh,
                                          dht_ptr=dh_T, da_ptr=da, db_ptr=db, dh0_ptr=dh0),
                             dh_sb=dh_sb, dh_st=dh_st, dh_sd=dh_sd, **flags)


def _fwd_impl(a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None,
              seq_id: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    a, b = a.contiguous(), b.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    cfg = elementwise.make_plan("linear_recurrence", a, meta.TILES)
    poisoned = poison()
    B, _, D = a.shape
    h = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    h_T = new_tensor((B, D), a.dtype, a.device, poisoned=poisoned)
    _forward(a, b, h0, seq_id=seq_id, h=h, h_T=h_T, cfg=cfg)
    return h, h_T


def _bwd_impl(a, h, h0, seq_id, dh, dh_T) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    a, h = a.contiguous(), h.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    cfg = elementwise.make_plan("linear_recurrence", a, meta.bwd_tiles(a.element_size()))
    # dh is read through its strides (an expanded gradient of a sum is not copied).
    dh = h.new_zeros(()).expand(h.shape) if dh is None else dh
    dh_T = None if dh_T is None else dh_T.contiguous()
    poisoned = poison()
    da = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    db = new_tensor(a.shape, a.dtype, a.device, poisoned=poisoned)
    dh0 = None
    if h0 is not None:
        # Packed: written at each sequence's first step only; an empty sequence's stays 0.
        dh0 = (torch.zeros_like(h0) if seq_id is not None
               else new_tensor(h0.shape, h0.dtype, h0.device, poisoned=poisoned))
    _backward(a, h, h0, seq_id=seq_id, dh=dh, dh_T=dh_T, da=da, db=db, dh0=dh0, cfg=cfg)
    return da, db, a.new_empty(0) if dh0 is None else dh0


@torch.library.custom_op("mingru::linear_recurrence_fwd", mutates_args=())
def linear_recurrence_fwd(
    a: torch.Tensor, b: torch.Tensor, h0: torch.Tensor | None, seq_id: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward op: ``(h (B, T, D), h_T (B, D))``."""
    return _fwd_impl(a, b, h0, seq_id=seq_id)


@linear_recurrence_fwd.register_fake
def _(a, b, h0, seq_id):
    B, _, D = a.shape
    return (torch.empty_like(a, memory_format=torch.contiguous_format),
            a.new_empty((B, D)))


@torch.library.custom_op("mingru::linear_recurrence_bwd", mutates_args=())
def linear_recurrence_bwd(
    a: torch.Tensor,
    h: torch.Tensor,
    h0: torch.Tensor | None,
    seq_id: torch.Tensor | None,
    dh: torch.Tensor | None,
    dh_T: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward op: ``(da, db, dh0)`` (an empty ``dh0`` when there is no ``h0``)."""
    return _bwd_impl(a, h, h0, seq_id=seq_id, dh=dh, dh_T=dh_T)


@linear_recurrence_bwd.register_fake
def _(a, h, h0, seq_id, dh, dh_T):
    return (
        torch.empty_like(a, memory_format=torch.contiguous_format),
        torch.empty_like(a, memory_format=torch.contiguous_format),
        a.new_empty(0) if h0 is None else torch.empty_like(h0),
    )


def _setup_context(ctx, inputs, output) -> None:
    a, _, h0, seq_id = inputs
    h, _ = output
    ctx.has_h0 = h0 is not None
    ctx.save_for_backward(a, h, h0, seq_id)
    # Unused outputs arrive as None (in eager): a missing dh_T skips its fold.
    ctx.set_materialize_grads(value=False)


def _backward_formula(ctx, dh, dh_T, bwd=linear_recurrence_bwd):
    if dh is None and dh_T is None:
        return None, None, None, None
    a, h, h0, seq_id = ctx.saved_tensors
    da, db, dh0 = bwd(a, h, h0, seq_id, dh, dh_T)
    return da, db, dh0 if ctx.has_h0 else None, None


_entry = dual_entry("linear_recurrence", linear_recurrence_fwd, _fwd_impl,
                    setup_context=_setup_context, formula=_backward_formula, bwd_impl=_bwd_impl)
