"""jax-triton launcher for the delta rule (dispatch op ``delta_rule``; kernels in
:mod:`mingru_kernels.delta_rule`, the same ones the PyTorch launcher runs).

A ``jax.custom_vjp`` over the chunked-WY kernels: the forward runs ``fwd_prep`` (per chunk),
``fwd_state`` (serial over chunks, writes the output too, or leaves it to ``fwd_out``) and
keeps the chunk start states, the chunks' ``Wk`` and WY inverses as residuals; the backward
runs ``bwd_state`` and ``bwd_grads``, or both in one launch (``bwd``). See
:mod:`mingru_jax._launch._common` for the two routes of each launch (jax-triton on a GPU,
Triton's interpreter on the host).

Packed sequences (``cu_seqlens``, ``B = 1``): as in the PyTorch launcher, :func:`run` lays the
tokens out chunk-aligned in a padded row (:func:`mingru_jax._eager.delta_rule.packed_layout`
with the kernels' chunk of ``C = LP // nh`` tokens), runs the same kernels with ``PACKED`` on
and the int32 tables ``chunk_seq`` / ``chunk_end`` (per chunk: the sequence it starts / ends,
or −1) and ``cu`` (a separate ``custom_vjp``: the state kernels reset each sequence's first
chunk to its ``h0[n]``, write every sequence's final state and, backwards, cut the adjoint at
each boundary and write ``dh0`` per sequence, empty sequences included), and gathers ``o``
back; JAX differentiates the scatter and the gather.

Under ``auto`` on a GPU the op runs on these kernels (``prefer_over_eager``).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import triton
import triton.language as tl

from mingru_jax._eager.delta_rule import gather_packed, packed_layout, scatter_packed
from mingru_jax._launch import _common as common
from mingru_kernels import delta_rule as kernels
from mingru_kernels.launch import delta_rule as meta
from mingru_kernels.launch import switches

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

_HALF = (jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def unsupported_reason(q, k, v, beta, log_gamma=None, h0=None, chunk_size=64, *,
                       cu_seqlens=None, allow_tf32=False) -> str | None:
    """Why the kernels cannot run this (validated) call, or ``None``."""
    for name, x in (("q", q), ("k", k), ("v", v), ("beta", beta), ("log_gamma", log_gamma),
                    ("h0", h0)):
        if x is not None and (why := common.unsupported_dtype_or_device(x)) is not None:
            return f"{name}: {why}"
    return meta.unsupported_size(*k.shape, v.shape[-1])


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should take the kernels: always (faster than JAX's eager chunked form
    at every shape, direction and dtype timed)."""
    return True


def run(q, k, v, beta, log_gamma=None, h0=None, chunk_size: int = 64, *, cu_seqlens=None,
        allow_tf32: bool = False):
    """``(o (B, T, H, d_v), h_T (B, H, d_k, d_v))`` on the Triton kernels, in ``q``'s dtype;
    jit/grad/vmap-compatible. ``chunk_size`` (the eager twin's hint, validated in
    :mod:`mingru_jax.scans`) is ignored: the kernels use their own chunk. With
    ``cu_seqlens`` (checked int32 offsets ``(N+1,)``, ``B = 1``) ``h0`` and ``h_T`` are
    ``(N, H, d_k, d_v)``, one state per sequence (see the module docstring).
    ``allow_tf32``: TF32 products for float32 inputs (exact float32 by default)."""
    op, packed_op = _ops(bool(allow_tf32))
    if cu_seqlens is None:
        return op(q, k, v, beta, log_gamma, h0)
    lay = packed_layout(cu_seqlens, q.shape[1], _config(q, k, v)["C"])
    q, k, v, beta = (scatter_packed(x, lay) for x in (q, k, v, beta))
    if log_gamma is not None:
        log_gamma = scatter_packed(log_gamma, lay)
    cu = jnp.asarray(cu_seqlens).astype(jnp.int32)
    o, h_T = packed_op(q, k, v, beta, log_gamma, h0, lay.chunk_seq, lay.chunk_end, cu)
    return gather_packed(o, lay), h_T


# ----------------------------------------------------------------------------- adapters
# jax-triton passes inputs, then runtime scalars, then outputs; these reorder parameters into
# the kernels' own order and call them unchanged (inlined by Triton).


@triton.jit
def _fwd_prep(k, v, beta, lg, T, H, DK, DV, NC, wk, u, tm,
              NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
              BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
              SUB: tl.constexpr, HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
              WU_IN_STATE: tl.constexpr, STORE_TM: tl.constexpr):
    kernels.delta_rule_fwd_prep_kernel(k, v, beta, lg, wk, u, tm, T, H, DK, DV, NC,
                                       NH, C, LP, CP, BK, BV, KS, VS, SUB, HAS_DECAY, PREC,
                                       WU_IN_STATE, STORE_TM)


