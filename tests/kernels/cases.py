"""Inputs, forced launch plans and autograd helpers shared by the kernel tests (PyTorch)."""

from __future__ import annotations

import contextlib
import math

import torch
import torch.nn.functional as F

import mingru
from mingru.cells import mingru_cell, signed_mingru_cell
from mingru_kernels.launch import switches

F64 = torch.float64
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def grads(fn, inputs, cotangents):
    """Outputs and input gradients of ``fn`` for the given output cotangents (``None``: that
    output is unused)."""
    leaves = [x.detach().clone().requires_grad_() for x in inputs]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    pairs = [(o, c) for o, c in zip(outs, cotangents, strict=True) if c is not None]
    torch.autograd.backward([o for o, _ in pairs], [c for _, c in pairs])
    return [o.detach() for o in outs], [x.grad for x in leaves]


def eager_f64(fn, inputs, cotangents):
    """:func:`grads` of the eager op in float64 (the GPU tests' reference)."""
    with mingru.use_backend("eager"):
        return grads(fn, [x.to(F64) for x in inputs], [c.to(F64) for c in cotangents])


def weighted_grads(outputs, weights, inputs):
    """Gradients of ``Σ_i Σ outputs_i · weights_i`` with respect to ``inputs``."""
    loss = sum((o * w).sum() for o, w in zip(outputs, weights, strict=True))
    return torch.autograd.grad(loss, inputs)


def leaves(*xs):
    """Fresh leaf copies that require grad (``None`` stays ``None``)."""
    return [None if x is None else x.detach().clone().requires_grad_() for x in xs]


# --- the elementwise scans (linear_scan, parallel_scan_log) ------------------------------------


@contextlib.contextmanager
def triton_plan(*ops, **plan):
    """The Triton backend, with the launch plan of each of ``ops`` forced to ``plan``."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(mingru.use_backend("triton"))
        for op in ops:
            stack.enter_context(switches.forced(op, **plan))
        yield


# Plans forced in the interpreter tests. "walk" uses several tiles along T and several
# D-blocks; "chunked" (linear_scan: its kernels have no look-back) several tiles per chunk;
# "many-chunks" more chunks than one carry tile (BLOCK_N = 16), so the carry pass loops too.
PLANS = {
    "walk": dict(strategy="walk", block_t=8, block_d=8),
    "chunked": dict(strategy="chunked", block_t=4, block_d=16, chunk_len=8),
    "many-chunks": dict(strategy="chunked", block_t=2, block_d=4, chunk_len=2),
}
# The single-pass look-back strategy (ops whose kernels have it: linear_recurrence,
# parallel_scan_log, the cells):
# one tile per chunk; "lookback-walks" publishes an inclusive state at every third chunk only,
# so programs compose aggregates on their way back (the interpreter runs programs in order,
# and would otherwise always find the nearest predecessor finished).
LOOKBACK_PLANS = {
    "lookback": dict(strategy="lookback", block_t=4, block_d=16),
    "lookback-walks": dict(strategy="lookback", block_t=2, block_d=4, lookback_stride=3),
}
SHAPES = [(1, 1, 3), (2, 5, 17), (2, 37, 3), (1, 37, 17)]
# Whole tiles (T and D multiples of the plan's block sizes): no padding row or column.
WHOLE_TILE_CASES = [("walk", (2, 32, 16)), ("chunked", (1, 24, 32))]
CASES = ([(p, s) for p in ("walk", "chunked") for s in SHAPES] + [("many-chunks", (1, 37, 3))]
         + WHOLE_TILE_CASES)
WALK_CASES = [(p, s) for p, s in CASES if p == "walk"]
LOOKBACK_CASES = [("lookback", (2, 37, 17)), ("lookback", (1, 1, 3)),
                  ("lookback-walks", (2, 37, 3)), ("lookback", (2, 16, 32))]
PLANS.update(LOOKBACK_PLANS)


def case_id(case):
    plan, (B, T, D) = case
    return f"{plan}-B{B}T{T}D{D}"


def linear_inputs(B, T, D, dtype=torch.float32, device=DEVICE):
    a = torch.tanh(torch.randn(B, T, D, dtype=F64) * 1.5)  # signed, some |a| close to 1
    b = torch.randn(B, T, D, dtype=F64)
    return a.to(dtype).to(device), b.to(dtype).to(device)


def log_inputs(B, T, D, h0="finite", hard=False, dtype=torch.float32, device=DEVICE):
    """``log a ≤ 0`` like MinGRU's gates; ``hard`` makes products underflow within a few steps."""
    scale = 20.0 if hard else 2.0
    log_a = -F.softplus(torch.randn(B, T, D, dtype=F64) * scale)
    log_values = torch.randn(B, T + 1, D, dtype=F64) * (4.0 if hard else 1.0)
    if h0 == "-inf":
        log_values[:, 0] = float("-inf")
    return log_a.to(dtype).to(device), log_values.to(dtype).to(device)


