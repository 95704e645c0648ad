"""The launch planner the elementwise scans share (:mod:`mingru_kernels.launch._elementwise`):
strategy by program count (never by T), the look-back where an op has it (and the chunked
strategy only where it has not), the launchers' plan cache and routing, the tile loop's
pipelining depth, and the long and narrow walks' tuned tiles. The kernels themselves are
tested per op (``test_linear_scan.py``, ``test_parallel_scan_log.py``, ...).

On CPU the kernels run through Triton's interpreter; GPU cases run the same plans compiled.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru_kernels._seam import interpreter_mode
from tests.helpers import rel_err
from tests.kernels.cases import (
    DEVICE,
    F64,
    LONG_WALK_SHAPE,
    PIPELINE_SHAPE,
    PLANS,
    assert_backward_tiles,
    assert_long_walk_plan_matches_float64,
    assert_pipelining_changes_nothing,
    eager_f64,
    grads,
    linear_inputs,
    log_inputs,
    triton_plan,
)

pytestmark = pytest.mark.usefixtures("fast_interpreter")

# --- strategy, plan cache, routing -------------------------------------------------------------


def test_plan_chooses_by_program_count_and_never_by_t():
    from mingru_kernels.launch import linear_scan, parallel_scan_log
    from mingru_kernels.launch._elementwise import plan

    # one planner for both elementwise ops
    assert linear_scan.plan is plan and parallel_scan_log.plan is plan
    assert plan(16, 1025, 64)["strategy"] == "chunked"
    assert plan(16, 1024, 64)["strategy"] == "walk"  # 16 tiles: host cost of chunking dominates
    assert plan(16, 16384, 128)["strategy"] == "chunked"
    assert plan(1, 65536, 500)["strategy"] == "chunked"
    assert plan(8, 65536, 1536)["strategy"] == "walk"
    assert plan(16, 32, 64)["strategy"] == "walk"  # one tile: nothing to split
    compiled = {
        tuple(plan(2, T, 500)[k] for k in ("block_t", "block_d", "num_warps"))
        for T in (17, 63, 64, 65, 1000, 65536, 100_003)
    }
    assert len(compiled) == 1  # T never reaches a compile-time constant...
    short = {plan(2, T, 500)["block_t"] for T in (1, 2, 15, 16)}
    assert short == {16}  # ...but for one short tile (a decode step's T = 1)
    for T in (1025, 5000, 100_003):
        cfg = plan(1, T, 64)
        assert cfg["chunk_len"] % cfg["block_t"] == 0
        assert (cfg["n_chunks"] - 1) * cfg["chunk_len"] < T <= cfg["n_chunks"] * cfg["chunk_len"]
        # small batch, long T fills the GPU (as far as one tile per chunk allows)
        tiles = -(-T // cfg["block_t"])
        assert cfg["n_chunks"] * cfg["n_dblk"] >= min(132, tiles * cfg["n_dblk"])
    with pytest.raises(ValueError, match="chunk_len"):
        plan(1, 100, 8, strategy="chunked", block_t=8, chunk_len=12)
    with pytest.raises(ValueError, match="strategy"):
        plan(1, 100, 8, strategy="serial")


def test_lookback_replaces_chunked_only_for_ops_that_have_it():
    from mingru_kernels.launch import linear_recurrence, mingru_cell
    from mingru_kernels.launch._elementwise import plan

    tiles = linear_recurrence.TILES
    cfg = plan(16, 16384, 128, **tiles)
    bt, bd, nw = tiles["lookback_tile"]
    assert cfg["strategy"] == "lookback" and (cfg["block_t"], cfg["block_d"]) == (bt, bd)
    assert cfg["chunk_len"] == bt and cfg["n_chunks"] == -(-16384 // bt)
    assert cfg["num_warps"] == nw and cfg["lookback_stride"] == 1
    assert plan(8, 65536, 1536, **tiles)["strategy"] == "walk"  # the walk fills the GPU
    # The look-back splits T from LOOKBACK_MIN_TILES default tiles on; the chunked strategy
    # (three launches) only past WALK_MAX_TILES.
    assert plan(16, 1024, 64, **tiles)["strategy"] == "lookback"
    assert plan(16, 256, 64, **tiles)["strategy"] == "walk"  # short: nothing to split
    assert plan(16, 1024, 64)["strategy"] == "walk"
    assert plan(16, 16384, 128, **mingru_cell.TILES[False])["strategy"] == "lookback"
    assert plan(16, 16384, 128)["strategy"] == "chunked"  # an op without look-back kernels
    # Ops with look-back kernels have no chunked mode: forcing it is refused.
    for op_tiles in (tiles, linear_recurrence.BWD_TILES, mingru_cell.TILES[True]):
        with pytest.raises(ValueError, match="chunked"):
            plan(16, 16384, 128, strategy="chunked", **op_tiles)
    with pytest.raises(ValueError, match="LOOKBACK"):
        plan(1, 100, 8, strategy="lookback")
    with pytest.raises(ValueError, match="chunk_len"):
        plan(1, 100, 8, strategy="lookback", chunk_len=128, **tiles)
    with pytest.raises(ValueError, match="lookback_stride"):
        plan(1, 100, 8, strategy="lookback", lookback_stride=-1, **tiles)


def test_launcher_plan_is_cached_per_shape_and_override():
    from mingru._launch import _elementwise
    from mingru_kernels.launch import switches

    x = torch.zeros(2, 100, 8)
    walk = _elementwise.make_plan("linear_scan", x)
    assert walk["strategy"] == "walk" and _elementwise.make_plan("linear_scan", x) is walk  # cached
    with switches.forced("linear_scan", strategy="chunked", block_t=16, chunk_len=32):
        chunked = _elementwise.make_plan("linear_scan", x)
        assert _elementwise.make_plan("parallel_scan_log", x)["strategy"] == "walk"  # forced for one op
    assert chunked["strategy"] == "chunked" and chunked["chunk_len"] == 32
    assert _elementwise.make_plan("linear_scan", x) is walk
    with pytest.raises(TypeError):
        walk["strategy"] = "chunked"  # shared between calls: read-only
    assert len(_elementwise.scratch(3, 2, chunked, 8, x.device)) == 3


def test_unsupported_reasons():
    from mingru._launch import linear_scan as linear_launcher
    from mingru._launch import parallel_scan_log as log_launcher

    x = torch.zeros(1, 2, 3, dtype=F64)
    assert "float64" in linear_launcher.unsupported_reason(x, x)
    assert "float64" in log_launcher.unsupported_reason(x, torch.zeros(1, 3, 3, dtype=F64))
    y = torch.zeros(1, 2, 3, device=DEVICE)
    if DEVICE == "cuda" or interpreter_mode():
        assert linear_launcher.unsupported_reason(y, y) is None
    with mingru.use_backend("triton"), pytest.raises(RuntimeError, match="float64"):
        mingru.linear_scan(x.to(DEVICE), x.to(DEVICE))


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["linear_scan", "parallel_scan_log"])
def test_gpu_pipelined_tile_loop(op):
    B, T, D = PIPELINE_SHAPE
    if op == "linear_scan":
        inputs = linear_inputs(B, T, D, device="cuda")
        cot = [torch.randn_like(inputs[0]) for _ in range(2)]
    else:
        inputs = log_inputs(B, T, D, device="cuda")
        cot = [torch.randn_like(inputs[0])]
    assert_pipelining_changes_nothing(op, getattr(mingru, op), inputs, cot)


@pytest.mark.interpreter
def test_loop_stages_is_a_plan_choice():
    from mingru_kernels.launch._elementwise import launch_kwargs, plan

    assert plan(8, 65536, 1536)["loop_stages"] >= 1
    assert launch_kwargs(plan(2, 100, 8, loop_stages=3))["LOOP_STAGES"] == 3
    # a measured 4-tuple tile carries its depth; a forced choice wins over it
    long = dict(walk_tile=(32, 64, 2, 3))
    assert plan(8, 65536, 1536, **long)["loop_stages"] == 3
    assert plan(8, 65536, 1536, loop_stages=2, **long)["loop_stages"] == 2
    assert plan(8, 65536, 1536, walk_tile=(32, 64, 2))["loop_stages"] == 1
    with pytest.raises(ValueError, match="loop_stages"):
        plan(2, 100, 8, loop_stages=-1)
    # the interpreter ignores pipelining: a forced depth runs and gives the same result
    a, b = linear_inputs(2, 37, 5)
    cot = [torch.randn_like(a) for _ in range(2)]
    with triton_plan("linear_scan", **PLANS["walk"]):
        want = grads(mingru.linear_scan, (a, b), cot)
    with triton_plan("linear_scan", **PLANS["walk"], loop_stages=3):
        got = grads(mingru.linear_scan, (a, b), cot)
    for x, r in zip(got[0] + got[1], want[0] + want[1], strict=True):
        assert torch.equal(x, r)


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["parallel_scan_log", "linear_recurrence"])
def test_gpu_long_walk_plan(op):
    from mingru_kernels.launch import linear_recurrence, parallel_scan_log

    B, T, D = LONG_WALK_SHAPE
    if op == "parallel_scan_log":
        inputs, tiles = log_inputs(B, T, D, device="cuda"), parallel_scan_log.TILES
    else:
        inputs, tiles = linear_inputs(B, T, D, device="cuda"), linear_recurrence.TILES
    cot = [torch.randn_like(inputs[0])]
    assert_long_walk_plan_matches_float64(tiles, getattr(mingru, op), inputs, cot)


def test_narrow_walk_where_its_tile_alone_fills_the_gpu():
    """An op's ``narrow_walk_tile`` walks instead of splitting T when the default tile's walk
    has too few programs, T is long, and the narrow tile gives enough programs per SM."""
    from mingru_kernels.launch import parallel_scan_log
    from mingru_kernels.launch._elementwise import NARROW_WALK_MIN_PROGRAMS_PER_SM, plan

    tiles = parallel_scan_log.TILES
    bt, bd, nw, ls = tiles["narrow_walk_tile"]
    cfg = plan(16, 16384, 128, n_sm=132, **tiles)  # 16 * 128 / 8 = 256 programs: 1.94 per SM
    assert cfg["strategy"] == "walk" and cfg["n_chunks"] == 1
    assert (cfg["block_t"], cfg["block_d"], cfg["num_warps"], cfg["loop_stages"]) == (
        bt, bd, nw, ls)
    assert 16 * 128 // bd >= NARROW_WALK_MIN_PROGRAMS_PER_SM * 132
    # Too few narrow programs: the look-back; short T: the default walk; a wide batch: the
    # default tile's own long walk; a forced strategy is never replaced.
    assert plan(8, 16384, 128, n_sm=132, **tiles)["strategy"] == "lookback"
    short = plan(16, 1024, 128, n_sm=132, **tiles)
    assert short["strategy"] == "lookback" and short["block_d"] == tiles["lookback_tile"][1]
    wide = plan(8, 65536, 1536, n_sm=132, **tiles)
    assert wide["strategy"] == "walk" and wide["block_d"] == tiles["walk_tile"][1]
    assert plan(16, 16384, 128, n_sm=132, strategy="lookback", **tiles)["strategy"] == "lookback"
    forced = plan(16, 16384, 128, n_sm=132, strategy="walk", **tiles)
    assert forced["block_d"] == tiles["walk_tile"][1]
    # Only ops that name a narrow tile walk narrow; the backward's tiles name none.
    assert plan(16, 16384, 128, n_sm=132, **parallel_scan_log.BWD_TILES)["strategy"] == (
        "lookback")


@pytest.mark.gpu
def test_gpu_narrow_walk_plan():
    """The log scan's forward on its production narrow-walk plan (B16 T2048 D128: 256
    programs of 8 channels), backward on its look-back, against the eager op in float64."""
    from mingru_kernels.launch import parallel_scan_log
    from mingru_kernels.launch._elementwise import plan

    B, T, D = 16, 2048, 128
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = plan(B, T, D, n_sm=n_sm, **parallel_scan_log.TILES)
    if cfg["strategy"] != "walk" or cfg["block_d"] != parallel_scan_log.TILES[
            "narrow_walk_tile"][1]:
        pytest.skip(f"{n_sm} SMs: the planner does not walk narrow at B{B} T{T} D{D}")
    la, lv = log_inputs(B, T, D, device="cuda")
    cot = (torch.randn_like(la),)
    with mingru.use_backend("triton"):
        outs, gs = grads(mingru.parallel_scan_log, (la, lv), cot)
    ref_outs, ref_gs = eager_f64(mingru.parallel_scan_log, (la, lv), cot)
    for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
        assert torch.isfinite(x).all() and rel_err(x, r) <= 1e-5


@pytest.mark.interpreter
def test_narrow_walk_tile_matches_float64():
    """The log scan on its narrow-walk tile (256 steps × 8 channels, pipelined): two tiles,
    the second partial, and a channel block cut by D, against the float64 eager op."""
    from mingru_kernels.launch import parallel_scan_log

    bt, bd, nw, ls = parallel_scan_log.TILES["narrow_walk_tile"]
    la, lv = log_inputs(1, 300, 11)
    cot = (torch.randn_like(la),)
    with triton_plan("parallel_scan_log", strategy="walk", block_t=bt, block_d=bd,
                     num_warps=nw, loop_stages=ls):
        outs, gs = grads(mingru.parallel_scan_log, (la, lv), cot)
    ref_outs, ref_gs = eager_f64(mingru.parallel_scan_log, (la, lv), cot)
    for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
        assert rel_err(x, r) < 2e-6


@pytest.mark.parametrize("signed", [False, True])
def test_cell_backward_tiles_by_element_size(signed):
    """The cells' backward plans its look-back on one-warp tiles for 16-bit pre-activations
    and on the four-warp tile in float32 (tuned: ``docs/explanation/tuning.md``), in both
    frontends' launchers, which ask ``bwd_tiles`` with the pre-activations' element size."""
    from mingru_kernels.launch import mingru_cell
    from mingru_kernels.launch._elementwise import plan

    for itemsize, want in ((2, mingru_cell.BWD_TILES_16BIT[signed]["lookback_tile"]),
                           (4, mingru_cell.BWD_TILES["lookback_tile"])):
        cfg = plan(16, 4096, 256, n_sm=132, **mingru_cell.bwd_tiles(signed, itemsize))
        assert cfg["strategy"] == "lookback"
        assert (cfg["block_t"], cfg["block_d"], cfg["num_warps"]) == want
    assert mingru_cell.BWD_TILES_16BIT[signed]["lookback_tile"][2] == 1
    assert mingru_cell.BWD_TILES["lookback_tile"] == (32, 32, 4)
    # Everything but the look-back tile is the float32 plan's.
    assert {k: v for k, v in mingru_cell.BWD_TILES_16BIT[signed].items() if k != "lookback_tile"} \
        == {k: v for k, v in mingru_cell.BWD_TILES.items() if k != "lookback_tile"}


def _scan_args(op, dtype):
    g = torch.Generator().manual_seed(3)
    if op == "parallel_scan_log":
        xs = (-torch.rand(1, 80, 8, generator=g), torch.randn(1, 81, 8, generator=g))
    else:
        xs = (torch.rand(1, 80, 8, generator=g), torch.randn(1, 80, 8, generator=g))
    return tuple(x.to(DEVICE, dtype).requires_grad_(True) for x in xs)


@pytest.mark.parametrize("op", ["linear_recurrence", "parallel_scan_log"])
def test_scan_backward_tiles_by_element_size(op, monkeypatch):
    """The single-state scans' backward plans its look-back on the one-warp 16 × 128 tile for
    16-bit inputs and on the float32 tile otherwise: in the planner and in the PyTorch
    launcher (a spy on its plan), which asks ``bwd_tiles`` with the inputs' element size."""
    import importlib

    from mingru_kernels.launch._elementwise import plan

    meta = importlib.import_module(f"mingru_kernels.launch.{op}")
    assert meta.bwd_tiles(2)["lookback_tile"] == (16, 128, 1)
    assert meta.bwd_tiles(4) is meta.BWD_TILES
    cfg = plan(16, 16384, 128, n_sm=132, **meta.bwd_tiles(2))
    assert (cfg["strategy"], cfg["block_t"], cfg["block_d"], cfg["num_warps"]) == (
        "lookback", 16, 128, 1)

    def fwd_bwd(dtype):
        getattr(mingru, op)(*_scan_args(op, dtype)).float().sum().backward()

    assert_backward_tiles(monkeypatch, fwd_bwd, meta.bwd_tiles)