@triton.jit
def _fwd_state(q, k, v, beta, lg, h0, wk, u, tm, cseq, cend, cu, T, H, DK, DV, NC, NSEQ,
               states, o, ht,
               NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
               BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
               HAS_DECAY: tl.constexpr, HAS_H0: tl.constexpr, PACKED: tl.constexpr,
               PREC: tl.constexpr, REG_STATE: tl.constexpr, WU_IN_STATE: tl.constexpr,
               OUT_PASS: tl.constexpr, STATE_HALF_OPS: tl.constexpr):
    kernels.delta_rule_fwd_state_kernel(q, k, v, beta, lg, h0, wk, u, tm, states, o, ht,
                                        cseq, cend, cu, T, H, DK, DV, NC, NSEQ, NH, C, LP, CP,
                                        BK, BV, KS, VS, HAS_DECAY, HAS_H0, PACKED, PREC,
                                        REG_STATE, WU_IN_STATE, OUT_PASS, STATE_HALF_OPS)


@triton.jit
def _fwd_out(q, k, lg, states, wk, u, T, H, DK, DV, NC, o,
             NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
             BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
             HAS_DECAY: tl.constexpr, PREC: tl.constexpr):
    kernels.delta_rule_fwd_out_kernel(q, k, lg, states, wk, u, o, T, H, DK, DV, NC, NH, C, LP,
                                      CP, BK, BV, KS, VS, HAS_DECAY, PREC)


@triton.jit
def _bwd_state(q, k, beta, lg, dht, do, wk, tm, cseq, cend, cu, T, H, DK, DV, NC, NSEQ,
               dstates, dh0,
               NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
               BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
               HAS_DECAY: tl.constexpr, HAS_DHT: tl.constexpr, HAS_H0: tl.constexpr,
               PACKED: tl.constexpr, PREC: tl.constexpr, REG_STATE: tl.constexpr,
               WU_IN_STATE: tl.constexpr, STATE_HALF_OPS: tl.constexpr):
    kernels.delta_rule_bwd_state_kernel(q, k, beta, lg, dht, do, wk, tm, dstates, dh0, cseq,
                                        cend, cu, T, H, DK, DV, NC, NSEQ, NH, C, LP, CP, BK, BV,
                                        KS, VS, HAS_DECAY, HAS_DHT, HAS_H0, PACKED, PREC,
                                        REG_STATE, WU_IN_STATE, STATE_HALF_OPS)


@triton.jit
def _bwd_grads(q, k, v, beta, lg, states, dstates, tm, do, T, H, DK, DV, NC,
               dq, dk, dv, dbeta, dlg,
               NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
               BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
               SUB: tl.constexpr, HAS_DECAY: tl.constexpr, PREC: tl.constexpr,
               SAVED_TM: tl.constexpr, HALF_OPS: tl.constexpr):
    kernels.delta_rule_bwd_grads_kernel(q, k, v, beta, lg, states, dstates, tm, do,
                                        dq, dk, dv, dbeta, dlg, T, H, DK, DV, NC,
                                        NH, C, LP, CP, BK, BV, KS, VS, SUB, HAS_DECAY, PREC,
                                        SAVED_TM, HALF_OPS)


@triton.jit
def _bwd(q, k, v, beta, lg, dht, do, wk, tm, states, cseq, cend, cu, T, H, DK, DV, NC, NSEQ,
         dstates, dh0, dq, dk, dv, dbeta, dlg, sync,
         NH: tl.constexpr, C: tl.constexpr, LP: tl.constexpr, CP: tl.constexpr,
         BK: tl.constexpr, BV: tl.constexpr, KS: tl.constexpr, VS: tl.constexpr,
         SUB: tl.constexpr, HAS_DECAY: tl.constexpr, HAS_DHT: tl.constexpr,
         HAS_H0: tl.constexpr, PACKED: tl.constexpr, PREC: tl.constexpr,
         REG_STATE: tl.constexpr, WU_IN_STATE: tl.constexpr, STATE_HALF_OPS: tl.constexpr,
         SAVED_TM: tl.constexpr, HALF_OPS: tl.constexpr):
    kernels.delta_rule_bwd_kernel(q, k, v, beta, lg, dht, do, wk, tm, states, dstates, dh0,
                                  cseq, cend, cu, dq, dk, dv, dbeta, dlg, sync, T, H, DK, DV,
                                  NC, NSEQ, NH, C, LP, CP, BK, BV, KS, VS, SUB, HAS_DECAY,
                                  HAS_DHT, HAS_H0, PACKED, PREC, REG_STATE, WU_IN_STATE,
                                  STATE_HALF_OPS, SAVED_TM, HALF_OPS)


