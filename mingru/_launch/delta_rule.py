"""Triton launcher for the delta rule (op ``"delta_rule"``; kernels in ``mingru_kernels.delta_rule``).

Registers two ``torch.library`` custom ops so ``torch.compile(fullgraph=True)`` traces the
call as opaque nodes:

* ``mingru::delta_rule_fwd(q, k, v, beta, log_gamma?, h0?, tuning, chunk_seq?, chunk_end?,
  cu?)`` →
  ``(o, h_T, states, Wk, Tm)`` — the last three are scratch kept for the backward (float32,
  or the inputs' 16-bit dtype where the plan's ``HALF_STATES``, ``WU_HALF``, ``TM_HALF`` say;
  chunk start states ``(B·H, NC, BK, BV)``, the chunks' ``Wk = T diag(βΓ) K``
  ``(B·H, NC, LP, BK)`` and WY inverses ``T`` ``(B·H, NC, LP, LP)``), marked
  non-differentiable;
* ``mingru::delta_rule_bwd(...)`` → ``(dq, dk, dv, dbeta, dlog_gamma, dh0)`` (an empty
  tensor stands for ``None``), wired in by ``_op.dual_entry``.

``chunk_size`` is the eager twin's speed hint; the kernels use their own chunk of
``LP = launch_config(nh, ...)["LP"]`` micro-steps (a power of two, 32 by default) holding
``LP // nh`` whole tokens, and ignore ``chunk_size`` (validated in ``mingru.scans``) — the
result never depends on either. ``switches.forced("delta_rule", micro_chunk=..., half=...,
few_rows=...)`` picks another chunk length or the plan of another class of inputs (tests
reach every kernel path with it).

Packed sequences (``cu_seqlens``, ``B = 1``): :func:`run` lays the tokens out chunk-aligned
in a padded row (:func:`mingru._eager.delta_rule.packed_layout` with the kernels' chunk of
``C = LP // nh`` tokens; the gaps are identity steps), runs the same custom ops on it with the
int32 tables ``chunk_seq`` / ``chunk_end`` (per chunk: the sequence it starts / ends, or −1)
and ``cu`` (int32 offsets, for the empty sequences) — the state kernels reset each
sequence's first chunk to its ``h0[n]``, store each sequence's final state and, backwards,
cut the state adjoint at every boundary and write ``dh0`` per sequence — and gathers ``o``
back; the scatter and the gather are differentiated by autograd.
"""

from __future__ import annotations

import torch
from torch import Tensor

from mingru._compat import CachedKernels
from mingru._eager.delta_rule import gather_packed, packed_layout, scatter_packed
from mingru._launch._alloc import new_tensor
from mingru._launch._elementwise import sm_count
from mingru._launch._op import dual_entry
from mingru_kernels import delta_rule as delta_rule_kernels
from mingru_kernels.launch import delta_rule as meta
from mingru_kernels.launch import switches

kernels = CachedKernels(delta_rule_kernels)

__all__ = ["prefer_over_eager", "run", "unsupported_reason"]

_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


# --- launcher protocol ---------------------------------------------------------------------


def unsupported_reason(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gamma: Tensor | None = None,
    h0: Tensor | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: Tensor | None = None,
    allow_tf32: bool = False,
) -> str | None:
    """Why the Triton kernels cannot run this (validated) call, or ``None``."""
    for name, t in (("q", q), ("k", k), ("v", v), ("beta", beta), ("log_gamma", log_gamma),
                    ("h0", h0)):
        if t is not None and t.dtype not in _DTYPES:
            return f"{name} has dtype {t.dtype}; the kernels take float32, bfloat16 or float16"
    return meta.unsupported_size(*k.shape, v.shape[-1])


def prefer_over_eager(*args, **kwargs) -> bool:
    """Whether ``auto`` should take the kernels for this call: always, until GPU measurements
    find a shape class where eager wins."""
    return True