# --- the block scans (matrix_affine_scan, givens_recurrence) -----------------------------------


# --- the fused minGRU cells -----------------------------------------------------------------------

CELLS = {"log": (False, False), "signed": (True, False), "coupled": (True, True)}
"""Cell name → ``(signed, coupled)``."""


def cell_inputs(cell, B, T, D, decay, scale=2.0, dtype=torch.float32):
    """``(k, h_0, log γ)`` of a cell: ``decay`` None, ``"B,T,1"`` or ``"B,T,D"``."""
    signed, _ = CELLS[cell]
    k = torch.randn(B, T, (3 if signed else 2) * D, dtype=F64) * scale
    h0 = torch.rand(B, D, dtype=F64) + 0.1  # the MinGRU cell's states are positive
    lg = None if decay is None else -torch.rand(B, T, 1 if decay == "B,T,1" else D, dtype=F64)
    cast = lambda x: None if x is None else x.to(dtype).to(DEVICE)  # noqa: E731
    return cast(k), cast(h0), cast(lg)


def call_cell(cell, k, h0, lg):
    """``(h, h_T)`` of the public cell ``cell``."""
    signed, coupled = CELLS[cell]
    if signed:
        return signed_mingru_cell(k, h0, lg, coupled=coupled, return_final_state=True)
    return mingru_cell(k, h0, lg, return_final_state=True)


def affine_inputs(B, T, n, k, v, dtype=torch.float32, contraction=0.9):
    A = (contraction / math.sqrt(k)) * torch.randn(B, T, n, k, k, dtype=F64)
    Bm = torch.randn(B, T, n, k, v, dtype=F64)
    return A.to(DEVICE, dtype), Bm.to(DEVICE, dtype)



def delta_inputs_oracle(p: torch.Tensor, H: int, nh: int, dk: int, dv: int, eps: float = 1e-6):
    """``(q, k̂, v, β)`` of the delta-rule mixer's projection ``p (..., W)``, written out by hand
    (the split, ``k / max(sqrt(Σ k²), eps)``, ``2 / (1 + e^{−z})``), in ``p``'s dtype."""
    lead = p.shape[:-1]
    q = p[..., :H * dk].reshape(*lead, H, dk)
    k = p[..., H * dk:(1 + nh) * H * dk].reshape(*lead, nh, H, dk)
    v = p[..., (1 + nh) * H * dk:(1 + nh) * H * dk + nh * H * dv].reshape(*lead, nh, H, dv)
    z = p[..., -nh * H:].reshape(*lead, nh, H)
    norm = (k * k).sum(-1, keepdim=True).sqrt()
    return q, k / torch.maximum(norm, torch.full_like(norm, eps)), v, 2 / (1 + torch.exp(-z))


