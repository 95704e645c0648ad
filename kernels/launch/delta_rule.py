"""Launch metadata of the delta-rule kernels (:mod:`mingru_kernels.delta_rule`): tile sizes,
the per-kernel constexprs and launch settings, chunk counts, scratch shapes and grids.

Pure Python (no triton, torch or jax import), shared by the PyTorch launcher
(``mingru._launch.delta_rule``) and the JAX launcher (``mingru_jax._launch.delta_rule``).
Nothing here depends on ``T`` except the runtime chunk count and grid sizes. The shape rules
of the op's arguments are :func:`mingru_kernels._spec.check_delta_rule_shapes`.

The plans :func:`launch_config` ships, by class of inputs ("few rows": ``B·H`` at most the
GPU's SM count, where the serial state walks are the time)::

    inputs                     PREC    slices  Wk, U               output    backward
    float32                    ieee    16      stored              walk      inverts T
    float32, BK = BV = 64      tf32x3  64      stored              walk      inverts T, 32-wide
    ... at few rows            tf32x3  64      stored              out pass  inverts T, 32-wide
    float32, allow_tf32        tf32    64      stored              walk      reads T
    bf16 / fp16                tf32    64      formed in the walk  walk      reads T, 16-bit ops
    ... at few rows, nh ≥ 2    tf32    64      stored in 16 bits   out pass  one launch, 16-bit T

"slices": the width of the ``d_k`` / ``d_v`` slices of the products (at most the padded head
``BK`` / ``BV``). The state kernels multiply the state from registers where one slice is the
whole head, else reload it in slices (bf16 / fp16 at ``BK = 128`` then store ``Wk``, ``U``
and a 16-bit ``T``).
"""

from __future__ import annotations

from mingru_kernels.launch._elementwise import next_pow2

PLAN_KEYS = ("micro_chunk", "half", "few_rows")
"""The choices a test may force (see :mod:`mingru_kernels.launch.switches`): ``micro_chunk``
(16, 32 or 64) and the class a plan is made for, ``half`` (the plan of bfloat16/float16
inputs, whatever the inputs' dtype) and ``few_rows`` (``B·H`` at most the SM count). With
them float32 inputs on the host reach every kernel path of every shipped plan."""

SUB = 16
"""Rows per diagonal block of the blocked triangular inverse (``tl.dot`` needs ≥ 16)."""

KS = 16
"""Slice of ``d_k`` rows/columns per partial product when contracting over ``d_k`` with
float32 ``"ieee"`` dots (FMA units: whole operand rows and columns live in registers)."""

VS = 16
"""Slice of ``d_v`` columns handled at a time with float32 ``"ieee"`` dots: the value side of
a chunk, and the state columns of one program of the state kernels."""

HALF_SLICE = 64
"""Slice width of the kernels with tensor-core products: their operands are spread over the
warps, so a slice can be as wide as a 64-wide head without spilling (and one wide product
beats four narrow ones)."""

MAX_NH = 64
"""Largest ``nh`` served (a chunk must hold at least one token's micro-steps)."""

MAX_HEAD_DIM = 128
"""Largest ``d_k`` / ``d_v`` served (register budget of the per-chunk tiles)."""

DEFAULT_MICRO_CHUNK = 32
"""Micro-steps per chunk ``LP`` (larger when ``nh`` needs): with float32 ``"ieee"`` dots
``LP = 64`` spills the backward's registers."""

DOT_PRECISION = "ieee"
"""``tl.dot`` precision with float32 inputs: exact float32 products, no TF32."""

SPLIT_DOT_PRECISION = "tf32x3"
"""``tl.dot`` precision of float32 inputs' split products: each operand split into a TF32
high part and a TF32 remainder, three tensor-core products summed in float32 (the low·low
term dropped, ~2⁻²² relative) — float32 accuracy on the tensor cores."""

SPLIT_HEAD_SIZES = (64,)
"""Padded head widths (``BK = BV``) where float32 inputs take the split products: there they
beat the FMA slices; elsewhere the FMA products stay."""

SPLIT_GRADS_SLICE = 32
"""Slice width of the backward's per-chunk kernel (``bwd_grads``) under split products:
64-wide split products there spill the registers."""

HALF_DOT_PRECISION = "tf32"
"""``tl.dot`` precision with bfloat16/float16 inputs (and with ``allow_tf32``): the float32
intermediates are still multiplied more precisely than the inputs are stored."""

KERNEL_CONSTEXPRS = {
    "fwd_prep": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "PREC", "WU_IN_STATE",
                 "STORE_TM"),
    "fwd_state": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "REG_STATE",
                  "WU_IN_STATE", "OUT_PASS", "STATE_HALF_OPS"),
    "fwd_out": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC"),
    "bwd_state": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "PREC", "REG_STATE",
                  "WU_IN_STATE", "STATE_HALF_OPS"),
    "bwd_grads": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "PREC", "SAVED_TM",
                  "HALF_OPS"),
    "bwd": ("NH", "C", "LP", "CP", "BK", "BV", "KS", "VS", "SUB", "PREC", "REG_STATE",
            "WU_IN_STATE", "STATE_HALF_OPS", "SAVED_TM", "HALF_OPS"),
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


