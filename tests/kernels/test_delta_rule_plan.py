"""The delta rule's launch plans (op ``"delta_rule"``): pure-Python rules of
``mingru_kernels.launch.delta_rule.launch_config`` (defaults, forced choices, refusals, scratch
shapes, grids), how the PyTorch launcher reaches them, and an offline sm_90 compile of the
kernels the plans select (no GPU needed). The kernels' numbers are in tests/kernels/test_delta_rule.py.
"""

from __future__ import annotations

import textwrap

import pytest
import torch

from mingru_kernels.launch import switches
from tests.helpers import run_offline_gpu_compile
from tests.kernels.cases import DEVICE

# A forced value per plan key that differs from its default for half inputs at nh = 2, d = 64.
FORCED_PLAN = dict(micro_chunk=64, blocked=False, reg_state=False, wu_in_state=False,
                   state_vs=16, out_pass=True, wu_half=True, saved_tm=False,
                   split_fp32=False, half_ops=True, state_half_ops=False, bwd_prep=True,
                   fused_bwd=True, fused_fwd=True)


@pytest.mark.parametrize("key", sorted(FORCED_PLAN))
def test_every_plan_key_reaches_the_launch_config(key):
    """A choice forced through the switches reaches the PyTorch launcher's config (its custom
    ops carry the choices as one int, which must encode every key)."""
    from mingru._launch import delta_rule as launcher
    from mingru_kernels.launch import delta_rule as meta

    assert set(FORCED_PLAN) == set(meta.PLAN_KEYS)
    choice = {key: FORCED_PLAN[key]}
    if key in ("wu_half", "saved_tm", "state_vs"):  # they need Wk, U stored / reloads
        choice.update(reg_state=True, wu_in_state=False)
    if key == "fused_fwd":  # it runs the output pass beside the walk
        choice.update(reg_state=True, out_pass=True)
    half = key != "split_fp32"
    q = torch.randn(1, 9, 2, 64, device=DEVICE)  # (B, T, H, d_k); only shapes and dtype count
    k, v = torch.randn(2, 1, 9, 2, 2, 64, device=DEVICE)  # (B, T, nh, H, d)
    if half:
        q, k, v = q.bfloat16(), k.bfloat16(), v.bfloat16()
    with switches.forced("delta_rule", **choice):
        cfg = launcher._config(q, k, v, launcher._tuning())
    assert cfg == meta.launch_config(2, 64, 64, half=half, **choice)
    assert cfg != meta.launch_config(2, 64, 64, half=half), key


def test_output_pass_w_plan():
    """The output pass reads a ``W`` stored by the state kernel only where ``Wk`` and ``U``
    are formed in the state kernels; with them stored it forms ``W = U − Wk S`` again, so no
    ``W`` buffer is allocated."""
    from mingru_kernels.launch import delta_rule as meta

    cfg = meta.launch_config(2, 64, 64, half=True, wu_in_state=False, out_pass=True,
                             wu_half=True, saved_tm=False)
    assert cfg["OUT_PASS"] and not cfg["STORE_W"] and not cfg["STORE_TM"]
    shapes = meta.scratch_shapes(8, 4096, cfg)
    assert shapes["W"] == (1,) and shapes["Tm"] == (8, 1)
    assert shapes["Wk"] == (8, 256, 32, 64) and shapes["U"] == (8, 256, 32, 64)
    stored = meta.launch_config(1, 64, 64, half=True, out_pass=True)  # Wk, U in the kernels
    assert stored["STORE_W"] and meta.scratch_shapes(8, 640, stored)["W"] == (8, 20, 32, 64)
    assert not meta.launch_config(2, 64, 64, half=True)["STORE_W"]  # no output pass