def run(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    beta: Tensor,
    log_gamma: Tensor | None = None,
    h0: Tensor | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: Tensor | None = None,
    allow_tf32: bool = False,
) -> tuple[Tensor, Tensor]:
    """The delta rule on the Triton kernels (shapes as in ``mingru._eager.delta_rule``):
    ``(o (B,T,H,d_v), h_T (B,H,d_k,d_v))`` in ``q``'s dtype, differentiable in every tensor
    argument. Inputs may be float32, bfloat16 or float16; gradients come back in each
    input's dtype. Reached through ``mingru.scans._delta_rule`` (which validates the call) and
    ``mingru.dispatch``; e.g. on a CUDA device, or on CPU with ``TRITON_INTERPRET=1``::

        import torch, torch.nn.functional as F
        B, T, nh, H, d = 2, 9, 2, 3, 16
        q = torch.randn(B, T, H, d, device="cuda")
        k = F.normalize(torch.randn(B, T, nh, H, d, device="cuda"), dim=-1)
        v = torch.randn(B, T, nh, H, d, device="cuda")
        beta = 2 * torch.rand(B, T, nh, H, device="cuda")
        o, h_T = run(q, k, v, beta)            # o: (2, 9, 3, 16), h_T: (2, 3, 16, 16)

    With ``cu_seqlens`` (checked int64 offsets ``(N+1,)``, ``B = 1``): ``h0`` and ``h_T`` are
    ``(N, H, d_k, d_v)``, one state per sequence (see the module docstring).
    ``allow_tf32``: float32 inputs may be multiplied in TF32 on the tensor cores (faster,
    about 1e-3 relative error); by default their products keep float32 accuracy (FMAs, or
    3xTF32 split products at 64-wide heads: see ``launch_config``). Half inputs always use
    the tensor cores.
    """
    tuning = _tuning(allow_tf32)
    if cu_seqlens is None:
        o, h_T, *_ = _entry(q, k, v, beta, log_gamma, h0, tuning, None, None, None)
        return o, h_T
    lay = packed_layout(cu_seqlens, q.shape[1], _config(q, k, v, tuning=tuning)["C"])
    q, k, v, beta = (scatter_packed(x, lay) for x in (q, k, v, beta))
    if log_gamma is not None:
        log_gamma = scatter_packed(log_gamma, lay)
    cu = cu_seqlens.to(torch.int32)
    o, h_T, *_ = _entry(q, k, v, beta, log_gamma, h0, tuning, lay.chunk_seq,
                             lay.chunk_end, cu)
    return gather_packed(o, lay), h_T


_TF32 = 10_000
"""Flag of ``allow_tf32`` in the custom ops' ``tuning`` int."""
_TRI_STATE = (("half", 1000), ("few_rows", 100_000))
"""The forced plan classes and their units in ``tuning``: one decimal digit each, 0 = the
inputs' own, 1 = off, 2 = on."""


def _tuning(allow_tf32: bool = False) -> int:
    """The forced plan choices (:mod:`mingru_kernels.launch.switches`) and ``allow_tf32`` as
    the custom ops' int: ``micro_chunk + 10000 * allow_tf32`` plus ``unit * (1 + choice)``
    for each forced choice of ``_TRI_STATE`` (0 = defaults). An int argument keeps the plan
    fixed between the forward and its backward."""
    choices = switches.plan_choices("delta_rule")
    tuning = int(choices.get("micro_chunk", 0)) + _TF32 * bool(allow_tf32)
    for key, unit in _TRI_STATE:
        if choices.get(key) is not None:
            tuning += unit * (1 + bool(choices[key]))
    return tuning


# --- custom ops ----------------------------------------------------------------------------


