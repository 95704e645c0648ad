"""jax-triton launcher for the fused minGRU cells (:func:`mingru_jax.cells.mingru_cell`,
:func:`mingru_jax.cells.signed_mingru_cell`; kernels in :mod:`mingru_kernels.mingru_cell`, the
same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``k``, the
log-decay, ``h_0`` and the output ``h`` only. A missing ``initial_state`` is a zero state (one
``(B, D)`` array), so the traced kernels are the same with and without it. Packed sequences
(``seq_id``, ``B = 1``) run the same kernels with ``PACKED`` on, through their own adapters and
``custom_vjp`` (the per-sequence ``h_0 (N, D)``, no state read when absent, ``dh_0`` zeroed for
empty sequences). See
:mod:`mingru_jax._launch._common` for the two routes of each launch.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_jax._launch import _elementwise as elementwise
from mingru_kernels import mingru_cell as kernels
from mingru_kernels.launch import mingru_cell as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(k, *args, **kwargs) -> str | None:
    """Why the kernel cannot run this call, or ``None``."""
    return common.unsupported_dtype_or_device(k)


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel (one read of ``k``, one write of ``h``)."""
    return True


def run(
    k: jax.Array,
    initial_state: jax.Array | None,
    log_gamma: jax.Array | None,
    signed: bool,
    coupled: bool,
    return_final_state: bool = False,
    seq_id: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``h`` (or ``(h, h_T)``) of the cell on the Triton kernels; jit/grad/vmap-compatible.
    With ``seq_id`` (``(T,)`` int32, packed sequences, ``B = 1``) ``initial_state`` is
    ``(N, D)`` or ``None`` and the sequences restart inside the kernels (the caller gathers
    their final states; ``h_T`` is then the row's last state)."""
    B, _, S = k.shape
    D = S // meta.gate_count(signed)
    if seq_id is not None:
        has_h0 = initial_state is not None
        # Without a state the kernels read none (HAS_H0 off): a one-row placeholder.
        h0 = initial_state if has_h0 else jnp.zeros((1, D), k.dtype)
        h, h_T = _packed_op(bool(signed), bool(coupled), has_h0, k, h0, log_gamma,
                            seq_id.astype(jnp.int32))
        return (h, h_T) if return_final_state else h
    h0 = jnp.zeros((B, D), k.dtype) if initial_state is None else initial_state
    h, h_T = _op(bool(signed), bool(coupled), k, h0, log_gamma)
    return (h, h_T) if return_final_state else h


# ----------------------------------------------------------------------------- adapters
# jax-triton passes outputs after the inputs and runtime scalars; these reorder parameters
# into the kernels' own order and call them unchanged (inlined by Triton).


# ``seq`` is the (T,) int32 sequence index of each step when PACKED (``h0`` is then (N, D),
# or a placeholder without HAS_H0), else a placeholder.


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _fwd_adapter(k, lg, h0, seq, T, D, chunk_len, n_chunks_p1, n_dblk, lg_row, lg_col,
                 h, h_T, v, st,
                 MODE: tl.constexpr, SIGNED: tl.constexpr, COUPLED: tl.constexpr,
                 HAS_DECAY: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # (v, st): the look-back's values and status words (placeholders for the walk).
    kernels.mingru_cell_fwd_kernel(k, lg, h0, seq, h, h_T, v, st, T, D, chunk_len, n_chunks,
                                   n_dblk, lg_row, lg_col, MODE, HAS_H0, SIGNED, COUPLED,
                                   HAS_DECAY, PACKED, BLOCK_T, BLOCK_D, LOOP_STAGES)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _bwd_adapter(k, lg, h0, h, seq, dh, dht, T, D, chunk_len, n_chunks_p1, n_dblk,
                 lg_row, lg_col, dk, dlg, dh0, v, st,
                 MODE: tl.constexpr, SIGNED: tl.constexpr, COUPLED: tl.constexpr,
                 HAS_DECAY: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # dh is dense: strides (T·D, D, 1); (v, st) as in the forward.
    kernels.mingru_cell_bwd_kernel(k, lg, h0, h, seq, dh, dht, dk, dlg, dh0, v, st,
                                   T, D, chunk_len, n_chunks, n_dblk, lg_row, lg_col,
                                   T * D, D, 1, MODE, HAS_H0, True, SIGNED, COUPLED, HAS_DECAY,
                                   PACKED, BLOCK_T, BLOCK_D, LOOP_STAGES)


# ----------------------------------------------------------------------------- launch sequences


def _plan(k, h0, signed: bool, forward: bool):
    B, T, _ = k.shape
    D = h0.shape[1]
    state = jax.ShapeDtypeStruct((B, T, D), k.dtype)
    tiles = meta.TILES[signed] if forward else meta.bwd_tiles(signed, k.dtype.itemsize)
    return elementwise.plan("mingru_cell", state, tiles), B, T, D


def _decay(k, lg):
    """The log-decay operand (``k`` as a placeholder when absent) and its strides."""
    if lg is None:
        return k, (0, 0), False
    return lg, ((1, 0) if lg.shape[-1] == 1 else (lg.shape[-1], 1)), True


def _launch_forward(signed, coupled, k, h0, lg, seq_id=None, has_h0=True):
    cfg, B, T, D = _plan(k, h0, signed, forward=True)
    lg_in, strides, has_decay = _decay(k, lg)
    outs = (jax.ShapeDtypeStruct((B, T, D), k.dtype), jax.ShapeDtypeStruct((B, D), k.dtype))
    # Packed (B = 1): the per-step sequence index as one more input (a placeholder if not).
    ins = (k, lg_in, h0, k if seq_id is None else seq_id)
    extra = dict(HAS_H0=has_h0, PACKED=seq_id is not None)
    return elementwise.run_scan(_fwd_adapter, cfg, B, D=D, inputs=ins, outs=outs,
                                scalars=(*elementwise.dims(cfg, T, D), *strides), SIGNED=signed,
                                COUPLED=coupled, HAS_DECAY=has_decay, **extra,
                                **meta.launch_kwargs(cfg))


def _launch_backward(signed, coupled, k, h0, lg, h, dh, dh_T, seq_id=None, has_h0=True):
    cfg, B, T, D = _plan(k, h0, signed, forward=False)
    lg_in, strides, has_decay = _decay(k, lg)
    dummy = common.f32((1,))
    dlg = jax.ShapeDtypeStruct((B, T, D), lg.dtype) if has_decay else dummy
    outs = (common.like(k), dlg, common.like(h0))
    ins = (k, lg_in, h0, h, k if seq_id is None else seq_id, dh, dh_T)
    extra = dict(HAS_H0=has_h0, PACKED=seq_id is not None)
    dk, dlg, dh0 = elementwise.run_scan(_bwd_adapter, cfg, B, D=D, inputs=ins, outs=outs,
                                        scalars=(*elementwise.dims(cfg, T, D), *strides),
                                        SIGNED=signed, COUPLED=coupled, HAS_DECAY=has_decay,
                                        **extra, **meta.launch_kwargs(cfg))
    if not has_decay:
        return dk, dh0
    if lg.shape[-1] == 1:
        dlg = jnp.sum(dlg.astype(jnp.float32), axis=-1, keepdims=True).astype(lg.dtype)
    return dk, dh0, dlg


# ----------------------------------------------------------------------------- custom_vjp


@functools.cache
def _batched(signed: bool, coupled: bool):
    """The forward and backward launch sequences of one cell variant, vmappable."""
    forward = common.batched(functools.partial(_launch_forward, signed, coupled))
    backward = common.batched(functools.partial(_launch_backward, signed, coupled))
    return forward, backward


@functools.partial(common.custom_vjp, nondiff_argnums=(0, 1))
def _op(signed, coupled, k, h0, lg):
    return _batched(signed, coupled)[0](k, h0, lg)


def _op_fwd(signed, coupled, k, h0, lg):
    h, h_T = _batched(signed, coupled)[0](k, h0, lg)
    return (h, h_T), (k, h0, lg, h)


def _op_bwd(signed, coupled, res, cts):
    k, h0, lg, h = res
    dh, dh_T = cts
    grads = _batched(signed, coupled)[1](k, h0, lg, h, dh, dh_T)
    return grads if lg is not None else (*grads, None)


_op.defvjp(_op_fwd, _op_bwd)


# ----------------------------------------------------------------------------- packed custom_vjp


@functools.cache
def _packed(signed: bool, coupled: bool, has_h0: bool):
    """The packed forward and backward launch sequences of one cell variant (one row each;
    vmapped calls run one after another)."""
    def forward(k, h0, lg, seq_id):
        return _launch_forward(signed, coupled, k, h0=h0, lg=lg, seq_id=seq_id, has_h0=has_h0)

    def backward(k, h0, lg, h, seq_id, dh, dh_T):
        return _launch_backward(signed, coupled, k, h0=h0, lg=lg, h=h, dh=dh, dh_T=dh_T,
                                seq_id=seq_id, has_h0=has_h0)

    return common.batched_by_map(forward), common.batched_by_map(backward)


@functools.partial(common.custom_vjp, nondiff_argnums=(0, 1, 2))
def _packed_op(signed, coupled, has_h0, k, h0, lg, seq_id):
    return _packed(signed, coupled, has_h0)[0](k, h0, lg, seq_id)


def _packed_op_fwd(signed, coupled, has_h0, k, h0, lg, seq_id):
    h, h_T = _packed(signed, coupled, has_h0)[0](k, h0, lg, seq_id)
    return (h, h_T), (k, h0, lg, h, seq_id)


def _packed_op_bwd(signed, coupled, has_h0, res, cts):
    k, h0, lg, h, seq_id = res
    dh, dh_T = cts
    dk, dh0, *dlg = _packed(signed, coupled, has_h0)[1](k, h0, lg, h, seq_id, dh, dh_T)
    dh0 = common.packed_state_grad(dh0, seq_id, has_h0)
    return dk, dh0, dlg[0] if lg is not None else None, None


_packed_op.defvjp(_packed_op_fwd, _packed_op_bwd)
