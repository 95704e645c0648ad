"""Triton kernels of the delta rule (op ``"delta_rule"``, DeltaNet / DeltaProduct).

On CPU the kernels run through Triton's interpreter (tests/conftest.py sets
``TRITON_INTERPRET=1``); on a CUDA machine the same tests run on the GPU. Every case checks the
float32 kernel's outputs AND the gradients of all inputs against the float64 per-token loop of
tests/reference.py (forward) and float64 autograd through the eager op (backward), with
NaN-poisoned output and scratch buffers (tests/kernels/conftest.py) so any element a kernel
fails to write shows up as NaN. Chunk lengths and the plans of other classes of inputs are
forced with ``switches.forced("delta_rule", micro_chunk=..., half=..., few_rows=...)``. The
``gpu`` class adds bfloat16, long sequences, head size 64 and ``torch.compile(fullgraph=True)``;
its reference is float64 on the GPU, outputs and gradients of the eager op at 64-token chunks
(:func:`device_reference`).

On a GPU the tests of the interpreter run there too: where they force the half inputs' plans
on float32 inputs, those plans' TF32 products are exact in the interpreter only, so on a GPU
they are held to TF32's accuracy (:func:`float32_tol`).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import mingru
from mingru._eager.delta_rule import delta_rule_eager
from mingru.mixers.delta import DeltaMinGRU
from mingru.scans import _delta_rule
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE, F64
from tests.reference import loop_delta

NAMES = ("q", "k", "v", "beta", "log_gamma", "h0")
# Chunk lengths (micro-steps per chunk) and the plans a float32 call on the host does not take
# by itself: bfloat16/float16 inputs' (``half``: Wk and U formed in the state kernels, 16-bit
# product operands — float32 ones on float32 inputs — and the backward reading the WY
# inverse), and theirs at few rows (``few_rows``: the output pass, Wk and U stored, the
# backward in one launch, whose programs the interpreter runs in order, so nothing waits).
# The plain half plans force many rows: on a GPU the launcher reads few rows from the device.
LAYOUTS = {
    "L16": dict(micro_chunk=16),
    "L32": dict(micro_chunk=32),
    "L64": dict(micro_chunk=64),
    "L16-half": dict(micro_chunk=16, half=True, few_rows=False),
    "L32-half": dict(half=True, few_rows=False),
    "L64-half": dict(micro_chunk=64, half=True),
    "L16-half-few-rows": dict(micro_chunk=16, half=True, few_rows=True),
    "L32-half-few-rows": dict(half=True, few_rows=True),
}


def _launcher():
    from mingru._launch import delta_rule as launcher

    return launcher


def make_inputs(B, T, nh, H, dk, dv, decay=True, h0=True, gaps=False, seed=0):
    """Float64 op inputs on CPU; ``gaps`` puts a ``-1e10`` and a ``-inf`` log-decay in."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, T, H, dk, dtype=F64, generator=g)
    k = F.normalize(torch.randn(B, T, nh, H, dk, dtype=F64, generator=g), dim=-1)
    v = torch.randn(B, T, nh, H, dv, dtype=F64, generator=g)
    beta = 2 * torch.sigmoid(torch.randn(B, T, nh, H, dtype=F64, generator=g))
    lg = -torch.rand(B, T, H, dtype=F64, generator=g) if decay else None
    if gaps:
        lg[0, T // 3] = -1e10
        lg[-1, (2 * T) // 3, -1] = -math.inf
    s0 = torch.randn(B, H, dk, dv, dtype=F64, generator=g) if h0 else None
    return [q, k, v, beta, lg, s0]


def kernel_fwd_bwd(args, dtype, wo, wh, layout=None):
    """Outputs and input gradients of ``Σ o·wo + Σ h_T·wh`` on the Triton path, with the chunk
    ``layout`` forced (``None``: the launcher's own)."""
    xs = [None if a is None else a.to(DEVICE, dtype).requires_grad_(True) for a in args]
    with mingru.use_backend("triton"), switches.forced("delta_rule", **(layout or {})):
        o, h = _delta_rule(*xs, chunk_size=5)
        ((o.double() * wo.to(DEVICE)).sum() + (h.double() * wh.to(DEVICE)).sum()).backward()
    return o, h, [None if x is None else x.grad for x in xs]


def reference(args, wo=None, wh=None, *, chunk_size=4, loop=True):
    """Float64 outputs and float64 autograd gradients through the eager op at ``chunk_size``,
    on the inputs' device; with ``loop`` the outputs are the per-token loop's instead. Returns
    ``(o, h_T, grads, wo, wh)`` with the loss weights ``wo``, ``wh`` (random if not given)."""
    xs = [None if a is None else a.clone().requires_grad_(True) for a in args]
    o, h = delta_rule_eager(*xs, chunk_size=chunk_size)
    wo = torch.randn_like(o) if wo is None else wo
    wh = torch.randn_like(h) if wh is None else wh
    ((o * wo).sum() + (h * wh).sum()).backward()
    o, h = loop_delta(*args) if loop else (o.detach(), h.detach())
    return o, h, [None if x is None else x.grad for x in xs], wo, wh


def device_reference(args):
    """The GPU tests' reference: :func:`reference` on the device, in float64, of the eager op
    at 64-token chunks, outputs included (tests/torch/test_delta.py checks the eager op
    against the per-token loop): at T = 1000 the loop and 4-token chunks on the host take
    a minute a case."""
    return reference([None if a is None else a.to(DEVICE) for a in args], chunk_size=64,
                     loop=False)


TF32_TOL = 1e-2
"""Relative error allowed to float32 inputs multiplied in TF32 on a GPU (bfloat16's, whose
mantissa is 3 bits shorter, is 3e-2)."""


def float32_tol(layout, tol=2e-5):
    """The tolerance of float32 inputs under ``layout``: ``tol``, but where the half plan is
    forced on a GPU TF32's (its products round their operands to 10-bit mantissas; exact in
    the interpreter)."""
    return tol if interpreter_mode() or not (layout or {}).get("half") else TF32_TOL


def check(args, dtype=torch.float32, tol=2e-5, layout=None, ref=None):
    """The kernels' outputs and every input gradient against ``ref`` (:func:`reference` of
    ``args`` if not given), relative errors at most ``tol``."""
    o_ref, h_ref, g_ref, wo, wh = reference(args) if ref is None else ref
    o, h, grads = kernel_fwd_bwd(args, dtype, wo, wh, layout)
    assert o.dtype == dtype and h.dtype == dtype
    assert o.shape == o_ref.shape and h.shape == h_ref.shape
    errs = {"o": rel_err(o, o_ref), "h_T": rel_err(h, h_ref)}
    for name, g, r in zip(NAMES, grads, g_ref, strict=True):
        assert (g is None) == (r is None), name
        if g is not None:
            assert g.dtype == dtype and g.shape == r.shape, name
            errs["d" + name] = rel_err(g, r)
    bad = {n: e for n, e in errs.items() if not e <= tol}  # NaN fails too
    assert not bad, f"relative errors above {tol}: {bad}"


# --- interpreter (CPU) / GPU float32 ----------------------------------------------------------

CASES = {
    # B, T, nh, H, dk, dv, decay, h0, gaps
    "nh2-decay-gaps-h0": (2, 37, 2, 2, 16, 16, True, True, True),
    "nh1-plain": (1, 5, 1, 2, 16, 16, False, False, False),
    "T1": (2, 1, 1, 2, 16, 16, True, True, False),
    "padded-dk8-dv12": (1, 37, 1, 2, 8, 12, True, True, True),
    "slices-dk24-dv40": (1, 9, 2, 2, 24, 40, True, False, False),
    "nh3": (1, 13, 3, 1, 16, 16, False, True, False),
    "nh3-d60": (1, 9, 3, 1, 60, 60, True, True, False),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_forward_and_gradients_match_float64(case):
    B, T, nh, H, dk, dv, decay, h0, gaps = CASES[case]
    check(make_inputs(B, T, nh, H, dk, dv, decay, h0, gaps))


# Plans of wide heads besides float32's split products at 64 (covered by ``nh3-d60``):
# d_k, d_v and the forced choices.
WIDE_HEADS = {
    # float32's FMA slices at a 64-wide key tile (a 32-wide value tile: no split products).
    "fma-dk60-dv20": (60, 20, {}),
    # float32's split products at few rows: the output pass forms W again from Wk, U.
    "split-few-rows": (60, 60, dict(few_rows=True)),
    # The half plan at a 128-wide head: the state reloaded in 64-wide slices, Wk, U stored.
    "half-d100": (100, 100, dict(half=True)),
}


@pytest.mark.interpreter
@pytest.mark.parametrize("case", list(WIDE_HEADS))
def test_wide_head_plans(case):
    dk, dv, layout = WIDE_HEADS[case]
    check(make_inputs(1, 9, 2, 1, dk, dv, True, True, False, seed=2), tol=float32_tol(layout),
          layout=layout)


@pytest.mark.interpreter
@pytest.mark.parametrize("layout", [pytest.param(name, marks=pytest.mark.slow) if name == "L64"
                                    else name for name in LAYOUTS])
def test_every_chunk_layout(layout):
    """Internal chunk lengths 16/32/64 micro-steps, and the half inputs' plans. (``L64``: on a
    GPU its float32 FMA kernels, spilling registers, take minutes to compile.)"""
    layout = LAYOUTS[layout]
    check(make_inputs(1, 40, 2, 2, 16, 16, True, True, True, seed=1), tol=float32_tol(layout),
          layout=layout)


@pytest.mark.interpreter
def test_matches_eager_backend_and_ignores_chunk_size():
    args = [None if a is None else a.float().to(DEVICE) for a in make_inputs(2, 11, 2, 2, 16, 16)]
    with mingru.use_backend("eager"):
        o_e, h_e = _delta_rule(*args, chunk_size=3)
    with mingru.use_backend("triton"):
        o1, h1 = _delta_rule(*args, chunk_size=1)
        o2, h2 = _delta_rule(*args, chunk_size=64)
    assert torch.equal(o1, o2) and torch.equal(h1, h2)  # chunk_size is a hint for eager only
    assert rel_err(o1, o_e) <= 1e-5 and rel_err(h1, h_e) <= 1e-5


@pytest.mark.interpreter
def test_huge_gap_is_an_exact_reset():
    args = [a.float().to(DEVICE) for a in make_inputs(1, 12, 2, 2, 16, 16, h0=True)]
    args[4][:, 5] = -1e10
    o, h = _launcher().run(*args)
    tail = [a[:, 5:] for a in args[:5]]
    o_tail, h_tail = _launcher().run(*tail, None)  # γ_5 = e^-1e10 wipes the state: fresh start
    assert torch.isfinite(o).all() and torch.isfinite(h).all()
    assert rel_err(o[:, 5:], o_tail) <= 1e-6 and rel_err(h, h_tail) <= 1e-6


@pytest.mark.interpreter
def test_delta_mixer_end_to_end_under_triton():
    torch.manual_seed(0)
    m = DeltaMinGRU(6, 8, n_heads=2, nh=2, chunk_size=3, decay="learnable").to(DEVICE)
    x = torch.randn(2, 11, 6, device=DEVICE)
    dt = torch.rand(2, 11, device=DEVICE) * 2
    h0 = torch.randn(2, 1, m.state_size, device=DEVICE)
    results = {}
    for mode in ("eager", "triton"):
        m.zero_grad()
        xx = x.clone().requires_grad_(True)
        with mingru.use_backend(mode):
            y, s = m(xx, h_0=h0, delta_t=dt, return_state=True)
        (y.square().sum() + s.sum()).backward()
        results[mode] = [y, s, xx.grad] + [p.grad.clone() for p in m.parameters()]
    for a, b in zip(results["triton"], results["eager"], strict=True):
        assert rel_err(a, b) <= 1e-4


@pytest.mark.interpreter
def test_unsupported_and_bad_calls():
    launcher = _launcher()
    args = [a.to(DEVICE) for a in make_inputs(1, 3, 1, 2, 16, 16)]  # float64: no kernel
    assert "dtype" in launcher.unsupported_reason(*args)
    with mingru.use_backend("triton"), pytest.raises(RuntimeError, match="dtype"):
        _delta_rule(*args, chunk_size=64)
    f32 = [a.float() for a in args]
    assert launcher.unsupported_reason(*f32) is None and launcher.prefer_over_eager(*f32) in (
        True,
        False,
    )
    # The one validated entry (mingru.scans._delta_rule) checks every call before dispatch.
    with mingru.use_backend("triton"):
        with pytest.raises(ValueError, match="beta"):
            _delta_rule(*f32[:3], f32[3][..., :1], *f32[4:])
        with pytest.raises(ValueError, match="h0"):
            _delta_rule(*f32[:5], f32[5][:, :, :3])
        with pytest.raises(ValueError, match="log_gamma"):
            _delta_rule(*f32[:4], f32[4][:, :2], f32[5])
        with pytest.raises(ValueError, match="chunk_size"):
            _delta_rule(*f32, chunk_size=0)
        with pytest.raises(TypeError, match="q"):
            _delta_rule(f32[0].long(), *f32[1:])


@pytest.mark.interpreter
def test_custom_op_registration():
    """Schema, fake (meta) implementation, autograd registration and AOT tracing."""
    _launcher()  # registers the custom ops (whatever ran before in this process)
    args = [a.float().to(DEVICE) for a in make_inputs(1, 5, 2, 2, 16, 16)]
    args = [a.requires_grad_(True) for a in args]
    result = torch.library.opcheck(
        torch.ops.mingru.delta_rule_fwd.default,
        (*args, 0),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                    "test_aot_dispatch_dynamic"),
    )
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.interpreter
def test_mixer_compiles_fullgraph_onto_the_kernel():
    torch.manual_seed(0)
    m = DeltaMinGRU(8, 16, n_heads=2, nh=2, decay="learnable").to(DEVICE)
    x = torch.randn(2, 9, 8, device=DEVICE)
    dt = torch.rand(2, 9, device=DEVICE)
    graphs = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    with mingru.use_backend("triton"):
        y = torch.compile(m, fullgraph=True, backend=recording_backend)(x, delta_t=dt)
        y.square().sum().backward()
    assert len(graphs) == 1 and "mingru.delta_rule_fwd" in graphs[0]
    with mingru.use_backend("eager"):
        y_e = m(x, delta_t=dt)
    assert rel_err(y, y_e) <= 1e-5


@pytest.mark.interpreter
def test_allow_tf32_is_threaded_to_the_kernels_precision():
    """float32 products are exact unless the caller asks for TF32 (forward and backward
    alike, with forced layouts kept); half inputs always take the tensor cores."""
    from mingru._launch import delta_rule as launcher
    from mingru_kernels.launch import delta_rule as meta

    args = [a.float().to(DEVICE) for a in make_inputs(1, 9, 2, 2, 16, 16)]
    q, k, v = args[:3]
    assert launcher._config(q, k, v, launcher._tuning())["PREC"] == meta.DOT_PRECISION
    assert launcher._config(q, k, v, launcher._tuning(True))["PREC"] == "tf32"
    assert launcher._config(q.bfloat16(), k, v, launcher._tuning())["PREC"] == "tf32"
    with switches.forced("delta_rule", micro_chunk=64):
        cfg = launcher._config(q, k, v, launcher._tuning(True))
    assert (cfg["LP"], cfg["PREC"]) == (64, "tf32")
    # The interpreter multiplies exactly either way: there the flag must not change the
    # result; on a GPU it may by TF32's rounding only.
    tol = 1e-6 if interpreter_mode() else TF32_TOL
    xs = [a.clone().requires_grad_(True) for a in args]
    with mingru.use_backend("triton"):
        o, h = _delta_rule(*xs, allow_tf32=True)
        o_ref, h_ref = _delta_rule(*args)
    (o.sum() + h.sum()).backward()
    assert rel_err(o, o_ref) <= tol and rel_err(h, h_ref) <= tol
    assert all(torch.isfinite(x.grad).all() for x in xs)


@pytest.mark.interpreter
def test_tf32_plan_matches_float64():
    """TF32 products run the tensor-core tiling (32-wide slices of a 32-wide head, the state
    from registers, the backward reading the WY inverse; exact float32 in the interpreter,
    TF32's accuracy on a GPU)."""
    from mingru_kernels.launch import delta_rule as meta

    cfg = meta.launch_config(2, 32, 32, tf32=True)
    assert (cfg["KS"], cfg["VS"], cfg["REG_STATE"], cfg["SAVED_TM"]) == (32, 32, True, True)
    args = make_inputs(2, 37, 2, 2, 32, 32, True, True, True, seed=11)
    o_ref, h_ref, g_ref, wo, wh = reference(args)
    xs = [None if a is None else a.to(DEVICE, torch.float32).requires_grad_(True) for a in args]
    with mingru.use_backend("triton"):
        o, h = _delta_rule(*xs, allow_tf32=True)
        ((o.double() * wo.to(DEVICE)).sum() + (h.double() * wh.to(DEVICE)).sum()).backward()
    tol = 2e-5 if interpreter_mode() else TF32_TOL
    assert rel_err(o, o_ref) <= tol and rel_err(h, h_ref) <= tol
    for name, x, r in zip(NAMES, xs, g_ref, strict=True):
        if x is not None:
            assert rel_err(x.grad, r) <= tol, name


@pytest.mark.interpreter
@pytest.mark.parametrize("dk", [16, 24], ids=["registers", "reloaded"])
def test_packed_sequences_on_each_state_path(dk):
    """Packed sequences (resets, per-sequence states, an empty sequence) on the state kernels'
    register-fed product and on the store-and-reload one (a 32-wide head of exact float32
    products), against the eager op in float64: outputs, final states, every gradient."""
    q, k, v, beta, lg, _ = make_inputs(1, 23, 2, 2, dk, dk, True, True, False, seed=4)
    h0 = torch.randn(3, 2, dk, dk, dtype=F64, generator=torch.Generator().manual_seed(5))
    args = [q, k, v, beta, lg, h0]
    cu = torch.tensor([0, 7, 7, 23])
    ref = [a.clone().requires_grad_(True) for a in args]
    with mingru.use_backend("eager"):
        o_ref, h_ref = _delta_rule(*ref, cu_seqlens=cu)
    wo, wh = torch.randn_like(o_ref), torch.randn_like(h_ref)
    ((o_ref * wo).sum() + (h_ref * wh).sum()).backward()
    xs = [a.to(DEVICE, torch.float32).requires_grad_(True) for a in args]
    with mingru.use_backend("triton"):
        o, h = _delta_rule(*xs, cu_seqlens=cu.to(DEVICE))
        ((o.double() * wo.to(DEVICE)).sum() + (h.double() * wh.to(DEVICE)).sum()).backward()
    assert rel_err(o, o_ref) <= 1e-5 and rel_err(h, h_ref) <= 1e-5
    for name, x, r in zip(NAMES, xs, ref, strict=True):
        assert rel_err(x.grad, r.grad) <= 1e-4, name


@pytest.mark.interpreter
def test_allow_tf32_must_be_a_bool():
    args = [a.float().to(DEVICE) for a in make_inputs(1, 3, 1, 2, 16, 16)]
    with pytest.raises(TypeError, match="allow_tf32 must be a bool"):
        _delta_rule(*args, allow_tf32=1)
    with pytest.raises(TypeError, match="allow_tf32 must be a bool"):
        DeltaMinGRU(4, 8, n_heads=2, allow_tf32="yes")
    m = DeltaMinGRU(4, 8, n_heads=2, allow_tf32=True)
    assert "allow_tf32=True" in repr(m)


# --- GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
    @pytest.mark.parametrize("T", [1, 63, 8192])
    @pytest.mark.parametrize("d", [16, 64])
    def test_gradients_vs_float64(self, dtype, T, d):
        """The default plans from one token to a long sequence (T = 1000, long and not a
        whole number of chunks, runs in the head-size and float32-products tests below)."""
        nh = 2 if d == 64 else 1
        args = make_inputs(2, T, nh, 2, d, d, True, True, T > 3, seed=T)
        if dtype != torch.float32:  # compare against the rounded inputs the kernel sees
            args = [None if a is None else a.to(dtype).double() for a in args]
        check(args, dtype=dtype, tol=1e-4 if dtype == torch.float32 else 3e-2,
              ref=device_reference(args))

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                             ids=["fp32", "bf16", "fp16"])
    @pytest.mark.parametrize(("nh", "d"), [(3, 60), (1, 128), (2, 128)])
    def test_head_sizes_60_and_128(self, dtype, nh, d):
        """A padded head (60 in 64-wide tiles) and the widest served (128), in every dtype,
        with decay, gaps and ``h_0``; half inputs against float64 on the rounded inputs."""
        args = make_inputs(1, 1000, nh, 2, d, d, True, True, True, seed=d + nh)
        if dtype != torch.float32:
            args = [None if a is None else a.to(dtype).double() for a in args]
        check(args, dtype=dtype, tol=1e-4 if dtype == torch.float32 else 3e-2,
              ref=device_reference(args))

    @pytest.mark.parametrize("allow_tf32", [False, True], ids=["ieee", "tf32"])
    def test_allow_tf32_precision_on_the_gpu(self, allow_tf32):
        """Exact float32 products by default (errors of a few 1e-7 relative); with
        ``allow_tf32`` the kernels use TF32 (errors up to about 1e-3, never NaN)."""
        args = [None if a is None else a.to(DEVICE)
                for a in make_inputs(2, 1000, 2, 2, 64, 64, True, True, True, seed=5)]
        o_ref, h_ref = delta_rule_eager(*args, chunk_size=64)  # float64
        f32 = [None if a is None else a.float() for a in args]
        with mingru.use_backend("triton"):
            o, h = _delta_rule(*f32, allow_tf32=allow_tf32)
        err = max(rel_err(o, o_ref), rel_err(h, h_ref))
        assert err <= (5e-3 if allow_tf32 else 1e-5), err

    @pytest.mark.parametrize("layout", [{}, dict(few_rows=False), dict(few_rows=True),
                                        dict(micro_chunk=64), dict(micro_chunk=16)],
                             ids=["default", "many-rows", "few-rows", "L64", "L16-few-rows"])
    def test_half_plans_head64(self, layout):
        """The plans of bf16 inputs at d = 64, nh = 2 (B·H = 4: few rows unless forced off;
        a 64-micro-step chunk keeps the plain plan)."""
        args = make_inputs(2, 700, 2, 2, 64, 64, True, True, True, seed=7)
        args = [None if a is None else a.to(torch.bfloat16).double() for a in args]
        check(args, dtype=torch.bfloat16, tol=3e-2, layout=layout, ref=device_reference(args))

    @pytest.mark.parametrize(("dv", "layout"), [(64, dict(few_rows=False)), (64, {}), (32, {})],
                             ids=["split", "split-few-rows", "fma"])
    def test_float32_products_head64(self, dv, layout):
        """float32 at d_k = 64 with the split tensor-core products (many rows, and few rows'
        output pass) and with FMA products (a 32-wide value tile): outputs and every gradient
        at float32 accuracy."""
        args = make_inputs(2, 1000, 2, 2, 64, dv, True, True, True, seed=11)
        check(args, tol=2e-5, layout=layout, ref=device_reference(args))

    @pytest.mark.parametrize("layout", ["L16", "L32", pytest.param("L64", marks=pytest.mark.slow)])
    def test_chunk_layouts_head64(self, layout):
        args = make_inputs(2, 300, 2, 2, 64, 64, True, True, True)
        check(args, tol=1e-4, layout=LAYOUTS[layout], ref=device_reference(args))

    def test_compile_fullgraph_mixer(self):
        torch.manual_seed(0)
        m = DeltaMinGRU(32, 64, n_heads=4, nh=2, decay="learnable").to(DEVICE)
        x = torch.randn(3, 200, 32, device=DEVICE)
        dt = torch.rand(3, 200, device=DEVICE)
        with mingru.use_backend("triton"):
            y = torch.compile(m, fullgraph=True)(x, delta_t=dt)
            y.square().sum().backward()
        with mingru.use_backend("eager"):
            y_e = m(x, delta_t=dt)
        assert rel_err(y, y_e) <= 1e-4