def _config(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, tuning: int) -> dict:
    # ``tuning`` (a custom-op int, see _tuning): every field has its own decimal digits.
    _, _, nh, _, dk = k.shape
    plan = {"half": q.dtype in (torch.bfloat16, torch.float16),
            "few_rows": _few_rows(q, k.shape[0] * k.shape[3])}
    for key, unit in _TRI_STATE:
        digit = tuning // unit % 10
        if digit:
            plan[key] = digit == 2
    return meta.launch_config(nh, dk, v.shape[-1], micro_chunk=tuning % 1000,
                              tf32=tuning // _TF32 % 10 == 1, **plan)


def _few_rows(q: torch.Tensor, rows: int) -> bool:
    """Whether ``rows = B·H`` state programs are at most the GPU's SMs (never on the host)."""
    return q.device.type == "cuda" and rows <= sm_count(q)


def _tables(chunk_seq: Tensor | None, chunk_end: Tensor | None, cu: Tensor | None, *,
            placeholder: Tensor) -> dict[str, Tensor]:
    """The packed layout's tables as the kernels' ``cseq_ptr``, ``cend_ptr`` and ``cu_ptr``;
    unpacked, ``placeholder`` stands in for all three (never read)."""
    if cu is None:
        return dict(cseq_ptr=placeholder, cend_ptr=placeholder, cu_ptr=placeholder)
    return dict(cseq_ptr=chunk_seq, cend_ptr=chunk_end, cu_ptr=cu)


def _n_seq(cu: Tensor | None, B: int) -> int:
    """States in ``h0`` / ``h_T``: ``N`` packed sequences, else ``B``."""
    return B if cu is None else cu.shape[0] - 1


def _fwd_impl(q, k, v, beta, log_gamma, h0, tuning, chunk_seq=None, chunk_end=None, cu=None):
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    cfg = _config(q, k, v, tuning=tuning)
    dev = q.device
    q, k, v, beta = q.contiguous(), k.contiguous(), v.contiguous(), beta.contiguous()
    has_decay = log_gamma is not None
    has_h0 = h0 is not None
    lg = log_gamma.contiguous() if has_decay else q  # placeholder pointer, never read
    h0c = h0.contiguous() if has_h0 else q
    BH = B * H
    nc = meta.n_chunks(T, cfg)
    shp = meta.scratch_shapes(BH, T, cfg)
    f32 = torch.float32
    states = new_tensor(shp["states"], q.dtype if cfg["HALF_STATES"] else f32, dev)
    wu_dtype = q.dtype if cfg["WU_HALF"] else f32
    wk = new_tensor(shp["Wk"], wu_dtype, dev)
    u = new_tensor(shp["U"], wu_dtype, dev)
    # Without STORE_TM a placeholder the kernels never touch: zeroed, so the op's outputs
    # stay deterministic.
    tm = (new_tensor(shp["Tm"], q.dtype if cfg["TM_HALF"] else f32, dev) if cfg["STORE_TM"]
          else torch.zeros(shp["Tm"], device=dev))
    o = new_tensor((B, T, H, dv), q.dtype, dev)
    h_T = new_tensor((_n_seq(cu, B), H, dk, dv), q.dtype, dev)
    packed = cu is not None
    tables = _tables(chunk_seq, chunk_end, cu, placeholder=q)
    sizes = dict(T=T, H=H, DK=dk, DV=dv, NC=nc)
    kernels.delta_rule_fwd_prep_kernel[meta.grid_chunks(T, BH, cfg)](
        k_ptr=k, v_ptr=v, beta_ptr=beta, lg_ptr=lg, wk_ptr=wk, u_ptr=u, tm_ptr=tm, **sizes,
        **meta.launch_kwargs(cfg, "fwd_prep", HAS_DECAY=has_decay),
    )
    kernels.delta_rule_fwd_state_kernel[meta.grid_state(BH, cfg)](
        q_ptr=q, k_ptr=k, v_ptr=v, beta_ptr=beta, lg_ptr=lg, h0_ptr=h0c, wk_ptr=wk, u_ptr=u,
        tm_ptr=tm, states_ptr=states, o_ptr=o, ht_ptr=h_T, **tables, **sizes,
        NSEQ=_n_seq(cu, B),
        **meta.launch_kwargs(cfg, "fwd_state", HAS_DECAY=has_decay, HAS_H0=has_h0,
                             PACKED=packed),
    )
    if cfg["OUT_PASS"]:
        kernels.delta_rule_fwd_out_kernel[meta.grid_out(T, BH, cfg)](
            q_ptr=q, k_ptr=k, lg_ptr=lg, states_ptr=states, wk_ptr=wk, u_ptr=u, o_ptr=o,
            **sizes, **meta.launch_kwargs(cfg, "fwd_out", HAS_DECAY=has_decay),
        )
    return o, h_T, states, wk, tm


@torch.library.custom_op("mingru::delta_rule_fwd", mutates_args=())
def delta_rule_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_gamma: torch.Tensor | None,
    h0: torch.Tensor | None,
    tuning: int,
    chunk_seq: torch.Tensor | None = None,
    chunk_end: torch.Tensor | None = None,
    cu: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Forward op: ``(o, h_T, states, Wk, Tm)``; ``chunk_seq, chunk_end, cu`` (int32) are
    the packed layout's tables, or all ``None``."""
    return _fwd_impl(q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, tuning=tuning,
                     chunk_seq=chunk_seq, chunk_end=chunk_end, cu=cu)


@delta_rule_fwd.register_fake
def _(q, k, v, beta, log_gamma, h0, tuning, chunk_seq=None, chunk_end=None, cu=None):
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    cfg = _config(q, k, v, tuning=tuning)
    shp = meta.scratch_shapes(B * H, T, cfg)
    f32 = torch.float32
    return (
        q.new_empty((B, T, H, dv)),
        q.new_empty((_n_seq(cu, B), H, dk, dv)),
        q.new_empty(shp["states"], dtype=q.dtype if cfg["HALF_STATES"] else f32),
        q.new_empty(shp["Wk"], dtype=q.dtype if cfg["WU_HALF"] else f32),
        q.new_empty(shp["Tm"], dtype=q.dtype if cfg["TM_HALF"] else f32),
    )


def _grad_buffers(q, k, v, *, beta, log_gamma):
    """``dq, dk, dv, dβ, d log γ`` (an empty ``d log γ`` without decay), unwritten."""
    dev = q.device
    dlg = (new_tensor(log_gamma.shape, log_gamma.dtype, dev) if log_gamma is not None
           else q.new_empty(0))
    return (new_tensor(q.shape, q.dtype, dev), new_tensor(k.shape, k.dtype, dev),
            new_tensor(v.shape, v.dtype, dev), new_tensor(beta.shape, beta.dtype, dev), dlg)


def _bwd_impl(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, tuning, chunk_seq,
              chunk_end, cu):
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    cfg = _config(q, k, v, tuning=tuning)
    dev = q.device
    q, k, v, beta, do = (t.contiguous() for t in (q, k, v, beta, do))
    has_decay = log_gamma is not None
    has_h0 = h0 is not None
    has_dht = dh_T is not None
    lg = log_gamma.contiguous() if has_decay else q
    dht = dh_T.contiguous() if has_dht else q
    BH = B * H
    nc = meta.n_chunks(T, cfg)
    dstates = new_tensor(states.shape, states.dtype, dev)
    dh0 = new_tensor(h0.shape, h0.dtype, dev) if has_h0 else q.new_empty(0)
    packed = cu is not None
    tables = _tables(chunk_seq, chunk_end, cu, placeholder=q)
    sizes = dict(T=T, H=H, DK=dk, DV=dv, NC=nc)
    if cfg["FUSED_BWD"]:
        dq, dk_, dv_, dbeta, dlg = _grad_buffers(q, k, v, beta=beta, log_gamma=log_gamma)
        # Ticket counters and per-chunk flags of the one launch (see delta_rule_bwd_kernel).
        sync = torch.zeros(meta.sync_size(T, BH, cfg), dtype=torch.int32, device=dev)
        kernels.delta_rule_bwd_kernel[meta.grid_fused_bwd(T, BH, cfg)](
            q_ptr=q, k_ptr=k, v_ptr=v, beta_ptr=beta, lg_ptr=lg, dht_ptr=dht, do_ptr=do,
            wk_ptr=wk, tm_ptr=tm, states_ptr=states, dstates_ptr=dstates,
            dh0_ptr=dh0 if has_h0 else q, **tables, dq_ptr=dq, dk_ptr=dk_, dv_ptr=dv_,
            dbeta_ptr=dbeta, dlg_ptr=dlg if has_decay else q, sync_ptr=sync, **sizes,
            NSEQ=_n_seq(cu, B),
            **meta.launch_kwargs(cfg, "bwd", HAS_DECAY=has_decay, HAS_DHT=has_dht,
                                 HAS_H0=has_h0, PACKED=packed),
        )
        return dq, dk_, dv_, dbeta, dlg, dh0
    kernels.delta_rule_bwd_state_kernel[meta.grid_state(BH, cfg)](
        q_ptr=q, k_ptr=k, beta_ptr=beta, lg_ptr=lg, dht_ptr=dht, do_ptr=do, wk_ptr=wk,
        tm_ptr=tm, dstates_ptr=dstates, dh0_ptr=dh0 if has_h0 else q, **tables, **sizes,
        NSEQ=_n_seq(cu, B),
        **meta.launch_kwargs(cfg, "bwd_state", HAS_DECAY=has_decay, HAS_DHT=has_dht,
                             HAS_H0=has_h0, PACKED=packed),
    )
    dq, dk_, dv_, dbeta, dlg = _grad_buffers(q, k, v, beta=beta, log_gamma=log_gamma)
    kernels.delta_rule_bwd_grads_kernel[meta.grid_chunks(T, BH, cfg)](
        q_ptr=q, k_ptr=k, v_ptr=v, beta_ptr=beta, lg_ptr=lg, states_ptr=states,
        dstates_ptr=dstates, tm_ptr=tm, do_ptr=do, dq_ptr=dq, dk_ptr=dk_, dv_ptr=dv_,
        dbeta_ptr=dbeta, dlg_ptr=dlg if has_decay else q, **sizes,
        **meta.launch_kwargs(cfg, "bwd_grads", HAS_DECAY=has_decay),
    )
    return dq, dk_, dv_, dbeta, dlg, dh0


@torch.library.custom_op("mingru::delta_rule_bwd", mutates_args=())
def delta_rule_bwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_gamma: torch.Tensor | None,
    h0: torch.Tensor | None,
    states: torch.Tensor,
    wk: torch.Tensor,
    tm: torch.Tensor,
    do: torch.Tensor,
    dh_T: torch.Tensor | None,
    tuning: int,
    chunk_seq: torch.Tensor | None,
    chunk_end: torch.Tensor | None,
    cu: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Backward op: ``(dq, dk, dv, dbeta, dlog_gamma, dh0)``; empty tensors stand for ``None``."""
    return _bwd_impl(q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, states=states, wk=wk, tm=tm,
                     do=do, dh_T=dh_T, tuning=tuning, chunk_seq=chunk_seq, chunk_end=chunk_end,
                     cu=cu)


@delta_rule_bwd.register_fake
def _(q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, tuning, chunk_seq, chunk_end, cu):
    return (
        torch.empty_like(q, memory_format=torch.contiguous_format),
        torch.empty_like(k, memory_format=torch.contiguous_format),
        torch.empty_like(v, memory_format=torch.contiguous_format),
        torch.empty_like(beta, memory_format=torch.contiguous_format),
        torch.empty_like(log_gamma, memory_format=torch.contiguous_format)
        if log_gamma is not None else q.new_empty(0),
        torch.empty_like(h0, memory_format=torch.contiguous_format)
        if h0 is not None else q.new_empty(0),
    )


def _setup_context(ctx, inputs, output):
    q, k, v, beta, log_gamma, h0, tuning, *tables = inputs
    chunk_seq, chunk_end, cu = (*tables, None, None, None)[:3]  # absent: not packed
    _, _, states, wk, tm = output
    ctx.mark_non_differentiable(states, wk, tm)
    ctx.set_materialize_grads(value=False)  # the formula handles absent gradients itself
    ctx.has_decay = log_gamma is not None
    ctx.has_h0 = h0 is not None
    ctx.tuning = tuning
    ctx.n_inputs = len(inputs)
    ctx.save_for_backward(q, k, v, beta, log_gamma, h0, states, wk, tm, chunk_seq, chunk_end,
                          cu)


def _backward(ctx, do, dh_T, _d_states, _d_wk, _d_tm, bwd=delta_rule_bwd):
    q, k, v, beta, log_gamma, h0, states, wk, tm, chunk_seq, chunk_end, cu = ctx.saved_tensors
    if do is None:
        B, T, _, H, _ = k.shape
        do = q.new_zeros((B, T, H, v.shape[-1]))
    dq, dk, dv, dbeta, dlg, dh0 = bwd(
        q, k, v, beta, log_gamma, h0, states, wk, tm, do, dh_T, ctx.tuning, chunk_seq,
        chunk_end, cu
    )
    return (
        dq, dk, dv, dbeta,
        dlg if ctx.has_decay else None,
        dh0 if ctx.has_h0 else None,
        *([None] * (ctx.n_inputs - 6)),
    )


_entry = dual_entry("delta_rule", delta_rule_fwd, _fwd_impl, setup_context=_setup_context,
                    formula=_backward, bwd_impl=_bwd_impl)