def test_half_ops_plan():
    """16-bit product operands: by default in the backward's per-chunk kernel of half inputs
    only; forced on, in every per-chunk kernel; never with float32 inputs."""
    from mingru_kernels.launch import delta_rule as meta

    def flags(cfg):
        return cfg["HALF_OPS"], cfg["overrides"].get("bwd_grads", {}).get("HALF_OPS", False)

    assert flags(meta.launch_config(2, 64, 64, half=True)) == (False, True)
    assert flags(meta.launch_config(2, 64, 64, half=True, half_ops=True)) == (True, True)
    assert flags(meta.launch_config(2, 64, 64, half=True, half_ops=False)) == (False, False)
    assert flags(meta.launch_config(2, 64, 64)) == (False, False)
    assert flags(meta.launch_config(2, 64, 64, tf32=True)) == (False, False)
    for kernel in ("fwd_prep", "fwd_out"):
        assert meta.launch_kwargs(meta.launch_config(2, 64, 64, half=True), kernel,
                                  HAS_DECAY=False)["HALF_OPS"] is False
    for half_ops, want in ((None, True), (True, True), (False, False)):
        grads = meta.launch_kwargs(meta.launch_config(2, 64, 64, half=True, half_ops=half_ops),
                                   "bwd_grads", HAS_DECAY=False)
        assert grads["HALF_OPS"] is want
    with pytest.raises(ValueError, match="half_ops"):
        meta.launch_config(2, 64, 64, half_ops=True)  # float32 inputs
    # The state kernels' 16-bit operands: by default wherever half inputs keep the state in
    # registers; never for float32 or a reloaded state; a forced off wins.
    assert meta.launch_config(2, 64, 64, half=True)["STATE_HALF_OPS"]
    assert meta.launch_config(2, 64, 64, half=True, state_half_ops=True)["STATE_HALF_OPS"]
    assert not meta.launch_config(2, 64, 64, half=True, state_half_ops=False)["STATE_HALF_OPS"]
    assert not meta.launch_config(2, 64, 64, half=True, reg_state=False)["STATE_HALF_OPS"]
    assert not meta.launch_config(2, 64, 64)["STATE_HALF_OPS"]
    assert not meta.launch_config(2, 64, 64, tf32=True)["STATE_HALF_OPS"]
    for kwargs in (dict(half=False), dict(half=True, reg_state=False)):
        with pytest.raises(ValueError, match="state_half_ops"):
            meta.launch_config(2, 64, 64, state_half_ops=True, **kwargs)


def test_few_rows_plan():
    """Where B·H state programs fit the SMs (``few_rows``), half inputs at nh >= 2 take the
    output pass with Wk, U stored in 16 bits, no stored W, the WY inverse in 16 bits and the
    backward in one launch; nothing else changes, and a forced choice wins."""
    from mingru_kernels.launch import delta_rule as meta

    cfg = meta.launch_config(2, 64, 64, half=True, few_rows=True)
    assert cfg == meta.launch_config(2, 64, 64, half=True, wu_in_state=False, out_pass=True,
                                     wu_half=True, fused_bwd=True)
    assert cfg["FUSED_BWD"] and not cfg["FUSED_FWD"]
    assert not meta.launch_config(2, 64, 64, half=True, few_rows=True,
                                  fused_bwd=False)["FUSED_BWD"]  # a forced off wins
    assert cfg["OUT_PASS"] and not cfg["WU_IN_STATE"] and cfg["WU_HALF"] and not cfg["PREP_N"]
    assert not cfg["STORE_W"] and cfg["STORE_TM"] and cfg["SAVED_TM"] and cfg["TM_HALF"]
    # float32 split products (the default at d = 64) at few rows: the output pass only.
    for nh in (1, 2):
        split = meta.launch_config(nh, 64, 64, few_rows=True)
        assert split == meta.launch_config(nh, 64, 64, out_pass=True), nh
        assert split["OUT_PASS"] and not meta.launch_config(nh, 64, 64)["OUT_PASS"]
        assert not meta.launch_config(nh, 64, 64, few_rows=True, out_pass=False)["OUT_PASS"]
    for kwargs in (dict(nh=1, half=True), dict(nh=2, half=False, split_fp32=False),
                   dict(nh=2, half=True, out_pass=False), dict(nh=2, half=True, wu_in_state=True),
                   dict(nh=3, half=True, wu_in_state=True, out_pass=True)):
        nh = kwargs.pop("nh")
        assert meta.launch_config(nh, 64, 64, few_rows=True, **kwargs) == meta.launch_config(
            nh, 64, 64, **kwargs), kwargs
    assert meta.launch_config(2, 64, 64, half=True) != cfg  # many rows: the shipped default
    # A forced micro-chunk of 64 keeps the plain plan (its few-rows backward crashed on a GPU).
    assert meta.launch_config(2, 16, 16, half=True, few_rows=True, micro_chunk=64) == \
        meta.launch_config(2, 16, 16, half=True, micro_chunk=64)
    # A forced wu_half / saved_tm is kept inside the few-rows plan.
    assert meta.launch_config(2, 16, 16, half=True, few_rows=True, saved_tm=True)["SAVED_TM"]
    assert not meta.launch_config(2, 16, 16, half=True, few_rows=True,
                                  wu_half=False)["WU_HALF"]