def launch_config(nh: int, dk: int, dv: int, *, half: bool = False, tf32: bool = False,
                  few_rows: bool = False, micro_chunk: int = 0) -> dict:
    """Compile-time parameters of every kernel of this op (nothing depends on ``T``); the
    plan classes are tabled in the module docstring.

    ``half``: bfloat16/float16 inputs. ``tf32``: the caller allows TF32 products for float32
    inputs. ``few_rows``: ``B·H`` is at most the GPU's SM count (the serial state kernels have
    at most one program per SM). ``micro_chunk`` (``LP``; 0 = default) must be 16, 32 or 64
    and at least ``nh``; a chunk holds ``C = LP // nh`` whole tokens.

    Returns ``NH, C, LP, CP, BK, BV, KS, VS, SUB, PREC``, per-kernel ``warps`` / ``stages`` /
    ``overrides``, and the flags:

    * ``REG_STATE``: the state kernels multiply the state from registers (one slice is the
      whole head, ``KS == BK``), else store it, and reload it in ``KS``-row slices;
    * ``HALF_STATES``, ``STATE_HALF_OPS`` (half inputs with ``REG_STATE``): the chunk start
      states and their gradients are kept in 16 bits and the state kernels' products take
      16-bit operands; the carried state stays float32, so no rounding accumulates;
    * ``WU_IN_STATE`` (half inputs with ``REG_STATE``, not few rows): the state kernels form
      each chunk's ``Wk`` and ``U`` from its WY inverse ``T`` instead of reading them: two
      ``(B·H, NC, LP, d)`` buffers less;
    * ``OUT_PASS`` (few rows, half inputs or split products): the output is formed parallel
      over chunks by ``fwd_out`` (``W = U − Wk S`` again from the stored ``Wk``, ``U``), off
      the serial chain, which is the time at few rows;
    * ``WU_HALF`` (the few-rows plan of half inputs): ``Wk`` and ``U`` stored in 16 bits;
    * ``FUSED_BWD`` (the same plan): the backward's state walk and per-chunk kernel run as one
      launch (``bwd``), so each chunk's gradients fill the SMs the few walks leave idle;
    * ``HALF_OPS`` (half inputs): the backward's per-chunk kernel rounds its product operands
      to 16 bits;
    * ``SAVED_TM`` (tensor-core precisions): the backward reads the forward's WY inverse
      rather than inverting again (with FMA products the loaded ``T`` spills registers, and
      under split products reading it did not pay for storing it);
    * ``STORE_TM``: the forward stores ``T`` (all but the split plan); ``TM_HALF``: in 16 bits,
      where its one reader, the backward's per-chunk kernel, rounds it so anyway.
    """
    if not 1 <= nh <= MAX_NH:
        raise ValueError(f"nh must be in [1, {MAX_NH}]; got {nh}")
    lp = micro_chunk or max(DEFAULT_MICRO_CHUNK, next_pow2(nh))
    if lp not in (16, 32, 64) or lp < nh:
        raise ValueError(f"micro_chunk must be 16, 32 or 64 and >= nh ({nh}); got {lp}")
    half, tf32, few_rows = bool(half), bool(tf32), bool(few_rows)
    bk, bv = block_size(dk), block_size(dv)
    split = not (half or tf32) and bk == bv and bk in SPLIT_HEAD_SIZES
    tensor_cores = half or tf32 or split
    ks = min(HALF_SLICE if tensor_cores else KS, bk)
    reg_state = ks == bk
    # The few-rows plan of half inputs. Not at a 64-micro-step chunk: its fused backward
    # crashed with an illegal memory access on a GPU, while the plain plan ran.
    few = few_rows and half and nh >= 2 and reg_state and lp <= 32
    wu_in_state = half and reg_state and not few
    # Tensor-core products: 4 warps let two chunk programs share an SM and overlap their
    # chains of dependent products; FMA products of long chunks need 8.
    chunk_warps = 4 if tensor_cores or lp * max(bk, bv) < 2048 else 8
    # Reloading state kernels re-read what they just stored: no software pipelining there.
    state_stages = 2 if reg_state else 1
    return {
        "NH": nh, "C": lp // nh, "LP": lp, "CP": max(16, next_pow2(lp // nh)),
        "BK": bk, "BV": bv, "KS": ks, "VS": min(HALF_SLICE if tensor_cores else VS, bv),
        "SUB": SUB,
        "PREC": (SPLIT_DOT_PRECISION if split else
                 HALF_DOT_PRECISION if tensor_cores else DOT_PRECISION),
        "REG_STATE": reg_state,
        "HALF_STATES": half and reg_state,
        "STATE_HALF_OPS": half and reg_state,
        "WU_IN_STATE": wu_in_state,
        "OUT_PASS": few or (few_rows and split),
        "WU_HALF": few,
        "FUSED_BWD": few,
        "HALF_OPS": half,
        "SAVED_TM": half or tf32,
        "STORE_TM": not split,
        "TM_HALF": half and not wu_in_state,
        "overrides": ({"bwd_grads": {"KS": min(SPLIT_GRADS_SLICE, bk),
                                     "VS": min(SPLIT_GRADS_SLICE, bv)}} if split else {}),
        "warps": {"fwd_prep": chunk_warps, "fwd_state": 4, "fwd_out": chunk_warps,
                  "bwd_state": 4, "bwd_grads": chunk_warps, "bwd": chunk_warps,
                  **(_HALF_WARPS.get(max(bk, bv), {}) if half else {})},
        "stages": {"fwd_prep": 2, "fwd_state": state_stages, "fwd_out": 2,
                   "bwd_state": state_stages, "bwd_grads": 2, "bwd": 2},
    }