# ----------------------------------------------------------------------------- launch sequences


def _config(q, k, v, tf32: bool = False) -> dict:
    B, _, nh, H, dk = k.shape
    plan = {"half": jnp.dtype(q.dtype) in _HALF,
            "few_rows": common.on_gpu() and B * H <= common.sm_count(),
            **switches.plan_choices("delta_rule")}
    return meta.launch_config(nh, dk, v.shape[-1], tf32=tf32, **plan)


def _tables(q, tables):
    """``(packed, (chunk_seq, chunk_end, cu), N or B states)``; placeholders when unpacked."""
    if tables is None:
        return False, (q, q, q), q.shape[0]
    return True, tuple(tables), tables[2].shape[0] - 1


def _launch_forward(q, k, v, beta, log_gamma, h0, tables=None, tf32=False):
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    cfg = _config(q, k, v, tf32=tf32)
    BH, nc = B * H, meta.n_chunks(T, cfg)
    shp = meta.scratch_shapes(BH, T, cfg)
    has_decay = log_gamma is not None
    lg = q if log_gamma is None else log_gamma  # placeholders, never read
    h0_in = q if h0 is None else h0
    wk, u, tm = common.launch(
        _fwd_prep, meta.grid_chunks(T, BH, cfg), (k, v, beta, lg),
        outputs=(*(jax.ShapeDtypeStruct(shp[name],
                                        q.dtype) if cfg["WU_HALF"] else common.f32(shp[name])
           for name in ("Wk", "U")),
         jax.ShapeDtypeStruct(shp["Tm"], q.dtype) if cfg["TM_HALF"] else common.f32(shp["Tm"])),
        scalars=(T, H, dk, dv, nc),
        **meta.launch_kwargs(cfg, "fwd_prep", HAS_DECAY=has_decay),
    )
    packed, tabs, n_states = _tables(q, tables)
    state_dtype = q.dtype if cfg["HALF_STATES"] else jnp.float32
    walk_out = (jax.ShapeDtypeStruct(shp["states"], state_dtype),
                jax.ShapeDtypeStruct((B, T, H, dv), q.dtype),
                jax.ShapeDtypeStruct((n_states, H, dk, dv), q.dtype))
    states, o, h_T = common.launch(
        _fwd_state, meta.grid_state(BH, cfg), (q, k, v, beta, lg, h0_in, wk, u, tm, *tabs),
        outputs=walk_out, scalars=(T, H, dk, dv, nc, n_states),
        **meta.launch_kwargs(cfg, "fwd_state", HAS_DECAY=has_decay, HAS_H0=h0 is not None,
                             PACKED=packed),
    )
    if cfg["OUT_PASS"]:
        (o,) = common.launch(
            _fwd_out, meta.grid_out(T, BH, cfg), (q, k, lg, states, wk, u),
            outputs=(jax.ShapeDtypeStruct((B, T, H, dv), q.dtype),), scalars=(T, H, dk, dv, nc),
            **meta.launch_kwargs(cfg, "fwd_out", HAS_DECAY=has_decay),
        )
    return o, h_T, states, wk, tm


def _launch_backward(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, tables=None,
                     tf32=False):
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    cfg = _config(q, k, v, tf32=tf32)
    BH, nc = B * H, meta.n_chunks(T, cfg)
    dummy = common.f32((1,))
    packed, tabs, n_states = _tables(q, tables)
    has_decay = log_gamma is not None
    lg = q if log_gamma is None else log_gamma
    grads_out = (common.like(q), common.like(k), common.like(v), common.like(beta),
                 dummy if log_gamma is None else common.like(log_gamma))
    if cfg["FUSED_BWD"]:
        # One launch (see delta_rule_bwd_kernel); its int32 sync words are zeroed first.
        _, dh0, dq, dk_, dv_, dbeta, dlg, _ = common.launch(
            _bwd, meta.grid_fused_bwd(T, BH, cfg),
            (q, k, v, beta, lg, q if dh_T is None else dh_T, do, wk, tm, states, *tabs),
            outputs=(common.like(states), dummy if h0 is None else common.like(h0), *grads_out,
             common.i32((meta.sync_size(T, BH, cfg),))),
            scalars=(T, H, dk, dv, nc, n_states), zeroed=(7,),
            **meta.launch_kwargs(cfg, "bwd", HAS_DECAY=has_decay, HAS_DHT=dh_T is not None,
                                 HAS_H0=h0 is not None, PACKED=packed),
        )
        return dq, dk_, dv_, dbeta, dlg, dh0
    dstates, dh0 = common.launch(
        _bwd_state, meta.grid_state(BH, cfg),
        (q, k, beta, lg, q if dh_T is None else dh_T, do, wk, tm, *tabs),
        outputs=(common.like(states), dummy if h0 is None else common.like(h0)),
        scalars=(T, H, dk, dv, nc, n_states),
        **meta.launch_kwargs(cfg, "bwd_state", HAS_DECAY=has_decay, HAS_DHT=dh_T is not None,
                             HAS_H0=h0 is not None, PACKED=packed),
    )
    dq, dk_, dv_, dbeta, dlg = common.launch(
        _bwd_grads, meta.grid_chunks(T, BH, cfg),
        (q, k, v, beta, lg, states, dstates, tm, do), outputs=grads_out, scalars=(T, H, dk, dv, nc),
        **meta.launch_kwargs(cfg, "bwd_grads", HAS_DECAY=has_decay),
    )
    return dq, dk_, dv_, dbeta, dlg, dh0


