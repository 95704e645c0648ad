"""The delta rule's launch plans (op ``"delta_rule"``): pure-Python rules of
``mingru_kernels.launch.delta_rule.launch_config`` (the plan of each class of inputs, forced
choices, refusals, scratch shapes, grids), how the PyTorch launcher reaches them, and an
offline sm_90 compile of the kernels the plans select (no GPU needed). The kernels' numbers
are in tests/kernels/test_delta_rule.py.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from mingru_kernels.launch import delta_rule as meta
from mingru_kernels.launch import switches
from tests.helpers import run_offline_gpu_compile

# A forced value per plan key that differs from its default for the inputs below.
FORCED_PLAN = dict(micro_chunk=64, half=True, few_rows=True)

FLAGS = ("REG_STATE", "HALF_STATES", "STATE_HALF_OPS", "WU_IN_STATE", "OUT_PASS", "WU_HALF",
         "FUSED_BWD", "HALF_OPS", "SAVED_TM", "STORE_TM", "TM_HALF")

# The shipped plans: (nh, d_k, d_v, launch_config's class arguments) -> PREC, KS, VS and the
# flags that are on (every other flag of FLAGS is off).
SHIPPED = {
    "fp32-d16": ((2, 16, 16, {}), "ieee", 16, 16, {"REG_STATE", "STORE_TM"}),
    "fp32-d32-reloaded": ((2, 32, 32, {}), "ieee", 16, 16, {"STORE_TM"}),
    "fp32-d64x32-fma": ((2, 64, 32, dict(few_rows=True)), "ieee", 16, 16, {"STORE_TM"}),
    "fp32-d64-split": ((2, 64, 64, {}), "tf32x3", 64, 64, {"REG_STATE"}),
    "fp32-d64-split-few-rows": ((1, 60, 60, dict(few_rows=True)), "tf32x3", 64, 64,
                                {"REG_STATE", "OUT_PASS"}),
    "tf32-d64": ((2, 64, 64, dict(tf32=True, few_rows=True)), "tf32", 64, 64,
                 {"REG_STATE", "SAVED_TM", "STORE_TM"}),
    "tf32-d128-reloaded": ((2, 128, 128, dict(tf32=True)), "tf32", 64, 64,
                           {"SAVED_TM", "STORE_TM"}),
    "half-d64": ((2, 64, 64, dict(half=True)), "tf32", 64, 64,
                 {"REG_STATE", "HALF_STATES", "STATE_HALF_OPS", "WU_IN_STATE", "HALF_OPS",
                  "SAVED_TM", "STORE_TM"}),
    "half-d16-nh1-few-rows": ((1, 16, 16, dict(half=True, few_rows=True)), "tf32", 16, 16,
                              {"REG_STATE", "HALF_STATES", "STATE_HALF_OPS", "WU_IN_STATE",
                               "HALF_OPS", "SAVED_TM", "STORE_TM"}),
    "half-d64-few-rows": ((2, 64, 64, dict(half=True, few_rows=True)), "tf32", 64, 64,
                          {"REG_STATE", "HALF_STATES", "STATE_HALF_OPS", "OUT_PASS", "WU_HALF",
                           "FUSED_BWD", "HALF_OPS", "SAVED_TM", "STORE_TM", "TM_HALF"}),
    "half-nh40-few-rows": ((40, 16, 16, dict(half=True, few_rows=True)), "tf32", 16, 16,
                           {"REG_STATE", "HALF_STATES", "STATE_HALF_OPS", "WU_IN_STATE",
                            "HALF_OPS", "SAVED_TM", "STORE_TM"}),
    "half-d128-reloaded": ((2, 128, 128, dict(half=True, few_rows=True)), "tf32", 64, 64,
                           {"HALF_OPS", "SAVED_TM", "STORE_TM", "TM_HALF"}),
}


@pytest.mark.parametrize("name", list(SHIPPED))
def test_shipped_plan_of_each_class(name):
    """Each class of inputs gets its plan (the table of the launch module's docstring)."""
    (nh, dk, dv, kwargs), prec, ks, vs, on = SHIPPED[name]
    cfg = meta.launch_config(nh, dk, dv, **kwargs)
    assert (cfg["PREC"], cfg["KS"], cfg["VS"]) == (prec, ks, vs)
    assert {f for f in FLAGS if cfg[f]} == on
    assert all(cfg[f] is (f in on) for f in FLAGS)  # plain bools: they become constexprs


@pytest.mark.parametrize("key", sorted(FORCED_PLAN))
def test_every_plan_key_reaches_the_launch_config(key):
    """A choice forced through the switches reaches the PyTorch launcher's config (its custom
    ops carry the choices as one int, which must encode every key)."""
    from mingru._launch import delta_rule as launcher

    assert set(FORCED_PLAN) == set(meta.PLAN_KEYS)
    choice = {key: FORCED_PLAN[key]}
    half = key == "few_rows"  # the few-rows plan is the half inputs'
    # (B, T, H, d_k), (B, T, nh, H, d); only shapes and dtype count, and the host's few_rows.
    q = torch.randn(1, 9, 2, 64)
    k, v = torch.randn(2, 1, 9, 2, 2, 64)
    if half:
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    with switches.forced("delta_rule", **choice):
        cfg = launcher._config(q, k, v, launcher._tuning())
    assert cfg == meta.launch_config(2, 64, 64, **{"half": half, **choice})
    assert cfg != meta.launch_config(2, 64, 64, half=half), key
    # A forced off wins over the inputs' own class too.
    with switches.forced("delta_rule", half=False):
        plain = launcher._config(q.bfloat16(), k.bfloat16(), v.bfloat16(), launcher._tuning())
    assert plain == meta.launch_config(2, 64, 64)


def test_refusals():
    for nh in (0, 65):
        with pytest.raises(ValueError, match="nh must be"):
            meta.launch_config(nh, 16, 16)
    for micro_chunk, nh in ((8, 1), (128, 1), (16, 17)):
        with pytest.raises(ValueError, match="micro_chunk must be"):
            meta.launch_config(nh, 16, 16, micro_chunk=micro_chunk)
    assert meta.launch_config(17, 16, 16)["LP"] == 32 and meta.launch_config(33, 16, 16)["LP"] == 64
    assert meta.unsupported_size(1, 5, 65, 2, 16, 16).startswith("nh = 65")
    assert "128" in meta.unsupported_size(1, 5, 1, 2, 16, 129)
    assert meta.unsupported_size(1, 5, 1, 2, 128, 128) is None


def test_few_rows_plan():
    """Where B·H state programs fit the SMs, half inputs at nh >= 2 take the output pass with
    Wk, U stored in 16 bits, the WY inverse in 16 bits and the backward in one launch;
    float32's split products take the output pass only; every other class is unchanged, and a
    64-micro-step chunk keeps the plain plan."""
    few = meta.launch_config(2, 64, 64, half=True, few_rows=True)
    plain = meta.launch_config(2, 64, 64, half=True)
    assert {k for k in few if few[k] != plain[k]} == {"WU_IN_STATE", "OUT_PASS", "WU_HALF",
                                                      "FUSED_BWD", "TM_HALF"}
    split = meta.launch_config(2, 64, 64, few_rows=True)
    assert {k for k in split if split[k] != meta.launch_config(2, 64, 64)[k]} == {"OUT_PASS"}
    for nh, dk, kwargs in ((1, 64, dict(half=True)), (2, 16, {}), (2, 32, {}),
                           (2, 64, dict(tf32=True)), (2, 128, dict(half=True)),
                           (2, 16, dict(half=True, micro_chunk=64)), (33, 16, dict(half=True))):
        assert meta.launch_config(nh, dk, dk, few_rows=True, **kwargs) == meta.launch_config(
            nh, dk, dk, **kwargs), (nh, dk, kwargs)
    # The output pass forms W = U − Wk S again from the stored Wk, U: no W buffer.
    shapes = meta.scratch_shapes(8, 4096, few)
    assert set(shapes) == {"states", "Wk", "U", "Tm"}
    assert shapes["Wk"] == shapes["U"] == (8, 256, 32, 64) and shapes["Tm"] == (8, 256, 32, 32)
    formed = meta.scratch_shapes(8, 640, plain)  # Wk, U formed in the walk: placeholders
    assert formed["Wk"] == formed["U"] == (1,) and formed["Tm"] == (8, 40, 32, 32)


def test_fused_bwd_grid_and_kwargs():
    """The backward in one launch: a program per (b, h) and column slice plus one per (b, h)
    and chunk; sync words a counter per (b, h) plus a flag per (b, h) and chunk; the
    per-chunk kernel's 16-bit operands and the width's warps."""
    cfg = meta.launch_config(2, 16, 16, half=True, few_rows=True)
    assert cfg["FUSED_BWD"] and cfg["C"] == 16 and meta.n_chunks(40, cfg) == 3
    assert meta.grid_fused_bwd(40, 6, cfg) == (6 * (1 + 3),)
    assert meta.sync_size(40, 6, cfg) == 6 * (1 + 3)
    kw = meta.launch_kwargs(cfg, "bwd", HAS_DECAY=True)
    assert kw["HALF_OPS"] is True and kw["SAVED_TM"] is True and kw["num_warps"] == 1
    wide = meta.launch_config(2, 64, 64, half=True, few_rows=True)
    assert meta.grid_fused_bwd(640, 8, wide) == (8 * (1 + 40),)
    assert meta.grid_out(640, 8, wide) == (40, 8, 1) and meta.grid_state(8, wide) == (8, 1)


def test_half_ops_and_the_stored_inverse():
    """16-bit product operands in the backward's per-chunk kernel of half inputs only (the
    forward's per-chunk kernels take none); the state kernels' wherever half inputs keep the
    state in registers; the WY inverse kept in 16 bits only where its one reader rounds it
    so anyway (not where the state kernels form Wk, U from it)."""
    half = meta.launch_config(2, 64, 64, half=True)
    for kernel in ("fwd_prep", "fwd_out"):
        assert "HALF_OPS" not in meta.launch_kwargs(half, kernel, HAS_DECAY=False)
    assert meta.launch_kwargs(half, "bwd_grads", HAS_DECAY=False)["HALF_OPS"] is True
    for cfg in (meta.launch_config(2, 64, 64), meta.launch_config(2, 64, 64, tf32=True)):
        assert meta.launch_kwargs(cfg, "bwd_grads", HAS_DECAY=False)["HALF_OPS"] is False
        assert not cfg["STATE_HALF_OPS"] and not cfg["TM_HALF"]
    assert half["STATE_HALF_OPS"] and not half["TM_HALF"]
    assert not meta.launch_config(2, 128, 128, half=True)["STATE_HALF_OPS"]


def test_backward_reads_or_inverts_the_wy_inverse():
    """Tensor-core precisions read the forward's WY inverse; exact float32 products invert
    again; the split plan stores none (a ``(B·H, 1)`` placeholder)."""
    assert meta.launch_config(1, 64, 64, half=True)["SAVED_TM"] is True
    assert meta.launch_config(1, 64, 64, tf32=True)["SAVED_TM"] is True
    assert meta.launch_config(1, 16, 16)["SAVED_TM"] is False
    split = meta.launch_config(1, 64, 64)
    assert not split["SAVED_TM"] and not split["STORE_TM"]
    assert meta.scratch_shapes(2, 40, split)["Tm"] == (2, 1)


_BWD_COMPILE = textwrap.dedent(
    """
    import inspect, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mingru_kernels import delta_rule as kernels
    from mingru_kernels.launch import delta_rule as meta

    INT = ("sync_ptr", "cseq_ptr", "cend_ptr", "cu_ptr")
    F32 = ("lg_ptr", "dlg_ptr")

    def build(fn, cfg, kernel):
        kw = meta.launch_kwargs(cfg, kernel, HAS_DECAY=True, HAS_DHT=True, HAS_H0=True,
                                PACKED=False)
        opts = {"num_warps": kw.pop("num_warps"), "num_stages": kw.pop("num_stages")}
        names = list(inspect.signature(fn.fn).parameters)
        consts = {n: kw[n] for n in names if n in kw}
        sig = {n: "constexpr" if n in consts else "*i32" if n in INT else "*fp32" if n in F32
               else "*bf16" if n.endswith("_ptr") else "i32" for n in names}
        src = ASTSource(fn, signature=sig, constexprs=consts)
        return triton.compile(src, target=GPUTarget("cuda", 90, 32), options=opts)

    cfg = meta.launch_config(2, 64, 64, half=True, few_rows=True)
    fused = build(kernels.delta_rule_bwd_kernel, cfg, "bwd")
    grads = build(kernels.delta_rule_bwd_grads_kernel, cfg, "bwd_grads")
    state = build(kernels.delta_rule_bwd_state_kernel, cfg, "bwd_state")
    build(kernels.delta_rule_fwd_state_kernel, cfg, "fwd_state")
    build(kernels.delta_rule_fwd_out_kernel, cfg, "fwd_out")
    ptx = fused.asm["ptx"]
    # One role's shared memory is reused by the other's, not added to it.
    assert fused.metadata.shared <= max(grads.metadata.shared, state.metadata.shared)
    assert re.search(r"atom\\.global\\.gpu\\.relaxed\\.add", ptx)  # the lane's ticket
    # A chunk published: a release-ordered add (``red``, or ``atom`` with its result unused,
    # as Triton 3.6 emits it).
    assert re.search(r"(red|atom)\\.global\\.gpu\\.release\\.add", ptx)
    assert re.search(r"ld\\.global\\.gpu\\.acquire", ptx)  # waiting on it
    assert "ld.global.cg" in ptx  # dstates read through L2
    print("OK")
    """
)


def test_backward_kernels_compile_for_sm90():
    """Offline for sm_90 (no GPU needed), at bf16, d = 64, nh = 2 with decay and h0: the
    few-rows plan's kernels compile; the fused backward needs no more shared memory than the
    larger of its two, and its PTX keeps the ticket, the release of each chunk's flag, the
    acquiring wait and the L2-only reads. On a GPU the tests compile and run these kernels
    there (tests/kernels/test_delta_rule.py: bf16 at d = 64, nh = 2 on few rows), so this
    check is left to machines without one."""
    if torch.cuda.is_available():
        pytest.skip("a GPU compiles these kernels natively in the gpu tests")
    assert run_offline_gpu_compile(_BWD_COMPILE).strip().endswith("OK")


def test_few_rows_is_read_from_the_device(monkeypatch):
    """The PyTorch launcher passes ``few_rows`` only on a CUDA device with ``B·H`` at most
    its SM count (never in the interpreter on the host)."""
    from mingru._launch import delta_rule as launcher

    q = torch.zeros(1)
    assert launcher._few_rows(q, 1) is False
    monkeypatch.setattr(launcher, "sm_count", lambda x: 132)

    class FakeCuda:
        device = torch.device("cuda", 0)

    assert launcher._few_rows(FakeCuda(), 132) is True
    assert launcher._few_rows(FakeCuda(), 133) is False


def test_split_products_tiling():
    """float32 inputs at 64-wide heads take the split products on the tensor cores (the
    forward and the backward's state kernel in 64-wide slices, the backward's per-chunk kernel
    in 32-wide ones, re-inverting); a head padded to 64 too; elsewhere FMA slices."""
    cfg = meta.launch_config(2, 64, 64)
    grads = meta.launch_kwargs(cfg, "bwd_grads", HAS_DECAY=True)
    assert (grads["KS"], grads["VS"], grads["PREC"], grads["num_warps"]) == (32, 32, "tf32x3", 4)
    assert meta.launch_kwargs(cfg, "bwd_state", HAS_DECAY=True)["PREC"] == "tf32x3"
    assert meta.launch_kwargs(cfg, "fwd_prep", HAS_DECAY=True)["KS"] == 64
    assert meta.launch_config(2, 60, 60)["PREC"] == "tf32x3"  # padded to 64
    for dk, dv in ((16, 16), (64, 32), (128, 128)):
        plain = meta.launch_config(2, dk, dv)
        assert plain["PREC"] == "ieee" and plain["overrides"] == {}
    # FMA products of a long chunk of a wide head take 8 warps; tensor cores keep 4.
    assert meta.launch_config(2, 64, 32, micro_chunk=32)["warps"]["bwd_grads"] == 8
    assert meta.launch_config(2, 32, 32, micro_chunk=32)["warps"]["bwd_grads"] == 4


def test_half_warps_by_tile_width():
    """16-bit inputs take fewer warps per program on narrow tiles (see ``_HALF_WARPS``);
    float32 and other widths keep the defaults; a head of 60 pads to 64."""

    def warps(d, half=True, **kwargs):
        return meta.launch_config(2, d, d, half=half, **kwargs)["warps"]

    d16, d32, d64 = warps(16), warps(32), warps(64)
    assert (d16["fwd_prep"], d16["bwd_grads"], d16["fwd_out"], d16["bwd"]) == (1, 1, 1, 1)
    assert (d16["fwd_state"], d16["bwd_state"]) == (2, 2)
    assert warps(8) == d16  # padded to a 16-wide tile
    assert set(d32.values()) == {2}
    assert d64["fwd_prep"] == 2 and d64["bwd_grads"] == 4 and d64["bwd"] == 4
    assert warps(60) == d64
    assert set(warps(128).values()) == {4}
    assert warps(16, half=False)["fwd_prep"] == 4  # float32: unchanged


def test_reloaded_state_is_not_pipelined():
    """State kernels that reload the state they just stored run one stage; from registers
    they prefetch the next chunk's tiles."""
    reloaded = meta.launch_config(2, 32, 32)
    assert not reloaded["REG_STATE"]
    assert reloaded["stages"]["fwd_state"] == reloaded["stages"]["bwd_state"] == 1
    regs = meta.launch_config(2, 16, 16)
    assert regs["stages"]["fwd_state"] == regs["stages"]["bwd_state"] == 2