def test_fused_bwd_plan():
    """The backward in one launch: on in the few-rows plan only, forced anywhere
    the state programs' columns are the per-chunk kernel's; its grid has a program per
    (b, h) and column slice plus one per (b, h) and chunk, its sync words a counter per
    (b, h) plus a flag per (b, h) and chunk."""
    from mingru_kernels.launch import delta_rule as meta

    for kwargs in (dict(half=True), dict(few_rows=True), dict(few_rows=True, tf32=True),
                   dict(half=True, few_rows=True, nh=1),
                   dict(half=True, few_rows=True, out_pass=False)):
        nh = kwargs.pop("nh", 2)
        assert not meta.launch_config(nh, 64, 64, **kwargs)["FUSED_BWD"], kwargs
    assert meta.launch_config(2, 64, 64, half=True, few_rows=True)["FUSED_BWD"]
    # A forced column split leaves the plan unfusable: then the two launches, not an error.
    assert not meta.launch_config(2, 64, 64, half=True, few_rows=True,
                                  state_vs=32)["FUSED_BWD"]
    cfg = meta.launch_config(2, 16, 16, reg_state=True, fused_bwd=True)
    assert cfg["FUSED_BWD"] and meta.grid_fused_bwd(40, 6, cfg) == (6 * (1 + 3),)
    assert meta.sync_size(40, 6, cfg) == 6 * (1 + 3)
    assert meta.launch_kwargs(meta.launch_config(2, 64, 64, half=True, fused_bwd=True),
                              "bwd")["HALF_OPS"] is True  # the per-chunk kernel's operands
    for kwargs in (dict(half=True, reg_state=False), dict(split_fp32=True),
                   dict(half=True, state_vs=32)):
        with pytest.raises(ValueError, match="fused_bwd"):
            meta.launch_config(2, 64, 64, fused_bwd=True, **kwargs)
    # The forward's: off unless forced, and only beside an output pass.
    assert not meta.launch_config(2, 64, 64, half=True, few_rows=True)["FUSED_FWD"]
    fwd = meta.launch_config(2, 64, 64, half=True, out_pass=True, fused_fwd=True)
    assert fwd["FUSED_FWD"] and meta.grid_fused_fwd(40, 6, fwd) == (6 * 1 * (1 + 3),)
    with pytest.raises(ValueError, match="fused_fwd"):
        meta.launch_config(2, 64, 64, half=True, fused_fwd=True)


