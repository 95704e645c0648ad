"""Launch metadata of the delta-rule kernels (:mod:`mingru_kernels.delta_rule`): tile sizes,
the per-kernel constexprs and launch settings, chunk counts, scratch shapes and grids.

Pure Python (no triton, torch or jax import), shared by the PyTorch launcher
(``mingru._launch.delta_rule``) and the JAX launcher (``mingru_jax._launch.delta_rule``).
Nothing here depends on ``T`` except the runtime chunk count and grid sizes. The shape rules
of the op's arguments are :func:`mingru_kernels._spec.check_delta_rule_shapes`.
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

PLAN_KEYS = ("micro_chunk", "blocked", "reg_state", "wu_in_state", "state_vs", "out_pass",
             "wu_half", "saved_tm", "split_fp32", "half_ops", "state_half_ops", "bwd_prep",
             "fused_bwd", "fused_fwd")
"""The choices a test or tuning sweep may force (see :mod:`mingru_kernels.launch.switches`):
``micro_chunk``, ``blocked``, ``reg_state``, ``wu_in_state``, ``state_vs``, ``out_pass``,
``wu_half``, ``saved_tm``, ``split_fp32``, ``half_ops``, ``state_half_ops``, ``bwd_prep``,
``fused_bwd`` and ``fused_fwd`` of :func:`launch_config`."""

SUB = 16
"""Rows per diagonal block of the blocked triangular inverse (``tl.dot`` needs ≥ 16)."""

KS = 16
"""Slice of ``d_k`` rows/columns per partial product when contracting over ``d_k`` with
float32 ``"ieee"`` dots (FMA units: whole operand rows and columns live in registers)."""

VS = 16
"""Slice of ``d_v`` columns handled at a time with float32 ``"ieee"`` dots: the value side of
a chunk, and the state columns of one program of the state kernels."""

HALF_SLICE = 64
"""Slice width of the per-chunk kernels with bfloat16/float16 inputs: their products run on
the tensor cores, whose operands are spread over the warps, so a slice can be as wide as a
64-wide head without spilling (and one wide product beats four narrow ones)."""

MAX_NH = 64
"""Largest ``nh`` served (a chunk must hold at least one token's micro-steps)."""

MAX_HEAD_DIM = 128
"""Largest ``d_k`` / ``d_v`` served (register budget of the per-chunk tiles)."""

DEFAULT_MICRO_CHUNK = 32
"""Micro-steps per chunk ``LP`` when not overridden (16, 32 or 64; larger when ``nh`` needs).
Compiled for sm_90, ``LP = 16`` and ``32`` fit the registers with float32 ``"ieee"`` dots
(tens to hundreds of bytes of spill in the backward); ``LP = 64`` spills tens of KB there and
only suits tensor-core precisions. The right choice per shape is a GPU measurement."""

DOT_PRECISION = "ieee"
"""``tl.dot`` precision with float32 inputs: exact float32 products, no TF32."""

SPLIT_DOT_PRECISION = "tf32x3"
"""``tl.dot`` precision of float32 inputs' split products (``split_fp32``): each operand
split into a TF32 high part and a TF32 remainder, three tensor-core products summed in
float32 (the low·low term dropped, ~2⁻²² relative) — float32 accuracy on the tensor cores.
On an H200 (nh = 2, d = 64, B128 T1024) the forward's error against float64 measured 4.2e-7
with them and 5.3e-7 with FMA products (``"ieee"``)."""

SPLIT_HEAD_SIZES = (64,)
"""Padded head widths (``BK``, ``BV``) where float32 inputs take the split products by
default: where they were measured faster (H200, nh = 2, d = 64, B128 T1024, GPU-busy ms:
fwd_prep 3.41 → 0.96, fwd_state 5.62 → 0.83, bwd_state 4.05 → 0.82). Elsewhere the FMA
products stay the default until measured."""

SPLIT_GRADS_SLICE = 32
"""Slice width of the backward's per-chunk kernel (``bwd_grads``) under ``split_fp32``:
64-wide split products there spill the registers. On an H200 (float32, d = 64, 4 warps,
GPU-busy ms of that kernel) 32-wide split slices took 1.396 against 2.615 for 16-wide FMA
slices at nh = 1, B16 T4096, and 7.13 against 9.92 at nh = 2, B128 T1024 (8 warps); 16-wide
split slices 2.856, 64-wide 3.003 (nh = 1, 8 warps)."""

HALF_DOT_PRECISION = "tf32"
"""``tl.dot`` precision with bfloat16/float16 inputs: the float32 intermediates are still
multiplied more precisely than the inputs are stored (10- vs 7/10-bit mantissas)."""

KERNEL_CONSTEXPRS = {
    "fwd_prep": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "BLOCKED", "PREC",
                 "WU_IN_STATE", "STORE_TM", "HALF_OPS"),
    "fwd_state": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "REG_STATE",
                  "WU_IN_STATE", "OUT_PASS", "STORE_W", "STATE_HALF_OPS"),
    "fwd_out": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "STORE_W", "HALF_OPS"),
    "bwd_prep": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "WU_IN_STATE",
                 "STATE_HALF_OPS"),
    "bwd_state": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "REG_STATE",
                  "WU_IN_STATE", "STATE_HALF_OPS", "PREP_N"),
    "bwd_grads": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "BLOCKED", "PREC",
                  "SAVED_TM", "HALF_OPS"),
    "fwd": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "REG_STATE", "WU_IN_STATE",
            "STORE_W", "STATE_HALF_OPS", "HALF_OPS"),
    "bwd": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "BLOCKED", "PREC",
            "REG_STATE", "WU_IN_STATE", "STATE_HALF_OPS", "PREP_N", "SAVED_TM", "HALF_OPS"),
}
"""The constexpr parameters each kernel takes from :func:`launch_config`."""


