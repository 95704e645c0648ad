"""Triton kernels of the delta rule (op ``"delta_rule"``, DeltaNet / DeltaProduct).

On CPU the kernels run through Triton's interpreter (tests/conftest.py sets
``TRITON_INTERPRET=1``); on a CUDA machine the same tests run on the GPU. Every case checks the
float32 kernel's outputs AND the gradients of all inputs against the float64 per-token loop of
tests/reference.py (forward) and float64 autograd through the eager op (backward), with
NaN-poisoned output and scratch buffers (tests/kernels/conftest.py) so any element a kernel
fails to write shows up as NaN. Chunk layouts are forced with
``switches.forced("delta_rule", micro_chunk=..., blocked=...)``. The ``gpu`` class adds
bfloat16, long sequences, head size 64 and ``torch.compile(fullgraph=True)``.
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
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE, F64
from tests.reference import loop_delta

NAMES = ("q", "k", "v", "beta", "log_gamma", "h0")
# Chunk layouts: micro-steps per chunk (16/32/64) and the triangular inverse (rows or blocked).
LAYOUTS = {
    "L16": dict(micro_chunk=16),
    "L32-rows": dict(micro_chunk=32, blocked=False),
    "L32-blocked": dict(micro_chunk=32, blocked=True),
    "L64-blocked": dict(micro_chunk=64, blocked=True),
    "L64-rows": dict(micro_chunk=64, blocked=False),
    # The state kernels' product from registers (one slice per head: d_k ≤ 16 in float32).
    "L32-reg-state": dict(micro_chunk=32, reg_state=True),
    # ... and Wk, U formed in the state kernels from the saved WY inverse.
    "L32-wu-in-state": dict(micro_chunk=32, reg_state=True, wu_in_state=True),
    "L16-wu-in-state": dict(micro_chunk=16, reg_state=True, wu_in_state=True),
    # The output formed by its own kernel, parallel over chunks, from the stored states and W.
    "L32-out-pass": dict(micro_chunk=32, reg_state=True, out_pass=True),
    "L16-wu-out-pass": dict(micro_chunk=16, reg_state=True, wu_in_state=True, out_pass=True),
    # The few-rows plan of half inputs (W formed again in the output pass from stored Wk, U,
    # the backward reading the stored WY inverse), in float32: only its 16-bit Wk, U and
    # WY-inverse storage needs half inputs.
    "L32-few-rows": dict(micro_chunk=32, reg_state=True, wu_in_state=False, out_pass=True,
                         saved_tm=True, bwd_prep=True),
    # The backward's state-independent chunk terms from the parallel bwd_prep pass, with the
    # state reloaded (16-wide slices) and with Wk formed in the state kernels.
    "L16-bwd-prep-reload": dict(micro_chunk=16, reg_state=False, bwd_prep=True),
    "L32-bwd-prep-wu-in-state": dict(micro_chunk=32, reg_state=True, wu_in_state=True,
                                     bwd_prep=True),
    # The backward's state walk and per-chunk gradients in one launch (ticket counters and
    # per-chunk flags; the interpreter runs the programs in order, so nothing waits there).
    "L32-fused-bwd": dict(micro_chunk=32, reg_state=True, fused_bwd=True),
    "L16-fused-bwd-few-rows": dict(micro_chunk=16, reg_state=True, wu_in_state=False,
                                   out_pass=True, saved_tm=True, fused_bwd=True),
    # ... and the forward's walk and output pass in one launch, W stored or formed again.
    "L32-fused-fwd": dict(micro_chunk=32, reg_state=True, out_pass=True, fused_fwd=True),
    "L16-fused-both-few-rows": dict(micro_chunk=16, reg_state=True, wu_in_state=False,
                                    out_pass=True, fused_fwd=True, fused_bwd=True),
    # The backward reading the forward's WY inverse instead of inverting again, and the
    # forward not storing it at all.
    "L32-saved-tm": dict(micro_chunk=32, saved_tm=True),
    "L16-no-tm": dict(micro_chunk=16, saved_tm=False),
    # float32's split products: 64-wide tensor-core tiling forward, 32-wide slices in the
    # backward's per-chunk kernel (the interpreter multiplies exactly: this checks the tiling).
    "L32-split": dict(micro_chunk=32, split_fp32=True),
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


def reference(args, wo=None, wh=None):
    """Float64 loop outputs and float64 autograd gradients through the eager op."""
    o_ref, h_ref = loop_delta(*args)
    wo = torch.randn_like(o_ref) if wo is None else wo
    wh = torch.randn_like(h_ref) if wh is None else wh
    xs = [None if a is None else a.clone().requires_grad_(True) for a in args]
    o, h = delta_rule_eager(*xs, chunk_size=4)
    ((o * wo).sum() + (h * wh).sum()).backward()
    return o_ref, h_ref, [None if x is None else x.grad for x in xs], wo, wh


def check(args, dtype=torch.float32, tol=2e-5, layout=None):
    o_ref, h_ref, g_ref, wo, wh = reference(args)
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


@pytest.mark.interpreter
def test_head64_fma_plan():
    """d = 60 (64-wide tiles) with float32's split products turned off: the FMA slices in
    every kernel (the default there is the split plan, covered by ``nh3-d60``)."""
    check(make_inputs(1, 9, 2, 1, 60, 60, True, True, False, seed=2),
          layout=dict(split_fp32=False))


@pytest.mark.interpreter
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_every_chunk_layout(layout):
    """Internal chunk lengths 16/32/64 micro-steps and both triangular inverses."""
    check(make_inputs(1, 40, 2, 2, 16, 16, True, True, True, seed=1), layout=LAYOUTS[layout])


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
    with switches.forced("delta_rule", micro_chunk=64, blocked=False):
        cfg = launcher._config(q, k, v, launcher._tuning(True))
    assert (cfg["LP"], cfg["BLOCKED"], cfg["PREC"]) == (64, False, "tf32")
    # The interpreter multiplies exactly either way: the flag must not change the result.
    xs = [a.clone().requires_grad_(True) for a in args]
    with mingru.use_backend("triton"):
        o, h = _delta_rule(*xs, allow_tf32=True)
        o_ref, h_ref = _delta_rule(*args)
    (o.sum() + h.sum()).backward()
    assert rel_err(o, o_ref) <= 1e-6 and rel_err(h, h_ref) <= 1e-6
    assert all(torch.isfinite(x.grad).all() for x in xs)


@pytest.mark.interpreter
@pytest.mark.parametrize("state_vs", [0, 16, 32], ids=["auto", "16", "32"])
def test_state_columns_per_program(state_vs):
    """The serial state kernels' columns per program (``STATE_VS``): the chunk kernels' ``VS``
    by default, or narrower, forced, against float64; TF32 products run the tensor-core tiling
    (exact float32 in the interpreter)."""
    from mingru_kernels.launch import delta_rule as meta

    cfg = meta.launch_config(2, 32, 32, tf32=True)
    assert (cfg["VS"], cfg["STATE_VS"], cfg["REG_STATE"]) == (32, 32, True)
    assert meta.launch_config(2, 32, 32, tf32=True, state_vs=16)["STATE_VS"] == 16
    with pytest.raises(ValueError, match="state_vs must be"):
        meta.launch_config(2, 32, 32, tf32=True, state_vs=64)
    args = make_inputs(2, 37, 2, 2, 32, 32, True, True, True, seed=11)
    o_ref, h_ref, g_ref, wo, wh = reference(args)
    xs = [None if a is None else a.to(DEVICE, torch.float32).requires_grad_(True) for a in args]
    forced = {"state_vs": state_vs} if state_vs else {}
    with mingru.use_backend("triton"), switches.forced("delta_rule", **forced):
        o, h = _delta_rule(*xs, allow_tf32=True)
        ((o.double() * wo.to(DEVICE)).sum() + (h.double() * wh.to(DEVICE)).sum()).backward()
    assert rel_err(o, o_ref) <= 2e-5 and rel_err(h, h_ref) <= 2e-5
    for name, x, r in zip(NAMES, xs, g_ref, strict=True):
        if x is not None:
            assert rel_err(x.grad, r) <= 2e-5, name


def test_reg_state_with_packed_sequences_and_its_limits():
    """The register-fed state product (and Wk, U formed in the state kernels) against the
    store-and-reload one: packed sequences (resets, per-sequence states); the refusals where a
    head spans several exact-float32 slices."""
    from mingru_kernels.launch import delta_rule as meta

    torch.manual_seed(3)
    B, T, nh, H, d = 1, 23, 2, 2, 16
    q, k, v, beta, lg, _ = make_inputs(B, T, nh, H, d, d, True, True, True, seed=4)
    args = [x.float().to(DEVICE) for x in (q, k, v, beta, lg)]
    cu = torch.tensor([0, 7, 7, 23], device=DEVICE)
    h0 = torch.randn(3, H, d, d, device=DEVICE)
    with mingru.use_backend("triton"):
        with switches.forced("delta_rule", reg_state=False):
            o_ref, h_ref = _delta_rule(*args, h0, cu_seqlens=cu)
        for forced in (dict(reg_state=True), dict(reg_state=True, wu_in_state=True),
                       dict(reg_state=True, out_pass=True)):
            with switches.forced("delta_rule", **forced):
                o, h = _delta_rule(*args, h0, cu_seqlens=cu)
            assert rel_err(o, o_ref) <= 1e-6 and rel_err(h, h_ref) <= 1e-6, forced
    with pytest.raises(ValueError, match="wu_in_state needs reg_state"):
        meta.launch_config(1, 64, 64, wu_in_state=True, split_fp32=False)
    with pytest.raises(ValueError, match="out_pass needs reg_state"):
        meta.launch_config(1, 64, 64, out_pass=True, split_fp32=False)
    # The output pass only when asked for (measured slower at d = 64).
    assert meta.launch_config(1, 64, 64, half=True)["OUT_PASS"] is False
    assert meta.launch_config(1, 64, 64, half=True)["WU_HALF"] is False
    assert meta.launch_config(1, 64, 64, half=True, wu_in_state=False,
                              wu_half=True)["WU_HALF"] is True
    with pytest.raises(ValueError, match="wu_half"):
        meta.launch_config(1, 16, 16, wu_half=True)  # float32 inputs
    with pytest.raises(ValueError, match="wu_half"):
        meta.launch_config(1, 64, 64, half=True, wu_half=True)  # Wk, U formed in the kernels
    # The WY inverse is stored only where something reads it.
    assert meta.launch_config(1, 64, 64, half=True)["STORE_TM"] is True
    assert meta.launch_config(1, 64, 64, split_fp32=False)["STORE_TM"] is True
    assert meta.launch_config(1, 16, 16, wu_in_state=True, reg_state=True,
                              saved_tm=False)["STORE_TM"] is True  # the state kernels read it
    cfg = meta.launch_config(1, 64, 64, half=True, wu_in_state=False, saved_tm=False)
    assert not cfg["SAVED_TM"] and not cfg["STORE_TM"] and not cfg["TM_HALF"]
    assert meta.scratch_shapes(2, 40, cfg)["Tm"] == (2, 1)
    # It is kept in 16 bits only where its one reader rounds it to 16 bits anyway: the
    # backward's per-chunk kernel with 16-bit operands, and not the state kernels.
    assert meta.launch_config(2, 64, 64, half=True, wu_in_state=False)["TM_HALF"] is True
    for kwargs in (dict(half=True), dict(half=True, wu_in_state=False, half_ops=False),
                   dict(wu_in_state=False), dict(tf32=True, wu_in_state=False)):
        assert meta.launch_config(2, 64, 64, **kwargs)["TM_HALF"] is False, kwargs
    assert meta.launch_config(1, 64, 64, half=True, out_pass=True)["OUT_PASS"] is True
    with pytest.raises(ValueError, match="reg_state needs one slice per head"):
        meta.launch_config(1, 64, 64, reg_state=True, split_fp32=False)
    assert meta.launch_config(1, 64, 64, half=True, reg_state=True)["REG_STATE"] is True
    # Registers by default where one slice is the head; 16-bit states only then, with half
    # inputs (a reloaded state must stay float32: it is the carried state).
    assert meta.launch_config(1, 64, 64, half=True)["REG_STATE"] is True
    assert meta.launch_config(1, 64, 64, half=True)["HALF_STATES"] is True
    assert meta.launch_config(1, 64, 64, half=True, reg_state=False)["HALF_STATES"] is False
    assert meta.launch_config(1, 64, 64, split_fp32=False)["REG_STATE"] is False
    assert meta.launch_config(1, 16, 16)["REG_STATE"] is True
    assert meta.launch_config(1, 16, 16)["HALF_STATES"] is False


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
    @pytest.mark.parametrize("T", [1, 63, 1000, 8192])
    @pytest.mark.parametrize("d", [16, 64])
    def test_gradients_vs_float64(self, dtype, T, d):
        nh = 2 if d == 64 else 1
        args = make_inputs(2, T, nh, 2, d, d, True, True, T > 3, seed=T)
        if dtype != torch.float32:  # compare against the rounded inputs the kernel sees
            args = [None if a is None else a.to(dtype).double() for a in args]
        args = [None if a is None else a.to(DEVICE) for a in args]
        o_ref, h_ref = delta_rule_eager(*args, chunk_size=64)  # float64 on the GPU
        wo, wh = torch.randn_like(o_ref), torch.randn_like(h_ref)
        xs = [None if a is None else a.clone().requires_grad_(True) for a in args]
        o64, h64 = delta_rule_eager(*xs, chunk_size=64)
        ((o64 * wo).sum() + (h64 * wh).sum()).backward()
        o, h, grads = kernel_fwd_bwd(args, dtype, wo, wh)
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        assert rel_err(o, o_ref) <= tol and rel_err(h, h_ref) <= tol
        for name, g, x in zip(NAMES, grads, xs, strict=True):
            if g is not None:
                assert rel_err(g, x.grad) <= tol, name

    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                             ids=["fp32", "bf16", "fp16"])
    @pytest.mark.parametrize(("nh", "d"), [(3, 60), (1, 128), (2, 128)])
    def test_head_sizes_60_and_128(self, dtype, nh, d):
        """A padded head (60 in 64-wide tiles) and the widest served (128), in every dtype,
        with decay, gaps and ``h_0``; half inputs against float64 on the rounded inputs."""
        args = make_inputs(1, 1000, nh, 2, d, d, True, True, True, seed=d + nh)
        if dtype != torch.float32:
            args = [None if a is None else a.to(dtype).double() for a in args]
        check(args, dtype=dtype, tol=1e-4 if dtype == torch.float32 else 3e-2)

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

    @pytest.mark.parametrize("layout", [dict(reg_state=False),
                                        dict(reg_state=True, wu_in_state=False),
                                        dict(reg_state=True, wu_in_state=True, state_vs=16),
                                        dict(reg_state=True, wu_in_state=True, out_pass=True),
                                        dict(reg_state=True, wu_in_state=False, out_pass=True),
                                        dict(reg_state=True, wu_in_state=False, out_pass=True,
                                             wu_half=True),
                                        dict(micro_chunk=64, reg_state=True, wu_in_state=False,
                                             out_pass=True, wu_half=True, saved_tm=False),
                                        dict(half_ops=True),
                                        dict(half_ops=True, wu_in_state=False, out_pass=True,
                                             wu_half=True, saved_tm=False),
                                        dict(half_ops=False),
                                        dict(half_ops=True, state_half_ops=True),
                                        dict(state_half_ops=True, wu_in_state=False,
                                             out_pass=True, wu_half=True, saved_tm=False),
                                        dict(state_half_ops=True, wu_in_state=False,
                                             out_pass=True, wu_half=True, saved_tm=False,
                                             bwd_prep=True),
                                        dict(bwd_prep=True),
                                        dict(reg_state=False, bwd_prep=True),
                                        dict(fused_bwd=False), dict(fused_bwd=True),
                                        dict(wu_in_state=False, out_pass=True, wu_half=True,
                                             fused_fwd=True, fused_bwd=True),
                                        {}],
                             ids=["reload", "registers-stored-wu", "wu-16-columns",
                                  "wu-out-pass", "stored-wu-out-pass", "half-wu-out-pass",
                                  "L64-half-wu-out-pass-no-tm", "half-ops",
                                  "half-ops-few-rows", "tf32-ops", "all-half-ops",
                                  "state-half-ops-few-rows", "few-rows-bwd-prep", "bwd-prep",
                                  "reload-bwd-prep", "two-launch-bwd", "fused-bwd",
                                  "fused-both-few-rows",
                                  "default"])
    def test_reg_state_bf16_head64(self, layout):
        """The ways of feeding the state kernels' product, with bf16 at d = 64 (one slice)."""
        args = make_inputs(2, 700, 2, 2, 64, 64, True, True, True, seed=7)
        args = [None if a is None else a.to(torch.bfloat16).double() for a in args]
        check(args, dtype=torch.bfloat16, tol=3e-2, layout=layout)

    @pytest.mark.parametrize("split", [True, False], ids=["split", "fma"])
    def test_float32_products_head64(self, split):
        """float32 at d = 64 with the split tensor-core products (the default) and with FMA
        products everywhere: outputs and every gradient at float32 accuracy."""
        check(make_inputs(2, 1000, 2, 2, 64, 64, True, True, True, seed=11), tol=2e-5,
              layout=dict(split_fp32=split))

    @pytest.mark.parametrize("layout", ["L16", "L32-rows", "L64-blocked"])
    def test_chunk_layouts_head64(self, layout):
        check(make_inputs(2, 300, 2, 2, 64, 64, True, True, True), tol=1e-4,
              layout=LAYOUTS[layout])

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