_BWD_COMPILE = textwrap.dedent(
    """
    import inspect, re
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from mingru_kernels import delta_rule as kernels
    from mingru_kernels.launch import delta_rule as meta

    INT = ("sync_ptr", "cseq_ptr", "cend_ptr", "cu_ptr")
    F32 = ("lg_ptr", "n_ptr", "gl_ptr", "dlg_ptr")

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

    cfg = meta.launch_config(2, 64, 64, half=True, few_rows=True, fused_bwd=True)
    fused = build(kernels.delta_rule_bwd_kernel, cfg, "bwd")
    grads = build(kernels.delta_rule_bwd_grads_kernel, cfg, "bwd_grads")
    state = build(kernels.delta_rule_bwd_state_kernel, cfg, "bwd_state")
    prep = meta.launch_config(2, 64, 64, half=True, few_rows=True, bwd_prep=True)
    build(kernels.delta_rule_bwd_prep_kernel, prep, "bwd_prep")
    build(kernels.delta_rule_bwd_state_kernel, prep, "bwd_state")
    walk = meta.launch_config(2, 64, 64, half=True, few_rows=True, fused_fwd=True)
    fwd = build(kernels.delta_rule_fwd_kernel, walk, "fwd")
    fwd_state = build(kernels.delta_rule_fwd_state_kernel, walk, "fwd_state")
    fwd_out = build(kernels.delta_rule_fwd_out_kernel, walk, "fwd_out")
    assert fwd.metadata.shared <= max(fwd_state.metadata.shared, fwd_out.metadata.shared)
    assert re.search(r"ld\\.global\\.gpu\\.acquire", fwd.asm["ptx"])
    assert re.search(r"red\\.global\\.gpu\\.release\\.add", fwd.asm["ptx"])
    ptx = fused.asm["ptx"]
    # One role's shared memory is reused by the other's, not added to it.
    assert fused.metadata.shared <= max(grads.metadata.shared, state.metadata.shared)
    assert re.search(r"atom\\.global\\.gpu\\.relaxed\\.add", ptx)  # the lane's ticket
    assert re.search(r"red\\.global\\.gpu\\.release\\.add", ptx)  # a chunk published
    assert re.search(r"ld\\.global\\.gpu\\.acquire", ptx)  # waiting on it
    assert "ld.global.cg" in ptx  # dstates read through L2
    print("OK")
    """
)


def test_backward_kernels_compile_for_sm90():
    """Offline for sm_90 (no GPU needed), at bf16, d = 64, nh = 2 with decay and h0: the
    fused backward and forward, the kernels they join and the prep pass compile; a fused
    kernel needs no more shared memory than the larger of its two, and its PTX keeps the
    ticket, the release of each chunk's flag, the acquiring wait and the L2-only reads."""
    assert run_offline_gpu_compile(_BWD_COMPILE).strip().endswith("OK")


