"""jax-triton launcher for :func:`mingru_jax.linear_recurrence` (kernels in
:mod:`mingru_kernels.linear_recurrence`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the forward and backward kernels; the backward saves ``a``, ``h_0``
and the output ``h`` only. A missing ``initial_state`` is a zero state (one ``(B, D)`` array),
so the traced kernels are the same with and without it. Packed sequences (``seq_id``,
``B = 1``) run the same kernels with ``PACKED`` on, through their own adapters and
``custom_vjp`` (the per-sequence ``h_0 (N, D)``, no state read when absent, ``dh_0`` zeroed
for empty sequences). See :mod:`mingru_jax._launch._common` for the two routes of each
launch (jax-triton on a GPU, Triton's interpreter on the host).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from mingru_jax._launch import _common as common
from mingru_jax._launch import _elementwise as elementwise
from mingru_kernels import linear_recurrence as kernels
from mingru_kernels.launch import linear_recurrence as meta

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]


def unsupported_reason(a, *args, **kwargs) -> str | None:
    """Why the kernel cannot run this call (``run``'s arguments; ``a``'s dtype and device
    decide), or ``None``."""
    return common.unsupported_dtype_or_device(a)


EAGER_MAX_ELEMENTS = 1 << 16
"""``auto`` keeps XLA's scan for inputs of at most this many elements (``B·T·D``): there both
are bound by dispatch, and XLA's is the cheaper; past it the kernel's single read and write
(the bandwidth floor) win."""


def prefer_over_eager(a, *args, **kwargs) -> bool:
    """Whether ``auto`` should pick the kernel: above :data:`EAGER_MAX_ELEMENTS` (one read,
    one write: the bandwidth floor); below it XLA's scan is the faster."""
    return a.size > EAGER_MAX_ELEMENTS


def run(
    a: jax.Array,
    b: jax.Array,
    initial_state: jax.Array | None = None,
    return_final_state: bool = False,
    seq_id: jax.Array | None = None,
) -> jax.Array | tuple[jax.Array, jax.Array]:
    """``h`` (or ``(h, h_T)``) on the Triton kernels; jit/grad/vmap-compatible. With
    ``seq_id`` (``(T,)`` int32, packed sequences, ``B = 1``) ``initial_state`` is ``(N, D)``
    or ``None`` and the sequences restart inside the kernels (the caller gathers their final
    states; ``h_T`` is then the row's last state)."""
    if seq_id is not None:
        has_h0 = initial_state is not None
        # Without a state the kernels read none (HAS_H0 off): a one-row placeholder.
        h0 = initial_state if has_h0 else jnp.zeros((1, a.shape[2]), a.dtype)
        h, h_T = _packed_op(has_h0, a, b, h0, seq_id.astype(jnp.int32))
        return (h, h_T) if return_final_state else h
    h0 = jnp.zeros((a.shape[0], a.shape[2]), a.dtype) if initial_state is None else initial_state
    h, h_T = _op(a, b, h0)
    return (h, h_T) if return_final_state else h


# ----------------------------------------------------------------------------- adapters
# jax-triton passes outputs after the inputs and runtime scalars; these reorder parameters
# into the kernels' own order and call them unchanged (inlined by Triton).