def givens_inputs(B, T, n, k, R, with_scale, with_gamma, dtype=torch.float32):
    theta = 2.0 * torch.randn(B, T, n, R, k // 2, dtype=F64)
    b = torch.randn(B, T, n, k, dtype=F64)
    h0 = torch.randn(B, n, k, dtype=F64)
    scale = torch.tanh(torch.randn(B, T, n, k, dtype=F64)) if with_scale else None
    log_gamma = torch.log(0.5 + 0.45 * torch.rand(B, T, n, dtype=F64)) if with_gamma else None
    return tuple(None if x is None else x.to(DEVICE, dtype) for x in (theta, b, h0, scale, log_gamma))


@contextlib.contextmanager
def segments(seg_len):
    """Force the segment length of both block-scan launchers (``None``: their own plans)."""
    if seg_len is None:
        yield
        return
    with switches.forced("matrix_affine_scan", seg_len=seg_len), switches.forced(
        "givens_recurrence", seg_len=seg_len
    ):
        yield


# --- the tile loop's software pipelining (loop_stages) ------------------------------------------

# Long enough for many tiles per program, wide enough for several D-blocks and programs.
PIPELINE_SHAPE = (2, 5000, 300)


def assert_pipelining_changes_nothing(op, fn, inputs, cotangents, stages=(2, 3)):
    """The walk with its tile loop software-pipelined (``loop_stages`` > 1: the next tile's
    loads in flight while this one is scanned) gives bit-for-bit the outputs and gradients of
    the unpipelined walk: only when loads are issued changes, never the arithmetic."""
    with triton_plan(op, strategy="walk", block_t=32, block_d=32, num_warps=4, loop_stages=1):
        want_out, want_grads = grads(fn, inputs, cotangents)
    for ls in stages:
        with triton_plan(op, strategy="walk", block_t=32, block_d=32, num_warps=4,
                         loop_stages=ls):
            got_out, got_grads = grads(fn, inputs, cotangents)
        for got, want in zip((*got_out, *got_grads), (*want_out, *want_grads), strict=True):
            if want is None:
                assert got is None
                continue
            assert torch.isfinite(got).all(), f"loop_stages={ls}: non-finite values"
            diff = (got.double() - want.double()).abs().max().item()
            scale = want.double().abs().max().item()
            assert torch.equal(got, want), (
                f"loop_stages={ls}: differs from the unpipelined walk by {diff:.3g} (max |x| "
                f"{scale:.3g}) at {(got != want).sum().item()} of {got.numel()} values")


# Wide enough that the planner walks (B·D / block_d ≥ 2 programs per SM on an H200) and long
# enough for its measured long-walk tile (more than WALK_MAX_TILES default tiles).
LONG_WALK_SHAPE = (8, 2048, 1536)


def assert_long_walk_plan_matches_float64(tiles, fn, inputs, cotangents, tol=1e-5):
    """The production plan at :data:`LONG_WALK_SHAPE` (the long walk's measured tile ``tiles``,
    its pipelined loop and, for the cells and the log scan, the fast special functions)
    against the eager op in float64: outputs and every gradient."""
    from mingru_kernels.launch._elementwise import plan
    from tests.helpers import rel_err

    B, T, D = LONG_WALK_SHAPE
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    cfg = plan(B, T, D, n_sm=n_sm, **tiles)
    assert cfg["strategy"] == "walk" and tuple(cfg[k] for k in ("block_t", "block_d")) == \
        tuple(tiles["walk_tile"][:2])
    with mingru.use_backend("triton"):
        outs, gs = grads(fn, inputs, cotangents)
    ref_outs, ref_gs = eager_f64(fn, inputs, cotangents)
    for x, r in zip(outs + gs, ref_outs + ref_gs, strict=True):
        assert torch.isfinite(x).all() and rel_err(x, r) <= tol


def assert_mixer_triton_matches_eager(m, x, dt, tol: float = 1e-5) -> None:
    """``m(x, delta_t=dt, return_state=True)`` on the Triton path equals its eager path:
    states, the returned last state (the states' last row) and every parameter gradient of a
    weighted sum of the states."""
    from tests.helpers import rel_err

    def run(mode):
        m.zero_grad()
        with mingru.use_backend(mode):
            h, last = m(x, delta_t=dt, return_state=True)
        (h * torch.linspace(-1, 1, h.numel(), device=h.device).view(h.shape)).sum().backward()
        return h.detach(), last.detach(), [p.grad.clone() for p in m.parameters()]

    h, last, grads = run("triton")
    he, last_e, grads_e = run("eager")
    assert rel_err(h, he) < tol and torch.equal(last, h[:, -1:])
    assert rel_err(last, last_e) < tol
    for got, want in zip(grads, grads_e, strict=True):
        assert rel_err(got, want) < tol


def assert_cell_matches_loop_and_eager(cell, eager, loop, ins, seg, shape, tol: float = 1e-5):
    """``cell(*ins)`` (a cell, or the Givens recurrence) on the Triton path (segments forced to ``seg``) against ``eager(*ins)``
    and the float64 ``loop(*ins64)``: its shape ``shape`` and float32 dtype, the output and
    the gradients of every present input for one random output cotangent."""
    from tests.helpers import rel_err

    ins = leaves(*ins)
    used = [x for x in ins if x is not None]
    with segments(seg), mingru.use_backend("triton"):
        h = cell(*ins)
        assert h.shape == shape and h.dtype == torch.float32
        w = torch.randn_like(h)
        grads = weighted_grads((h,), (w,), used)
    he = eager(*ins)
    grads_e = weighted_grads((he,), (w,), used)
    ins64 = leaves(*(None if x is None else x.double() for x in ins))
    hr = loop(*ins64)
    grads_r = weighted_grads((hr,), (w.double(),), [x for x in ins64 if x is not None])
    assert rel_err(h, hr) < tol and rel_err(h, he) < tol
    for got, want_e, want_r in zip(grads, grads_e, grads_r, strict=True):
        assert rel_err(got, want_r) < tol
        assert rel_err(got, want_e) < tol


def assert_backward_tiles(monkeypatch, fwd_bwd, tiles_for):
    """``fwd_bwd(dtype)`` (a forward on the Triton path, then its backward) plans the backward
    with ``tiles_for(element size)``, for bf16 and float32 inputs: a spy on the PyTorch
    launchers' ``make_plan`` records the tiles each plan was asked for."""
    from mingru._launch import _elementwise

    asked = []
    make_plan = _elementwise.make_plan

    def spy(op, x, tiles=None, shape=None):
        asked.append((x.dtype, dict(tiles or {})))
        return make_plan(op, x, tiles, shape)

    monkeypatch.setattr(_elementwise, "make_plan", spy)
    for dtype in (torch.bfloat16, torch.float32):
        asked.clear()
        with mingru.use_backend("triton"):
            fwd_bwd(dtype)
        want = tiles_for(torch.empty((), dtype=dtype).element_size())
        assert (dtype, want) in asked, asked