def test_bwd_prep_plan():
    """The backward's prep pass: off unless forced (measured slower in total); forced on, in
    any plan, float32 included; its float32 buffer has the layout of the state gradients
    and the buffers are placeholders without it."""
    from mingru_kernels.launch import delta_rule as meta

    for kwargs in (dict(half=True), dict(half=True, few_rows=True), dict(few_rows=True),
                   dict(few_rows=True, tf32=True), dict(half=True, few_rows=True, bwd_prep=False)):
        assert not meta.launch_config(2, 64, 64, **kwargs)["PREP_N"], kwargs
    for kwargs in (dict(), dict(split_fp32=False), dict(half=True, reg_state=False)):
        cfg = meta.launch_config(2, 64, 64, bwd_prep=True, **kwargs)
        assert cfg["PREP_N"] and meta.launch_kwargs(cfg, "bwd_state", HAS_DECAY=True)["PREP_N"]
        shapes = meta.scratch_shapes(8, 640, cfg)
        nc = meta.n_chunks(640, cfg)
        assert shapes["N"] == shapes["states"] and shapes["B"] == (8, nc, 64, 64)
        assert shapes["GL"] == (8, nc)
        prep = meta.launch_kwargs(cfg, "bwd_prep", HAS_DECAY=True)
        assert prep["VS"] == cfg["STATE_VS"] and prep["STATE_HALF_OPS"] == cfg["STATE_HALF_OPS"]
        assert meta.grid_out(640, 8, cfg) == (meta.n_chunks(640, cfg), 8, 64 // cfg["STATE_VS"])
    unused = meta.scratch_shapes(8, 640, meta.launch_config(2, 64, 64))
    assert unused["N"] == unused["B"] == unused["GL"] == (1,)


def test_few_rows_is_read_from_the_device(monkeypatch):
    """The PyTorch launcher passes ``few_rows`` only on a CUDA device with ``B·H`` at most
    its SM count (never in the interpreter on the host)."""
    import torch

    from mingru._launch import delta_rule as launcher

    q = torch.zeros(1)
    assert launcher._few_rows(q, 1) is False
    monkeypatch.setattr(launcher, "sm_count", lambda x: 132)

    class FakeCuda:
        device = torch.device("cuda", 0)

    assert launcher._few_rows(FakeCuda(), 132) is True
    assert launcher._few_rows(FakeCuda(), 133) is False


def test_split_fp32_plan():
    """float32 inputs at 64-wide heads take the split products on the tensor cores (the
    forward and the backward's state kernel in 64-wide slices, the backward's per-chunk kernel
    in 32-wide ones, re-inverting: no WY inverse stored); elsewhere, and asked not to, FMA."""
    from mingru_kernels.launch import delta_rule as meta

    cfg = meta.launch_config(2, 64, 64)
    assert cfg["PREC"] == "tf32x3" and cfg["KS"] == 64 and cfg["REG_STATE"]
    assert not cfg["SAVED_TM"] and not cfg["STORE_TM"] and not cfg["HALF_STATES"]
    grads = meta.launch_kwargs(cfg, "bwd_grads", HAS_DECAY=True)
    assert (grads["KS"], grads["VS"], grads["PREC"]) == (32, 32, "tf32x3")
    assert grads["num_warps"] == 4
    narrow = meta.launch_kwargs(meta.launch_config(1, 16, 16, split_fp32=True), "bwd_grads")
    assert (narrow["KS"], narrow["VS"]) == (16, 16)  # never wider than the head's tile
    assert meta.launch_kwargs(cfg, "bwd_state", HAS_DECAY=True)["PREC"] == "tf32x3"
    assert meta.launch_config(2, 60, 60)["PREC"] == "tf32x3"  # padded to 64
    for kwargs in (dict(), dict(split_fp32=False)):
        d = 16 if not kwargs else 64
        plain = meta.launch_config(2, d, d, **kwargs)
        assert plain["PREC"] == "ieee" and plain["overrides"] == {}
    assert meta.launch_config(2, 64, 64, half=True)["PREC"] == "tf32"
    assert meta.launch_config(2, 64, 64, tf32=True)["PREC"] == "tf32"
    assert meta.launch_config(2, 16, 16, split_fp32=True)["PREC"] == "tf32x3"
    with pytest.raises(ValueError, match="split_fp32"):
        meta.launch_config(2, 64, 64, half=True, split_fp32=True)
    assert meta.launch_config(1, 64, 64, half=True)["WU_IN_STATE"] is True
    assert meta.launch_config(1, 16, 16)["WU_IN_STATE"] is False
    # The backward reads the forward's WY inverse on the tensor cores, inverts again in fp32.
    assert meta.launch_config(1, 64, 64, half=True)["SAVED_TM"] is True
    assert meta.launch_config(1, 64, 64)["SAVED_TM"] is False


def test_half_warps_by_tile_width():
    """16-bit inputs take fewer warps per program on narrow tiles (measured per width; see
    ``_HALF_WARPS``); float32 and other widths keep the defaults; a head of 60 pads to 64."""
    from mingru_kernels.launch import delta_rule as meta

    def warps(d, half=True, **kwargs):
        return meta.launch_config(2, d, d, half=half, **kwargs)["warps"]

    d16, d32, d64 = warps(16), warps(32), warps(64)
    assert (d16["fwd_prep"], d16["bwd_grads"], d16["fwd_out"], d16["bwd"]) == (1, 1, 1, 1)
    assert (d16["fwd_state"], d16["bwd_state"]) == (2, 2)
    assert warps(8) == d16  # padded to a 16-wide tile
    assert {d32[k] for k in ("fwd_prep", "bwd_grads", "fwd_state", "bwd_state", "fwd_out",
                             "bwd")} == {2}
    assert d64["fwd_prep"] == 2 and d64["bwd_grads"] == 4 and d64["bwd"] == 4
    assert warps(60) == d64
    assert set(warps(128).values()) == {4}
    assert warps(16, half=False)["fwd_prep"] == 4  # float32: unchanged
    # The few-rows plan's fused backward at d = 16 runs on the width's warps too.
    fused = meta.launch_config(2, 16, 16, half=True, few_rows=True)
    assert fused["FUSED_BWD"] and meta.launch_kwargs(fused, "bwd")["num_warps"] == 1