# Warps per program for 16-bit inputs by tile width (max(BK, BV)), over the defaults above:
# narrow tiles leave 4 warps little to share, and fewer warps per program let more programs
# run per SM on many small latency-bound products.
_HALF_WARPS = {
    16: {"fwd_prep": 1, "bwd_grads": 1, "fwd_state": 2, "bwd_state": 2, "fwd_out": 1, "bwd": 1},
    32: {"fwd_prep": 2, "bwd_grads": 2, "fwd_state": 2, "bwd_state": 2, "fwd_out": 2, "bwd": 2},
    64: {"fwd_prep": 2},
}


def launch_kwargs(cfg: dict, kernel: str, **flags) -> dict:
    """Keyword arguments for launching ``kernel`` (a key of ``KERNEL_CONSTEXPRS``):
    its constexprs from ``cfg``, the given flags (``HAS_DECAY`` ...), warps and stages."""
    out = {n: cfg[n] for n in KERNEL_CONSTEXPRS[kernel]}
    out.update(cfg["overrides"].get(kernel, {}))
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
    same shape and dtype: the inputs' with ``cfg["HALF_STATES"]``, else float32), ``Wk (BH,
    NC, LP, BK)``, ``U (BH, NC, LP, BV)`` (float32, in the inputs' dtype with
    ``cfg["WU_HALF"]``; one-element placeholders with ``cfg["WU_IN_STATE"]``) and the WY
    inverses ``Tm (BH, NC, LP, LP)`` (float32, the inputs' dtype with ``cfg["TM_HALF"]``; a
    ``(BH, 1)`` placeholder without ``cfg["STORE_TM"]``, batch-leading like the outputs the
    JAX frontend's vmap rule splits)."""
    nc = n_chunks(T, cfg)
    bk, bv, lp = cfg["BK"], cfg["BV"], cfg["LP"]
    unused = cfg["WU_IN_STATE"]  # then never touched: a one-element placeholder
    return {
        "states": (BH, nc, bk, bv),
        "Wk": (1,) if unused else (BH, nc, lp, bk),
        "U": (1,) if unused else (BH, nc, lp, bv),
        "Tm": (BH, nc, lp, lp) if cfg["STORE_TM"] else (BH, 1),
    }


def grid_chunks(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the per-chunk kernels (``fwd_prep``, ``bwd_grads``): ``(NC, B·H)``."""
    return (n_chunks(T, cfg), BH)


def grid_out(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the output pass (``fwd_out``, with ``OUT_PASS``): ``(NC, B·H, BV/VS)``."""
    return (n_chunks(T, cfg), BH, cfg["BV"] // cfg["VS"])


def grid_fused_bwd(T: int, BH: int, cfg: dict) -> tuple:
    """Grid of the fused backward (``delta_rule_bwd_kernel``, with ``FUSED_BWD``): one
    program per ``(b, h)`` and state column slice, and one per ``(b, h)`` and chunk."""
    return (BH * (cfg["BV"] // cfg["VS"] + n_chunks(T, cfg)),)


def sync_size(T: int, BH: int, cfg: dict) -> int:
    """Length of the fused backward's zeroed int32 ``sync`` buffer: a ticket counter per
    ``(b, h)``, then a flag per ``(b, h)`` and chunk."""
    return BH * (1 + n_chunks(T, cfg))


def grid_state(BH: int, cfg: dict) -> tuple:
    """Grid of the serial-over-chunks kernels: one program per ``(b, h)`` and ``VS``
    columns."""
    return (BH, cfg["BV"] // cfg["VS"])