# ----------------------------------------------------------------------------- custom_vjp
# One pair of differentiable ops per ``allow_tf32`` setting (a static choice: it picks the
# kernels' compile-time precision), built on first use.


def _grads_of_present(log_gamma, h0, dq, dk, dv, dbeta, dlg, dh0):
    """Only present inputs get a gradient; the batch rule needs a leading B on every output."""
    return tuple(g for g in (dq, dk, dv, dbeta, None if log_gamma is None else dlg,
                             None if h0 is None else dh0) if g is not None)


def _unpack_grads(grads, log_gamma, h0):
    grads = iter(grads)
    dq, dk, dv, dbeta = (next(grads) for _ in range(4))
    dlg = None if log_gamma is None else next(grads)
    dh0 = None if h0 is None else next(grads)
    return dq, dk, dv, dbeta, dlg, dh0


def _make_op(tf32: bool):
    forward = common.batched(functools.partial(_launch_forward, tables=None, tf32=tf32))

    @common.batched
    def backward(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T):
        return _grads_of_present(log_gamma, h0, *_launch_backward(
            q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, states=states, wk=wk, tm=tm, do=do,
            dh_T=dh_T, tables=None, tf32=tf32))

    @common.custom_vjp
    def op(q, k, v, beta, log_gamma, h0):
        o, h_T, *_ = forward(q, k, v, beta, log_gamma, h0)
        return o, h_T

    def op_fwd(q, k, v, beta, log_gamma, h0):
        o, h_T, states, wk, tm = forward(q, k, v, beta, log_gamma, h0)
        return (o, h_T), (q, k, v, beta, log_gamma, h0, states, wk, tm)

    def op_bwd(res, cts):
        q, k, v, beta, log_gamma, h0, states, wk, tm = res
        do, dh_T = cts
        return _unpack_grads(backward(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T),
                             log_gamma, h0)

    op.defvjp(op_fwd, op_bwd)
    return op


# One padded row (B = 1) with the layout's tables, which have no batch axis: a vmapped call
# runs its rows one after another (common.batched_by_map).


def _make_packed_op(tf32: bool):
    @common.batched_by_map
    def forward(q, k, v, beta, log_gamma, h0, chunk_seq, chunk_end, cu):
        return _launch_forward(q, k, v, beta=beta, log_gamma=log_gamma, h0=h0,
                               tables=(chunk_seq, chunk_end, cu), tf32=tf32)

    @common.batched_by_map
    def backward(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, chunk_seq,
                 chunk_end, cu):
        return _grads_of_present(log_gamma, h0, *_launch_backward(
            q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, states=states, wk=wk, tm=tm, do=do,
            dh_T=dh_T, tables=(chunk_seq, chunk_end, cu), tf32=tf32))

    @common.custom_vjp
    def op(q, k, v, beta, log_gamma, h0, chunk_seq, chunk_end, cu):
        o, h_T, *_ = forward(q, k, v, beta, log_gamma, h0, chunk_seq, chunk_end, cu)
        return o, h_T

    def op_fwd(q, k, v, beta, log_gamma, h0, chunk_seq, chunk_end, cu):
        o, h_T, states, wk, tm = forward(q, k, v, beta, log_gamma, h0, chunk_seq, chunk_end, cu)
        return (o, h_T), (q, k, v, beta, log_gamma, h0, states, wk, tm, chunk_seq, chunk_end, cu)

    def op_bwd(res, cts):
        q, k, v, beta, log_gamma, h0, states, wk, tm, chunk_seq, chunk_end, cu = res
        do, dh_T = cts
        grads = backward(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, chunk_seq,
                         chunk_end, cu)
        return (*_unpack_grads(grads, log_gamma, h0), None, None, None)

    op.defvjp(op_fwd, op_bwd)
    return op


@functools.cache
def _ops(tf32: bool):
    """``(op, packed_op)`` for one ``allow_tf32`` setting."""
    return _make_op(tf32), _make_packed_op(tf32)