def unsupported_size(B: int, T: int, nh: int, H: int, dk: int, dv: int) -> str | None:
    """Why the kernels cannot serve these sizes (the frontends' ``unsupported_reason``
    adds dtype and device), or ``None``."""
    if min(B, T, H) == 0:
        return "empty input (B, T or H is 0)"
    if nh > MAX_NH:
        return f"nh = {nh} > {MAX_NH} micro-steps per token"
    if max(dk, dv) > MAX_HEAD_DIM:
        return f"d_k = {dk}, d_v = {dv}: head sizes above {MAX_HEAD_DIM} are not served"
    if B * H > 65535:
        return f"B·H = {B * H} > 65535 (grid limit of the per-chunk kernels)"
    return None


def block_size(n: int) -> int:
    """Padded tile width for a head dimension: a power of two, at least 16."""
    return max(16, next_pow2(n))


def launch_config(nh: int, dk: int, dv: int, half: bool = False, micro_chunk: int = 0,
                  blocked: bool | None = None, tf32: bool = False,
                  reg_state: bool | None = None, wu_in_state: bool | None = None,
                  state_vs: int = 0, out_pass: bool | None = None,
                  wu_half: bool | None = None, saved_tm: bool | None = None,
                  split_fp32: bool | None = None, few_rows: bool = False,
                  half_ops: bool | None = None, state_half_ops: bool | None = None,
                  bwd_prep: bool | None = None, fused_bwd: bool | None = None,
                  fused_fwd: bool | None = None) -> dict:
    """Compile-time parameters of every kernel of this op (nothing depends on ``T``).

    ``half``: the inputs are bfloat16/float16 (picks ``HALF_DOT_PRECISION``). ``tf32``: the
    caller allows TF32 products for float32 inputs (the tensor-core precision and tiling of
    half inputs; without it float32 products are exact, ``DOT_PRECISION``).
    ``micro_chunk`` (``LP``, micro-steps per chunk; 0 = default) must be 16, 32 or 64 and at
    least ``nh``; a chunk holds ``C = LP // nh`` whole tokens. ``blocked`` picks the blocked
    triangular inverse by matrix products (the default) over row-by-row substitution.
    ``reg_state`` feeds the state kernels' product from registers (``REG_STATE``; only where
    one slice covers the head, ``KS == BK``, and then the default). ``wu_in_state``: the state
    kernels form each chunk's ``Wk`` and ``U`` from its saved WY inverse instead of reading
    them, so neither is stored (``WU_IN_STATE``; needs ``REG_STATE``; the default with half
    inputs and ``REG_STATE``). ``state_vs`` forces ``STATE_VS``. ``out_pass``: the forward
    output pass (``fwd_out``, parallel over chunks) forms the output instead of the serial
    kernel (``OUT_PASS``; needs ``REG_STATE``); it reads each chunk's ``W`` stored by the state
    kernel where ``Wk`` and ``U`` are formed there (not stored), else forms ``W = U − Wk S`` again
    (``STORE_W``). Off by default except with ``few_rows`` (below; float32 split products at
    few rows take it too, see the code): on an H200 at bf16 with
    the state kernels pipelined it measured slower at d = 64, nh = 1 (B32 T4096 forward 0.737
    against 0.713 ms unpipelined, 0.673 against 0.612 pipelined), and at nh = 1
    ``wu_in_state=False`` alone is faster there (0.552 against 0.610) but costs two stored
    buffers. ``wu_half``: with half inputs and ``Wk``, ``U`` stored (``wu_in_state`` off), store
    them in the inputs' 16-bit dtype, as fla stores its ``w`` and ``u``: half their memory
    (``WU_HALF``; on by default with ``few_rows``).
    ``saved_tm`` forces ``SAVED_TM`` (below); off, the forward stores no WY inverse unless the
    state kernels need it (``STORE_TM``). ``split_fp32``: float32 inputs without ``tf32``
    run every product on the tensor cores with split products (``SPLIT_DOT_PRECISION``,
    float32-accurate): the forward and the backward's state kernel in the tiling of half
    inputs, the backward's per-chunk kernel in ``SPLIT_GRADS_SLICE``-wide slices (at 64
    columns it spills: 45 ms against 9.9 ms with FMA products on an H200 at nh = 2, d = 64,
    B128 T1024), which inverts again. The default for ``BK = BV`` in ``SPLIT_HEAD_SIZES``.
    ``few_rows``: the launcher's word that ``B·H`` is at most the GPU's SM count (the serial
    state kernels then have at most one program per SM). With half inputs, ``nh ≥ 2`` and
    neither ``wu_in_state`` nor ``out_pass`` forced, the defaults become ``wu_in_state`` off,
    ``out_pass`` and ``wu_half`` on: the output pass forms ``W`` again from the stored 16-bit
    ``Wk`` and ``U`` (no ``W`` buffer), and the backward reads the WY inverse stored in 16 bits
    (``TM_HALF``) instead of inverting again: on an H200 (triton 3.7.1, nh2 with decay,
    d = 64, B32 T4096, GPU-busy ms) bwd_grads 1.721 -> 1.564 for fwd_prep 0.426 -> 0.447,
    fwd+bwd 3.800 -> 3.665 (fla 3.649), forward peak 577 -> 641 MB, the same errors against
    float64 (output 0.0048, gradients 0.0064; fla 0.0064 / 0.0070).
    ``half_ops``: with half inputs, the per-chunk kernels (``fwd_prep``, ``fwd_out``,
    ``bwd_grads``) round both operands of every product outside the WY inverse to the inputs'
    16-bit dtype, as fla does (``HALF_OPS``); off, those products take float32 operands in
    TF32. The serial state kernels and the inverse keep float32 operands either way. Unforced
    (``None``), half inputs take it in the backward's per-chunk kernel only: on an H200
    (triton 3.7.1, d = 64, GPU-busy fwd+bwd ms) nh2 with decay B32 T4096 4.508 -> 4.129,
    B128 T1024 3.783 -> 3.435; nh1 B32 T4096 1.874 -> 1.710, B128 T1024 1.556 -> 1.390, with
    gradient errors against float64 of 0.0039-0.0050 -> 0.0060-0.0069 (fla 0.0063-0.0071).
    In the forward it gained only where the output pass runs (nh2 B32 T4096 1.392 -> 1.298),
    at an output error of 0.0063 against 0.0046 (fla 0.0063), so the forward keeps TF32.
    ``state_half_ops``: the same for the serial state kernels' products (``STATE_HALF_OPS``;
    needs half inputs and ``REG_STATE``), as fla's state kernels take them; the carried state
    stays float32. Unforced, on wherever it can be: on an H200 (triton 3.7.1, nh2 with decay,
    d = 64, B32 T4096, GPU-busy ms) fwd_state 0.526 -> 0.402, bwd_state 0.854 -> 0.717, forward
    1.274 -> 1.151, fwd+bwd 4.021 -> 3.760 (fla 1.225 / 3.646), at the same errors against
    float64 (output 0.0041, gradients 0.0064; fla 0.0057 / 0.0074). A third pipeline stage
    on ``fwd_state`` pays only with float32 operands (0.526 -> 0.465 ms there; with 16-bit
    ones 0.470), so both state kernels keep two.
    ``bwd_prep``: the backward runs ``bwd_prep`` (parallel over chunks) before its state
    kernel, which then steps each chunk as ``Γ_L dS' − B_c dS' + N_c`` from the stored
    ``B_c``, ``N_c`` and ``Γ_L``: one product per chunk on the serial chain instead of five,
    and no decay tables there (``PREP_N``), for a float32 ``(B·H, NC, BK, BV)`` buffer and a
    ``(B·H, NC, BK, BK)`` one. Off unless forced: on an H200 (triton 3.7.1, bf16, d = 64,
    B32 T4096 H4, GPU-busy ms) it took bwd_state from 0.738 to 0.404 at nh2 with decay, but
    the pass itself cost 0.419 (its stores are 805 MB), fwd+bwd 3.797 -> 3.881 (fla 3.656);
    at nh1 bwd_state 0.282 -> 0.203 for a 0.235 pass, 1.459 -> 1.616. Same errors.
    ``fused_bwd``: the backward's state kernel and per-chunk kernel run as one launch
    (``delta_rule_bwd``, ``FUSED_BWD``): each chunk's gradients are formed as soon as the
    serial adjoint has passed it, by programs that fill the SMs the few state programs leave
    idle, instead of after the whole walk. Needs ``REG_STATE``, the state programs' columns
    equal to the per-chunk kernel's (``STATE_VS == VS``) and no ``split_fp32``. Unforced, on
    where the few-rows plan (above) is taken, off elsewhere: on an NVIDIA H100 (triton 3.7.1,
    bf16, nh2 with decay, d = 64, B32 T4096 H4, GPU-busy ms) fwd+bwd 3.777 -> 3.550 (fla
    4.210), the same errors against float64 (compiled for sm_90 it takes 255 registers and
    spills 844 bytes, as ``bwd_grads`` alone does: two programs fit an SM, one beside each
    state program).
    ``fused_fwd``: the same for the forward's state kernel and output pass (needs
    ``out_pass``): each chunk's output is formed as soon as the walk has stored its start
    state (``delta_rule_fwd``, ``FUSED_FWD``). Off unless forced: slower on an NVIDIA H100 at
    the row above (forward 1.241 -> 1.292 ms, fwd+bwd 3.777 -> 3.829; offline for sm_90 at
    bf16, d = 64, nh = 2: 184 registers, no spills; the walk and the output pass alone take
    164 and 178).

    Returns ``NH, C, LP, CP, BK, BV, KS, VS, SUB, BLOCKED, PREC``, per-kernel ``warps`` /
    ``stages``, and:

    * ``REG_STATE``, ``WU_IN_STATE``: as above;
    * ``HALF_STATES``: the chunk start states and their gradients are kept in the inputs'
      16-bit dtype — only with half inputs and ``REG_STATE``, where no state kernel re-reads
      what it stored, so the rounding reaches the backward's products but never the carried
      state;
    * ``STATE_VS``: state columns per program of the two serial kernels — ``VS``, or
      ``state_vs`` when given (16, 32 or 64, at most ``VS``). Narrower is not the default
      even where ``B·H`` gives those kernels few programs: on an H200 at bf16, d = 64,
      B32 T4096 H4 (128 programs, one per SM) 32 columns measured slower than 64, forward
      0.801 against 0.753 ms, fwd+bwd 2.129 against 2.074;
    * ``OUT_PASS``: as above; ``PREP_N``: ``bwd_prep`` above;
    * ``SAVED_TM``: the backward reads the forward's WY inverse (tensor-core precisions)
      rather than inverting again;
    * ``TM_HALF``: that inverse is stored in the inputs' 16-bit dtype — only where its one
      reader is the backward's per-chunk kernel with 16-bit product operands, which rounds it
      to that dtype anyway.
    """
    if not 1 <= nh <= MAX_NH:
        raise ValueError(f"nh must be in [1, {MAX_NH}]; got {nh}")
    lp = micro_chunk or max(DEFAULT_MICRO_CHUNK, next_pow2(nh))
    if lp not in (16, 32, 64) or lp < nh:
        raise ValueError(f"micro_chunk must be 16, 32 or 64 and >= nh ({nh}); got {lp}")
    bk, bv = block_size(dk), block_size(dv)
    if split_fp32 is None:
        split_fp32 = not (half or tf32) and bk == bv and bk in SPLIT_HEAD_SIZES
    elif split_fp32 and (half or tf32):
        raise ValueError("split_fp32 is for float32 inputs without tf32 (half inputs and tf32 "
                         "already use the tensor cores)")
    tensor_cores = half or tf32 or split_fp32
    chunk_warps = 4 if lp * max(bk, bv) < 2048 else 8
    # Tensor-core products: 4 warps let two chunk programs share an SM and overlap their
    # chains of dependent products (H200, d = 64, bf16: fwd_prep 0.99 -> 0.54 ms, fwd+bwd
    # 2.97 -> 2.35 ms with the backward's too, in spite of its spills).
    tc_warps = 4 if tensor_cores else chunk_warps
    state_warps = 4  # 8 for a 64×64 tile measured 3 % slower on an H200 (d = 64, bf16)
    ks = min(HALF_SLICE if tensor_cores else KS, bk)
    if reg_state is None:
        # H200, bf16, d = 64, B128 T1024: 1.846 ms fwd+bwd from registers, 1.862 reloaded.
        reg_state = ks == bk
    # Not with a forced micro-chunk of 64: its backward crashed with an illegal memory access
    # on an NVIDIA H100 (bf16, nh2 with decay, d = 16, B32 T4096; the twenty-first round of
    # docs/results/gpu-h200.md), while the plain plan at that micro-chunk ran. Not found yet.
    few_rows_plan = bool(few_rows and half and nh >= 2 and reg_state and wu_in_state is None
                         and out_pass is None and lp <= 32)
    if few_rows_plan:
        # At most one state program per SM: the serial chain is the time, so take the output
        # and the forming of Wk, U off it. H200, nh = 2 with decay, B32 T4096 H4, GPU-busy ms
        # fwd / fwd+bwd, forward peak: d = 64 1.266 / 4.160, 577 MB against 1.418 / 4.426,
        # 449 MB (fla: forward 1.277, 677 MB); d = 16 0.876 / 2.828, 96 MB against
        # 1.120 / 2.924, 160 MB (fla 1.102). Error against float64 0.0049 / 0.0044
        # against 0.0036 / 0.0034 (fla 0.0072 / 0.0064).
        wu_in_state, out_pass = False, True
        wu_half = True if wu_half is None else wu_half
    if out_pass is None and few_rows and split_fp32 and reg_state:
        # float32 split products at most one state program per SM: the output off the serial
        # chain as well. NVIDIA H100, triton 3.7.1, nh = 1, d = 64, B16 T4096 H4 (DeltaMinGRU
        # at d256), GPU-busy ms: forward 1.157 -> 0.876, fwd+bwd 3.435 -> 3.172, the same
        # error against float64 (4.5e-7) and forward peak (321 MB).
        out_pass = True
    out_pass, wu_half = bool(out_pass), bool(wu_half)
    if wu_in_state is None:
        # H200, bf16, d = 64, B128 T1024: forward 0.519 against 0.552 ms with Wk, U stored,
        # fwd+bwd 1.651 against 1.685 (B32 T4096: 0.806 / 2.163 against 0.801 / 2.129), and
        # neither (B·H, NC, LP, d) float32 buffer is allocated. Measured with half inputs only.
        wu_in_state = bool(reg_state) and half
    if wu_in_state and not reg_state:
        raise ValueError("wu_in_state needs reg_state (one slice per head: KS = BK)")
    if reg_state and ks != bk:
        raise ValueError(f"reg_state needs one slice per head (KS = {ks} < BK = {bk}: exact "
                         "float32 products of a head wider than 16)")
    vs = min(HALF_SLICE if tensor_cores else VS, bv)
    if state_vs:
        if state_vs not in (16, 32, 64) or state_vs > vs:
            raise ValueError(f"state_vs must be 16, 32 or 64 and at most VS = {vs}; got {state_vs}")
    else:
        state_vs = vs
    if half_ops and not half:
        raise ValueError("half_ops needs bfloat16/float16 inputs")
    # Per-kernel constexprs over the shared ones, for the backward's per-chunk kernel:
    # split_fp32's slices, and its 16-bit operands (by default with half inputs).
    grads = ({"KS": min(SPLIT_GRADS_SLICE, bk), "VS": min(SPLIT_GRADS_SLICE, bv)}
             if split_fp32 else {})
    grads_half_ops = bool(half if half_ops is None else half_ops)
    if grads_half_ops:
        grads["HALF_OPS"] = True
    half_ops = bool(half_ops)
    if state_half_ops is None:
        state_half_ops = half and bool(reg_state)
    if state_half_ops and not (half and reg_state):
        raise ValueError("state_half_ops needs bfloat16/float16 inputs and reg_state (one "
                         "slice per head)")
    bwd_prep = bool(bwd_prep)
    fusable = bool(reg_state) and state_vs == vs and not split_fp32
    if fused_bwd is None:
        # In the few-rows plan the serial adjoint walk leaves most SMs idle: the per-chunk
        # gradients fill them as the walk passes each chunk. NVIDIA H100, triton 3.7.1, bf16,
        # nh2 with decay, d = 64, B32 T4096 H4, GPU-busy fwd+bwd ms: 3.777 -> 3.550 (fla
        # 4.210), the same errors against float64.
        fused_bwd = few_rows_plan and fusable
    fused_bwd = bool(fused_bwd)
    if fused_bwd and not fusable:
        raise ValueError("fused_bwd needs reg_state, state_vs equal to VS and no split_fp32")
    if out_pass and not reg_state:
        raise ValueError("out_pass needs reg_state (one slice per head: KS = BK)")
    fused_fwd = bool(fused_fwd)
    if fused_fwd and not out_pass:
        raise ValueError("fused_fwd needs out_pass (the output pass it runs beside the walk)")
    if wu_half and not (half and not wu_in_state):
        raise ValueError("wu_half needs bfloat16/float16 inputs with Wk and U stored "
                         "(wu_in_state off)")
    # The forward stores T unless told the backward will not read it (saved_tm=False, or
    # split_fp32's re-inverting backward) and the state kernels do not form Wk, U from it.
    store_tm = (saved_tm is True or (saved_tm is None and not split_fp32) or bool(wu_in_state))
    return {
        "NH": nh,
        "C": lp // nh,
        "LP": lp,
        "CP": max(16, next_pow2(lp // nh)),
        "BK": bk,
        "BV": bv,
        "KS": ks,
        # Also a state program's columns: tensor-core products hold a 64-wide state slice,
        # FMA products spill past 16.
        "VS": vs,
        "STATE_VS": state_vs,
        "SUB": SUB,
        "BLOCKED": True if blocked is None else bool(blocked),
        "PREC": (SPLIT_DOT_PRECISION if split_fp32 else
                 HALF_DOT_PRECISION if tensor_cores else DOT_PRECISION),
        # The state kernels' product from registers instead of a store, barrier and reload
        # (possible when one slice is the whole head).
        "REG_STATE": bool(reg_state),
        "HALF_STATES": bool(half and reg_state),
        "WU_IN_STATE": bool(wu_in_state),
        "OUT_PASS": bool(out_pass),
        # The output pass reads W stored by the state kernel only where Wk and U are not
        # stored; otherwise it forms W = U − Wk S again (one product instead of a buffer).
        "STORE_W": bool(out_pass and wu_in_state),
        # Wk and U stored in the inputs' 16-bit dtype (read back into float32).
        "WU_HALF": bool(wu_half),
        # Products of the per-chunk kernels on 16-bit operands (see half_ops above).
        "HALF_OPS": half_ops,
        "STATE_HALF_OPS": bool(state_half_ops),
        # The backward's state-independent chunk terms from a parallel pass (see bwd_prep).
        "PREP_N": bool(bwd_prep),
        # The backward's two kernels in one launch (see fused_bwd).
        "FUSED_BWD": bool(fused_bwd),
        # The forward's walk and output pass in one launch (see fused_fwd).
        "FUSED_FWD": fused_fwd,
        # The backward reads the forward's WY inverse on the tensor cores (H200, bf16, d = 64,
        # B128 T1024: bwd_grads 0.749 -> 0.631 ms). With exact float32 products it inverts
        # again: compiled for sm_90, the loaded T triples that kernel's spills (584 -> 1564
        # bytes at d = 64). Under split_fp32 (32-wide split slices, 8 warps) reading it measured
        # 2.360 against 2.118 ms at nh = 1, B16 T4096 and 6.893 against 7.130 at nh = 2,
        # B128 T1024: no clear win, and it costs the stored T.
        "SAVED_TM": bool((half or tf32) if saved_tm is None else saved_tm),
        "STORE_TM": store_tm,
        # The stored WY inverse in the inputs' 16-bit dtype where its one reader, the
        # backward's per-chunk kernel, rounds it to that dtype anyway (16-bit product
        # operands there; the state kernels read it only with WU_IN_STATE): half its bytes,
        # the same gradients.
        "TM_HALF": bool(store_tm and half and grads_half_ops and not wu_in_state),
        "overrides": {"bwd_grads": grads} if grads else {},
        "warps": {"fwd_prep": tc_warps, "fwd_state": state_warps, "fwd_out": tc_warps,
                  "bwd_prep": tc_warps, "bwd_state": state_warps, "bwd_grads": tc_warps,
                  "bwd": tc_warps, "fwd": tc_warps, **_half_warps(half, max(bk, bv))},
        # Reloading state kernels re-read what they just stored: no software pipelining there.
        # From registers they prefetch the next chunk's tiles (H200, bf16, d = 64: B32 T4096
        # forward 0.713 -> 0.612 ms, fwd+bwd 2.054 -> 1.845; B128 T1024 0.508 -> 0.455 and
        # 1.642 -> 1.542; nh2 with decay B32 T4096 1.709 -> 1.418 forward).
        "stages": {"fwd_prep": 2, "fwd_state": 2 if reg_state else 1, "fwd_out": 2,
                   "bwd_prep": 2, "bwd_state": 2 if reg_state else 1, "bwd_grads": 2,
                   "bwd": 2, "fwd": 2},
    }


# Warps per program for 16-bit inputs by tile width (max(BK, BV)), over the defaults above.
# Narrow tiles leave 4 warps little to share: fewer warps per program let more programs run
# per SM, and the per-chunk work is many small latency-bound products. NVIDIA H100, triton
# 3.7.1, bf16, 4 heads, GPU-busy ms fwd / fwd+bwd, default -> this table (fla):
# d = 16 nh2 decay B128 T1024 0.738 / 2.059 -> 0.341 / 0.928 (1.028 / 2.005), B32 T4096
# 0.898 / 2.363 -> 0.519 / 1.361 (1.102 / 2.238); nh1 B128 T1024 0.287 / 0.652 -> 0.134 /
# 0.368; d = 32 nh2 decay B128 T1024 0.806 / 2.415 -> 0.453 / 1.490, B32 T4096 0.972 / 2.685
# -> 0.713 / 1.814; d = 64 (fwd_prep only) 0.939 / 3.206 -> 0.757 / 3.030, B32 T4096
# 1.234 / 3.542 -> 1.137 / 3.443 (2 warps measured slower at d = 64 for bwd_grads,
# 4.538 ms, and the few-rows fused backward, 4.301).
_HALF_WARPS = {
    16: {"fwd_prep": 1, "bwd_grads": 1, "fwd_state": 2, "bwd_state": 2, "fwd_out": 1, "bwd": 1},
    32: {"fwd_prep": 2, "bwd_grads": 2, "fwd_state": 2, "bwd_state": 2, "fwd_out": 2, "bwd": 2},
    64: {"fwd_prep": 2},
}


def _half_warps(half: bool, width: int) -> dict:
    return _HALF_WARPS.get(width, {}) if half else {}  # read only: spread into the plan


def launch_kwargs(cfg: dict, kernel: str, **flags) -> dict:
    """Keyword arguments for launching ``kernel`` (a key of ``KERNEL_CONSTEXPRS``):
    its constexprs from ``cfg``, the given flags (``HAS_DECAY`` ...), warps and stages."""
    out = {n: cfg[n] for n in KERNEL_CONSTEXPRS[kernel]}
    if kernel in ("fwd_state", "bwd_state", "fwd_out", "bwd_prep", "fwd"):
        out["VS"] = cfg["STATE_VS"]
    if kernel == "bwd":  # the fused backward: the per-chunk kernel's 16-bit operands too
        out.update(cfg.get("overrides", {}).get("bwd_grads", {}))
    out.update(cfg.get("overrides", {}).get(kernel, {}))
    out.update(flags)
    out["num_warps"] = cfg["warps"][kernel]
    out["num_stages"] = cfg["stages"][kernel]
    return out


def n_chunks(T: int, cfg: dict) -> int:
    """Number of chunks for a sequence of ``T`` tokens."""
    return -(-T // cfg["C"])


def packed_chunks(T: int, n_seq: int, C: int) -> int:
    """Chunks of the chunk-aligned packed layout of ``n_seq`` sequences of ``T`` tokens in
    all, ``C`` tokens per chunk: every sequence starts at a chunk boundary, so sequence ``n``
    takes ``ceil(L_n / C)`` chunks and all of them at most ``(T + n_seq·(C−1)) // C`` — a
    static bound (at least 1) computed from shapes only, never from the offsets' values.
    The eager twins use it with their ``chunk_size``, the launchers with ``cfg["C"]``."""
    return max(1, (T + n_seq * (C - 1)) // C)


def scratch_shapes(BH: int, T: int, cfg: dict) -> dict:
    """Scratch shapes: chunk start states ``states (BH, NC, BK, BV)`` (``dstates`` has the
    same shape and dtype: the inputs' with ``cfg["HALF_STATES"]``, else float32), float32 ``Wk (BH, NC, LP, BK)``, ``U (BH, NC, LP, BV)`` and the WY inverses
    ``Tm (BH, NC, LP, LP)`` (``Wk`` and ``U`` are one-element placeholders with
    ``cfg["WU_IN_STATE"]``, and in the inputs' dtype with ``cfg["WU_HALF"]``; ``Tm`` is a
    ``(BH, 1)`` placeholder without ``cfg["STORE_TM"]``, batch-leading like the outputs the
    JAX frontend's vmap rule splits), and with ``cfg["STORE_W"]`` the chunks' ``W (BH, NC, LP, BV)``
    (in the states' dtype; else a one-element placeholder); the backward's prep buffers
    with ``cfg["PREP_N"]`` (else one-element placeholders): float32 ``N (BH, NC, BK, BV)``,
    ``B (BH, NC, BK, BK)`` (in the inputs' dtype with ``cfg["STATE_HALF_OPS"]``, else
    float32) and float32 ``GL (BH, NC)`` (read only with a decay)."""
    nc = n_chunks(T, cfg)
    bk, bv, lp = cfg["BK"], cfg["BV"], cfg["LP"]
    unused = cfg.get("WU_IN_STATE", False)  # then never touched: a one-element placeholder
    return {
        "states": (BH, nc, bk, bv),
        "Wk": (1,) if unused else (BH, nc, lp, bk),
        "U": (1,) if unused else (BH, nc, lp, bv),
        "Tm": (BH, nc, lp, lp) if cfg.get("STORE_TM", True) else (BH, 1),
        "W": (BH, nc, lp, bv) if cfg.get("STORE_W", False) else (1,),
        "N": (BH, nc, bk, bv) if cfg.get("PREP_N", False) else (1,),
        "B": (BH, nc, bk, bk) if cfg.get("PREP_N", False) else (1,),
        "GL": (BH, nc) if cfg.get("PREP_N", False) else (1,),
    }


def grid_chunks(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the per-chunk kernels (``fwd_prep``, ``bwd_grads``): ``(NC, B·H)``."""
    return (n_chunks(T, cfg), BH)


def grid_out(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the output pass (``fwd_out``, with ``OUT_PASS``) and of the backward's
    ``bwd_prep`` (with ``PREP_N``): ``(NC, B·H, BV/STATE_VS)``."""
    return (n_chunks(T, cfg), BH, cfg["BV"] // cfg["STATE_VS"])


def grid_fused_bwd(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the fused backward (``delta_rule_bwd_kernel``, with ``FUSED_BWD``): one
    program per ``(b, h)`` and state column slice, and one per ``(b, h)`` and chunk."""
    return (BH * (cfg["BV"] // cfg["STATE_VS"] + n_chunks(T, cfg)),)


def grid_fused_fwd(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the fused forward (``delta_rule_fwd_kernel``, with ``FUSED_FWD``): one
    program per ``(b, h)`` and state column slice, and one per ``(b, h)``, chunk and slice."""
    return (BH * (cfg["BV"] // cfg["STATE_VS"]) * (1 + n_chunks(T, cfg)),)


def sync_size(T: int, BH: int, cfg: dict) -> int:
    """Length of the fused backward's or forward's zeroed int32 ``sync`` buffer: a ticket
    counter per ``(b, h)``, then a flag per ``(b, h)`` and chunk."""
    return BH * (1 + n_chunks(T, cfg))


def grid_state(BH: int, cfg: dict) -> tuple:
    """Grid of the serial-over-chunks kernels: one program per ``(b, h)`` and ``STATE_VS``
    columns."""
    return (BH, cfg["BV"] // cfg["STATE_VS"])
