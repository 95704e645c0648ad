"""Triton launcher for the fused minGRU cells (:func:`mingru.cells.mingru_cell`,
:func:`mingru.cells.signed_mingru_cell`): the custom ops ``mingru::mingru_cell_fwd`` and
``mingru::mingru_cell_bwd`` (kernels in :mod:`mingru_kernels.mingru_cell`).

Registered with ``torch.library`` (fake + autograd) so ``torch.compile(fullgraph=True)``
traces them. The forward returns ``(h, h_T)``; backward saves the pre-activations ``k``, the
log-decay, ``h_0`` and the output ``h`` only, and reads the incoming gradient through its
strides (the gradient of a ``sum`` arrives expanded; no copy is made of it).
"""

from __future__ import annotations

import torch

from mingru._compat import CachedKernels
from mingru._launch import _elementwise as elementwise
from mingru._launch._alloc import device_guard, new_tensor, poison
from mingru._launch._op import dual_entry
from mingru_kernels import mingru_cell as mingru_cell_kernels
from mingru_kernels.launch import mingru_cell as meta

kernels = CachedKernels(mingru_cell_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(k: torch.Tensor, *args, **kwargs) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    return elementwise.unsupported_reason(k)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: it reads the pre-activations once and writes the
    states once, where the eager cell makes a pass per gate."""
    return True


def run(
    k: torch.Tensor,
    initial_state: torch.Tensor | None,
    log_gamma: torch.Tensor | None,
    signed: bool,
    coupled: bool,
    return_final_state: bool = False,
    seq_id: torch.Tensor | None = None,
) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
    """``h`` (or ``(h, h_T)``) of the cell for ``k (B, T, n·D)``; differentiable in ``k``,
    ``initial_state`` and ``log_gamma``. With ``seq_id`` (``(T,)`` int32, packed sequences,
    ``B = 1``) ``initial_state`` is ``(N, D)`` and the sequences restart inside the kernels
    (the caller gathers their final states)."""
    h, h_T = _entry(k, initial_state, log_gamma, bool(signed), bool(coupled), seq_id)
    return (h, h_T) if return_final_state else h


def _state_shape(k: torch.Tensor, signed: bool) -> tuple[int, int, int]:
    B, T, S = k.shape
    return B, T, S // meta.gate_count(signed)


def _decay_strides(lg: torch.Tensor | None) -> dict[str, int]:
    """The kernels' ``lg_row`` and ``lg_col``, the row and column strides of ``log γ``: a
    ``(B, T, 1)`` decay is read with column stride 0."""
    if lg is None:
        return dict(lg_row=0, lg_col=0)
    if lg.shape[-1] == 1:
        return dict(lg_row=1, lg_col=0)
    return dict(lg_row=lg.shape[-1], lg_col=1)


def _flags(h0, lg, signed, *, coupled, seq_id) -> dict:
    return dict(HAS_H0=h0 is not None, SIGNED=signed, COUPLED=coupled, HAS_DECAY=lg is not None,
                PACKED=seq_id is not None)


def _fwd_impl(k, h0, lg, signed, coupled, seq_id=None):
    k = k.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    lg = None if lg is None else lg.contiguous()
    B, T, D = _state_shape(k, signed)
    cfg = elementwise.make_plan("mingru_cell", k, meta.TILES[signed], shape=(B, T, D))
    poisoned = poison()
    h = new_tensor((B, T, D), k.dtype, k.device, poisoned=poisoned)
    h_T = new_tensor((B, D), k.dtype, k.device, poisoned=poisoned)
    tensors = dict(k_ptr=k, lg_ptr=k if lg is None else lg,  # placeholders if absent
                   h0_ptr=k if h0 is None else h0, seq_ptr=k if seq_id is None else seq_id,
                   h_ptr=h, ht_ptr=h_T)
    with device_guard(k):
        elementwise.run_scan(kernels.mingru_cell_fwd_kernel, cfg, (B, T, D), tensors=tensors,
                             **_decay_strides(lg),
                             **_flags(h0, lg, signed, coupled=coupled, seq_id=seq_id))
    return h, h_T


def _bwd_impl(k, h, h0, lg, dh, dh_T, signed, coupled, seq_id=None):
    k, h = k.contiguous(), h.contiguous()
    h0 = None if h0 is None else h0.contiguous()
    lg = None if lg is None else lg.contiguous()
    B, T, D = _state_shape(k, signed)
    cfg = elementwise.make_plan("mingru_cell", k, meta.bwd_tiles(signed, k.element_size()),
                              shape=(B, T, D))
    if dh is None:
        dh = k.new_zeros(()).expand(B, T, D)
    dh_T = None if dh_T is None else dh_T.contiguous()
    poisoned = poison()
    dk = new_tensor(k.shape, k.dtype, k.device, poisoned=poisoned)
    # The decay gradient per channel; a (B, T, 1) decay sums it over D below.
    dlg = None if lg is None else new_tensor((B, T, D), lg.dtype, k.device, poisoned=poisoned)
    dh0 = None
    if h0 is not None:
        # Packed: written at each sequence's first step only; an empty sequence's stays 0.
        dh0 = (torch.zeros_like(h0) if seq_id is not None
               else new_tensor(h0.shape, h0.dtype, h0.device, poisoned=poisoned))
    dh_sb, dh_st, dh_sd = dh.stride()
    tensors = dict(k_ptr=k, lg_ptr=k if lg is None else lg, h0_ptr=k if h0 is None else h0,
                   h_ptr=h, seq_ptr=k if seq_id is None else seq_id, dh_ptr=dh,
                   dht_ptr=k if dh_T is None else dh_T, dk_ptr=dk,
                   dlg_ptr=dk if dlg is None else dlg, dh0_ptr=dk if dh0 is None else dh0)
    with device_guard(k):
        elementwise.run_scan(kernels.mingru_cell_bwd_kernel, cfg, (B, T, D), tensors=tensors,
                             **_decay_strides(lg), dh_sb=dh_sb, dh_st=dh_st, dh_sd=dh_sd,
                             HAS_DHT=dh_T is not None,
                             **_flags(h0, lg, signed, coupled=coupled, seq_id=seq_id))
    if dlg is not None and lg.shape[-1] == 1:
        dlg = dlg.sum(-1, keepdim=True, dtype=torch.float32).to(lg.dtype)
    # Distinct empties: outputs of a custom op may not alias each other (torch.compile).
    return (dk, k.new_empty(0) if dh0 is None else dh0,
            k.new_empty(0) if dlg is None else dlg)


@torch.library.custom_op("mingru::mingru_cell_fwd", mutates_args=())
def mingru_cell_fwd(
    k: torch.Tensor, h0: torch.Tensor | None, lg: torch.Tensor | None, signed: bool,
    coupled: bool, seq_id: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward op: ``(h (B, T, D), h_T (B, D))``."""
    return _fwd_impl(k, h0, lg, signed=signed, coupled=coupled, seq_id=seq_id)


@mingru_cell_fwd.register_fake
def _(k, h0, lg, signed, coupled, seq_id):
    B, T, D = _state_shape(k, signed)
    return k.new_empty((B, T, D)), k.new_empty((B, D))


@torch.library.custom_op("mingru::mingru_cell_bwd", mutates_args=())
def mingru_cell_bwd(
    k: torch.Tensor, h: torch.Tensor, h0: torch.Tensor | None, lg: torch.Tensor | None,
    dh: torch.Tensor | None, dh_T: torch.Tensor | None, signed: bool, coupled: bool,
    seq_id: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward op: ``(dk, dh0, dlog_gamma)`` (empty tensors for absent inputs)."""
    return _bwd_impl(k, h, h0, lg=lg, dh=dh, dh_T=dh_T, signed=signed, coupled=coupled,
                     seq_id=seq_id)


@mingru_cell_bwd.register_fake
def _(k, h, h0, lg, dh, dh_T, signed, coupled, seq_id):
    return (
        torch.empty_like(k, memory_format=torch.contiguous_format),
        k.new_empty(0) if h0 is None else torch.empty_like(h0),
        k.new_empty(0) if lg is None else torch.empty_like(lg),
    )


def _setup_context(ctx, inputs, output) -> None:
    k, h0, lg, signed, coupled, seq_id = inputs
    h, _ = output
    ctx.flags = (h0 is not None, lg is not None, signed, coupled)
    ctx.save_for_backward(k, h, h0, lg, seq_id)
    # Unused outputs arrive as None (in eager): a missing dh_T skips its fold.
    ctx.set_materialize_grads(value=False)


def _backward_formula(ctx, dh, dh_T, bwd=mingru_cell_bwd):
    if dh is None and dh_T is None:
        return None, None, None, None, None, None
    k, h, h0, lg, seq_id = ctx.saved_tensors
    has_h0, has_lg, signed, coupled = ctx.flags
    dk, dh0, dlg = bwd(k, h, h0, lg, dh, dh_T, signed, coupled, seq_id)
    return dk, dh0 if has_h0 else None, dlg if has_lg else None, None, None, None


_entry = dual_entry("mingru_cell", mingru_cell_fwd, _fwd_impl, setup_context=_setup_context,
                    formula=_backward_formula, bwd_impl=_bwd_impl)