# ``seq`` is the (T,) int32 sequence index of each step when PACKED (``h0`` is then (N, D),
# or a placeholder without HAS_H0), else a placeholder.


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _fwd_adapter(a, b, h0, seq, T, D, chunk_len, n_chunks_p1, n_dblk, h, h_T, v, st,
                 MODE: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr,
                 BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr, LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # (v, st): the look-back's values and status words (placeholders for the walk).
    kernels.linear_recurrence_fwd_kernel(a, b, h0, seq, h, h_T, v, st,
                                         T, D, chunk_len, n_chunks, n_dblk,
                                         MODE, HAS_H0, PACKED, BLOCK_T, BLOCK_D, LOOP_STAGES)


@triton.jit(do_not_specialize=["T", "chunk_len", "n_chunks_p1"])
def _bwd_adapter(a, h, h0, seq, dh, dht, T, D, chunk_len, n_chunks_p1, n_dblk,
                 da, db, dh0, v, st, MODE: tl.constexpr, HAS_H0: tl.constexpr,
                 PACKED: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
                 LOOP_STAGES: tl.constexpr):
    n_chunks = n_chunks_p1 - 1  # see elementwise.dims
    # dh is dense: strides (T·D, D, 1); (v, st) as in the forward.
    kernels.linear_recurrence_bwd_kernel(a, h, h0, seq, dh, dht, da, db, dh0, v, st,
                                         T, D, chunk_len, n_chunks, n_dblk, T * D, D, 1,
                                         MODE, HAS_H0, True, PACKED, BLOCK_T, BLOCK_D,
                                         LOOP_STAGES)


# ----------------------------------------------------------------------------- launch sequences


# The forward takes the look-back where T must be split, as in PyTorch.
def _launch_forward(a, b, h0, seq_id=None, has_h0=True):
    """``(h, h_T)``; packed (``seq_id`` given, ``B = 1``): ``h_T`` is the row's last state."""
    B, T, D = a.shape
    cfg = elementwise.plan("linear_recurrence", a, meta.TILES)
    seq = a if seq_id is None else seq_id  # a placeholder unless packed
    return elementwise.run_scan(_fwd_adapter, cfg, B, D=D, inputs=(a, b, h0, seq),
                                outs=(common.like(a), jax.ShapeDtypeStruct((B, D), a.dtype)),
                                scalars=elementwise.dims(cfg, T, D), HAS_H0=has_h0,
                                PACKED=seq_id is not None, **meta.launch_kwargs(cfg))


def _launch_backward(a, h, h0, dh, dh_T, seq_id=None, has_h0=True):
    B, T, D = a.shape
    cfg = elementwise.plan("linear_recurrence", a, meta.bwd_tiles(a.dtype.itemsize))
    seq = a if seq_id is None else seq_id
    return elementwise.run_scan(_bwd_adapter, cfg, B, D=D, inputs=(a, h, h0, seq, dh, dh_T),
                                outs=(common.like(a), common.like(a), common.like(h0)),
                                scalars=elementwise.dims(cfg, T, D), HAS_H0=has_h0,
                                PACKED=seq_id is not None, **meta.launch_kwargs(cfg))


def _launch_packed_forward(has_h0, a, b, h0, seq_id):
    return _launch_forward(a, b, h0, seq_id=seq_id, has_h0=has_h0)


def _launch_packed_backward(has_h0, a, h, h0, seq_id, dh, dh_T):
    return _launch_backward(a, h, h0, dh=dh, dh_T=dh_T, seq_id=seq_id, has_h0=has_h0)


# ----------------------------------------------------------------------------- custom_vjp


_forward = common.batched(_launch_forward)
_backward = common.batched(_launch_backward)


@common.custom_vjp
def _op(a, b, h0):
    return _forward(a, b, h0)


def _op_fwd(a, b, h0):
    h, h_T = _forward(a, b, h0)
    return (h, h_T), (a, h, h0)


def _op_bwd(res, cts):
    a, h, h0 = res
    dh, dh_T = cts
    return _backward(a, h, h0, dh, dh_T)


_op.defvjp(_op_fwd, _op_bwd)


# ----------------------------------------------------------------------------- packed custom_vjp


@functools.cache
def _packed(has_h0: bool):
    """The packed forward and backward launch sequences (one row each; vmapped calls run one
    after another)."""
    forward = functools.partial(_launch_packed_forward, has_h0)
    backward = functools.partial(_launch_packed_backward, has_h0)
    return common.batched_by_map(forward), common.batched_by_map(backward)


@functools.partial(common.custom_vjp, nondiff_argnums=(0,))
def _packed_op(has_h0, a, b, h0, seq_id):
    return _packed(has_h0)[0](a, b, h0, seq_id)


def _packed_op_fwd(has_h0, a, b, h0, seq_id):
    h, h_T = _packed(has_h0)[0](a, b, h0, seq_id)
    return (h, h_T), (a, h, h0, seq_id)


def _packed_op_bwd(has_h0, res, cts):
    a, h, h0, seq_id = res
    dh, dh_T = cts
    da, db, dh0 = _packed(has_h0)[1](a, h, h0, seq_id, dh, dh_T)
    return da, db, common.packed_state_grad(dh0, seq_id, has_h0), None


_packed_op.defvjp(_packed_op_fwd, _packed_op_bwd)
