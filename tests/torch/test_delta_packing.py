"""Packed sequences (``cu_seqlens=``) for the delta rule and DeltaMinGRU (PyTorch): one call on
sequences laid end to end in one row equals running each sequence alone — outputs,
per-sequence final states and the gradients of q, k, v, β, log γ, h0 (the op) or of the
inputs, states and parameters (the mixer) — with an empty and a length-1 sequence among them,
nh ∈ {1, 2}, decay on and off, h0 given and not. The eager path runs in float64 with
``chunk_size = 4`` (sequences straddle chunks); the kernel path (Triton's interpreter on CPU,
float32) with a 16-micro-step chunk and a sequence longer than two chunks. Bad offsets, a batch
of two rows and a wrongly shaped h0 are ValueErrors naming the argument. Tiny shapes. The
``gpu`` class adds 23 sequences of head size 64 (fp32 and bf16) and ``torch.compile``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mingru
from mingru.mixers.delta import DeltaMinGRU
from mingru.scans import _delta_rule
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE
from tests.reference import loop_delta

F64 = torch.float64
H, DK, DV = 2, 3, 4
# Eager: chunk_size 4, so sequences 0 and 3 straddle chunks. Kernel: 16 micro-steps per chunk
# (C = 16 tokens for nh = 1, 8 for nh = 2), so the last sequence spans two or three chunks.
CU_EAGER = (0, 5, 5, 6, 13)
CU_KERNEL = (0, 5, 5, 6, 24)
CASES = [(1, False, False), (1, True, True), (2, True, False), (2, False, True)]
CASE_IDS = [f"nh{nh}-{'decay' if d else 'nodecay'}-{'h0' if h else 'noh0'}" for nh, d, h in CASES]
# The half inputs' plans forced on float32 inputs multiply in TF32: exactly in the interpreter,
# on a GPU to TF32's accuracy (10-bit mantissas), this relative error.
TF32_TOL = 1e-2


def _inputs(cu, nh, decay, has_h0, seed=0):
    """Float64 op inputs for the packed row ``cu`` (``B = 1``), h0 ``(N, H, dk, dv)``."""
    g = torch.Generator().manual_seed(seed)
    T, N = cu[-1], len(cu) - 1
    q = torch.randn(1, T, H, DK, dtype=F64, generator=g)
    k = F.normalize(torch.randn(1, T, nh, H, DK, dtype=F64, generator=g), dim=-1)
    v = torch.randn(1, T, nh, H, DV, dtype=F64, generator=g)
    beta = 2 * torch.sigmoid(torch.randn(1, T, nh, H, dtype=F64, generator=g))
    lg = -torch.rand(1, T, H, dtype=F64, generator=g) if decay else None
    h0 = torch.randn(N, H, DK, DV, dtype=F64, generator=g) if has_h0 else None
    return [q, k, v, beta, lg, h0]


def _alone(cu, args):
    """Each sequence on its own through the eager op: concatenated ``o``, stacked ``h_T``
    (an empty sequence's is its h0, zeros without)."""
    q, k, v, beta, lg, h0 = args
    outs, finals = [], []
    with mingru.use_backend("eager"):
        for n in range(len(cu) - 1):
            s, e = cu[n], cu[n + 1]
            if s == e:
                finals.append(h0[n] if h0 is not None else q.new_zeros(H, DK, DV))
                continue
            o, h = _delta_rule(q[:, s:e], k[:, s:e], v[:, s:e], beta[:, s:e],
                               None if lg is None else lg[:, s:e],
                               None if h0 is None else h0[n:n + 1], chunk_size=4)
            outs.append(o)
            finals.append(h[0])
    return torch.cat(outs, 1), torch.stack(finals)


def _check(cu, args, path, **plan):
    """Packed (``path``: eager in float64, or the kernels in float32 on DEVICE with a
    16-micro-step chunk and the forced ``plan`` choices) against each sequence alone (eager,
    float64): outputs, final states and the gradients of every given input."""
    dtype, tol_o, tol_g = (F64, 1e-12, 1e-10) if path == "eager" else (torch.float32, 1e-5, 1e-4)
    if plan.get("half") and not interpreter_mode():
        tol_o = tol_g = TF32_TOL
    ref_leaves = [None if a is None else a.clone().requires_grad_(True) for a in args]
    o_ref, h_ref = _alone(cu, ref_leaves)
    wo, wh = torch.randn_like(o_ref), torch.randn_like(h_ref)
    ((o_ref * wo).sum() + (h_ref * wh).sum()).backward()

    leaves = [None if a is None else a.to(DEVICE, dtype).requires_grad_(True) for a in args]
    cu_t = torch.tensor(cu, device=DEVICE)
    with mingru.use_backend(path), switches.forced("delta_rule", micro_chunk=16, **plan):
        o, h = _delta_rule(*leaves, chunk_size=4, cu_seqlens=cu_t)
        ((o.double() * wo.to(DEVICE)).sum() + (h.double() * wh.to(DEVICE)).sum()).backward()
    assert o.shape == (1, cu[-1], H, DV) and h.shape == (len(cu) - 1, H, DK, DV)
    assert rel_err(o, o_ref) <= tol_o, "o"
    assert rel_err(h, h_ref) <= tol_o, "h_T"
    names = ("q", "k", "v", "beta", "log_gamma", "h0")
    for name, x, r in zip(names, leaves, ref_leaves, strict=True):
        if x is not None:
            assert rel_err(x.grad, r.grad) <= tol_g, name
    # The empty sequence (index 1) keeps its initial state, exactly.
    want = leaves[5][1] if leaves[5] is not None else torch.zeros_like(h[1])
    torch.testing.assert_close(h[1], want, rtol=0, atol=0)


@pytest.mark.parametrize("nh,decay,has_h0", CASES, ids=CASE_IDS)
def test_op_eager_equals_each_sequence_alone(nh, decay, has_h0):
    args = _inputs(CU_EAGER, nh, decay, has_h0)
    _check(CU_EAGER, args, "eager")


def test_op_eager_matches_the_float64_loop():
    """The packed eager op against the per-token loop of tests/reference.py, per sequence."""
    q, k, v, beta, lg, h0 = _inputs(CU_EAGER, 2, True, True, seed=1)
    with mingru.use_backend("eager"):
        o, h = _delta_rule(q, k, v, beta, lg, h0, chunk_size=4,
                           cu_seqlens=torch.tensor(CU_EAGER, dtype=torch.int32))
    for n in range(len(CU_EAGER) - 1):
        s, e = CU_EAGER[n], CU_EAGER[n + 1]
        if e == s:
            assert torch.equal(h[n], h0[n])
            continue
        o_n, h_n = loop_delta(q[:, s:e], k[:, s:e], v[:, s:e], beta[:, s:e], lg[:, s:e],
                              h0[n:n + 1])
        assert rel_err(h[n:n + 1], h_n) <= 1e-12
        assert rel_err(o[:, s:e], o_n) <= 1e-12


@pytest.mark.interpreter
@pytest.mark.parametrize("nh,decay,has_h0", CASES, ids=CASE_IDS)
def test_op_kernel_equals_each_sequence_alone(nh, decay, has_h0):
    args = _inputs(CU_KERNEL, nh, decay, has_h0)
    _check(CU_KERNEL, args, "triton")


@pytest.mark.interpreter
@pytest.mark.parametrize("plan", [dict(half=True, few_rows=False), dict(half=True, few_rows=True)],
                         ids=["half", "half-few-rows"])
def test_op_kernel_plans_equal_each_sequence_alone(plan):
    """The half inputs' plans (forced, on float32 inputs; few rows forced off too, as a GPU
    would read them from the device) under packing: Wk, U formed in the state kernels from
    the restarted walk; at few rows the output pass from the stored states, and the backward
    in one launch, each chunk's gradients waiting for the adjoint cut at every sequence
    boundary."""
    _check(CU_KERNEL, _inputs(CU_KERNEL, 2, True, True), "triton", **plan)


@pytest.mark.interpreter
def test_kernel_path_really_runs_the_kernels(monkeypatch):
    from mingru._launch import delta_rule as launcher

    calls = []
    real = launcher._fwd_impl
    monkeypatch.setattr(launcher, "_entry",
                        lambda *a: calls.append(a[-1] is not None) or real(*a))
    q, k, v, beta, lg, h0 = (None if a is None else a.to(DEVICE, torch.float32)
                             for a in _inputs(CU_EAGER, 1, True, True))
    with mingru.use_backend("triton"):
        _delta_rule(q, k, v, beta, lg, h0, cu_seqlens=torch.tensor(CU_EAGER, device=DEVICE))
    assert calls == [True]  # one packed launch (the cu table given)


# --- DeltaMinGRU -----------------------------------------------------------------------------


def _mixer_alone(m, x, h_0, dt, cu):
    ys, states = [], []
    for n in range(len(cu) - 1):
        s, e = cu[n], cu[n + 1]
        if s == e:
            states.append(h_0[n:n + 1])
            continue
        y, st = m(x[:, s:e], h_0[n:n + 1], dt[:, s:e], return_state=True)
        ys.append(y)
        states.append(st)
    return torch.cat(ys, 1), torch.cat(states, 0)


@pytest.mark.parametrize("path", ["eager", pytest.param("triton", marks=pytest.mark.interpreter)])
def test_mixer_equals_each_sequence_alone(path):
    cu = CU_EAGER if path == "eager" else CU_KERNEL
    T, N = cu[-1], len(cu) - 1
    torch.manual_seed(0)
    m = DeltaMinGRU(5, 8, n_heads=2, nh=2, chunk_size=4, decay="learnable").double()
    x = torch.randn(1, T, 5, dtype=F64, requires_grad=True)
    h_0 = torch.randn(N, 1, m.state_size, dtype=F64, requires_grad=True)
    dt = torch.rand(1, T, dtype=F64)
    with mingru.use_backend("eager"):
        y_ref, st_ref = _mixer_alone(m, x, h_0, dt, cu)
    wy, ws = torch.randn_like(y_ref), torch.randn_like(st_ref)
    params = list(m.parameters())
    ref = torch.autograd.grad((y_ref * wy).sum() + (st_ref * ws).sum(), [x, h_0, *params])

    dtype, tol_o, tol_g = (F64, 1e-12, 1e-10) if path == "eager" else (torch.float32, 1e-5, 1e-4)
    mk = m.to(DEVICE, dtype)
    xk = x.detach().to(DEVICE, dtype).requires_grad_(True)
    hk = h_0.detach().to(DEVICE, dtype).requires_grad_(True)
    with mingru.use_backend(path), switches.forced("delta_rule", micro_chunk=16):
        y, st = mk(xk, hk, dt.to(DEVICE, dtype), return_state=True,
                   cu_seqlens=torch.tensor(cu, device=DEVICE))
        got = torch.autograd.grad((y.double() * wy.to(DEVICE)).sum()
                                  + (st.double() * ws.to(DEVICE)).sum(),
                                  [xk, hk, *mk.parameters()])
    assert y.shape == (1, T, 8) and st.shape == (N, 1, m.state_size)
    assert rel_err(y, y_ref) <= tol_o and rel_err(st, st_ref) <= tol_o
    for i, (g, r) in enumerate(zip(got, ref, strict=True)):
        assert rel_err(g, r) <= tol_g, f"gradient {i}"


def test_mixer_default_state_is_zeros():
    torch.manual_seed(0)
    m = DeltaMinGRU(5, 8, n_heads=2, chunk_size=4).double()
    x = torch.randn(1, CU_EAGER[-1], 5, dtype=F64)
    with mingru.use_backend("eager"):
        y, st = m(x, return_state=True, cu_seqlens=torch.tensor(CU_EAGER))
        zeros = torch.zeros(len(CU_EAGER) - 1, 1, m.state_size, dtype=F64)
        y2, st2 = m(x, zeros, return_state=True, cu_seqlens=torch.tensor(CU_EAGER))
    torch.testing.assert_close(y, y2, rtol=0, atol=0)
    torch.testing.assert_close(st, st2, rtol=0, atol=0)
    assert torch.all(st[1] == 0)  # the empty sequence


# --- bad inputs ------------------------------------------------------------------------------


@pytest.mark.parametrize("cu,match", [
    ((1, 5, 13), "cu_seqlens must start at 0"),
    ((0, 5, 12), "cu_seqlens must end at T"),
    ((0, 7, 5, 13), "cu_seqlens must be non-decreasing"),
    (((0, 13),), "cu_seqlens must have shape"),
])
def test_bad_offsets(cu, match):
    q, k, v, beta, lg, h0 = _inputs(CU_EAGER, 1, True, False)
    with pytest.raises(ValueError, match=match):
        _delta_rule(q, k, v, beta, lg, cu_seqlens=torch.tensor(cu))
    m = DeltaMinGRU(5, 8, n_heads=2).double()
    with pytest.raises(ValueError, match=match):
        m(torch.randn(1, 13, 5, dtype=F64), cu_seqlens=torch.tensor(cu))


def test_batch_of_two_rows_and_bad_h0():
    q, k, v, beta, lg, h0 = _inputs(CU_EAGER, 1, True, True)
    two = [torch.cat([a, a]) for a in (q, k, v, beta, lg)]
    cu = torch.tensor(CU_EAGER)
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        _delta_rule(*two, cu_seqlens=cu)
    with pytest.raises(ValueError, match="h0 must have shape"):
        _delta_rule(q, k, v, beta, lg, h0[:3], cu_seqlens=cu)
    m = DeltaMinGRU(5, 8, n_heads=2).double()
    with pytest.raises(ValueError, match="cu_seqlens.*batch size must be 1"):
        m(torch.randn(2, 13, 5, dtype=F64), cu_seqlens=cu)
    with pytest.raises(ValueError, match="h_0 must have shape"):
        m(torch.randn(1, 13, 5, dtype=F64), torch.zeros(1, 1, m.state_size, dtype=F64),
          cu_seqlens=cu)


# --- GPU -------------------------------------------------------------------------------------


@pytest.mark.gpu
class TestGPU:
    @pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
    @pytest.mark.parametrize("nh", [1, 2])
    def test_many_sequences_head64(self, nh, dtype):
        """23 sequences (empty, length-1 and multi-chunk ones) of head size 64 on the kernels'
        default chunk, against the packed eager op in float64 on the GPU (itself checked
        against each sequence alone above)."""
        g = torch.Generator().manual_seed(nh)
        lens = torch.randint(0, 90, (23,), generator=g)
        lens[3], lens[7], lens[11] = 0, 1, 300
        cu = torch.cat([lens.new_zeros(1), lens.cumsum(0)]).to(DEVICE)
        T, N, d = int(lens.sum()), 23, 64
        q = torch.randn(1, T, 3, d, dtype=F64, generator=g)
        k = F.normalize(torch.randn(1, T, nh, 3, d, dtype=F64, generator=g), dim=-1)
        v = torch.randn(1, T, nh, 3, d, dtype=F64, generator=g)
        beta = 2 * torch.sigmoid(torch.randn(1, T, nh, 3, dtype=F64, generator=g))
        lg = -torch.rand(1, T, 3, dtype=F64, generator=g)
        h0 = torch.randn(N, 3, d, d, dtype=F64, generator=g)
        args = [a.to(dtype).double().to(DEVICE) for a in (q, k, v, beta, lg, h0)]
        ref = [a.clone().requires_grad_(True) for a in args]
        with mingru.use_backend("eager"):
            o_ref, h_ref = _delta_rule(*ref, chunk_size=64, cu_seqlens=cu)
        wo, wh = torch.randn_like(o_ref), torch.randn_like(h_ref)
        ((o_ref * wo).sum() + (h_ref * wh).sum()).backward()
        xs = [a.to(dtype).requires_grad_(True) for a in args]
        with mingru.use_backend("triton"):
            o, h = _delta_rule(*xs, cu_seqlens=cu)
            ((o.double() * wo).sum() + (h.double() * wh).sum()).backward()
        tol = 1e-4 if dtype == torch.float32 else 3e-2
        assert rel_err(o, o_ref) <= tol and rel_err(h, h_ref) <= tol
        for name, x, r in zip(("q", "k", "v", "beta", "log_gamma", "h0"), xs, ref, strict=True):
            assert rel_err(x.grad, r.grad) <= tol, name

    def test_compile_fullgraph_packed_mixer(self):
        torch.manual_seed(0)
        m = DeltaMinGRU(32, 64, n_heads=4, nh=2, decay="learnable").to(DEVICE)
        cu = torch.tensor([0, 50, 50, 51, 200], device=DEVICE)
        x = torch.randn(1, 200, 32, device=DEVICE)
        dt = torch.rand(1, 200, device=DEVICE)
        graphs = []

        def recording_backend(gm, example_inputs):
            graphs.append(str(gm.graph))
            return gm.forward

        with mingru.use_backend("triton"):
            y, st = torch.compile(m, fullgraph=True, backend=recording_backend)(
                x, delta_t=dt, return_state=True, cu_seqlens=cu)
            (y.square().sum() + st.sum()).backward()
        assert len(graphs) == 1 and "mingru.delta_rule_fwd" in graphs[0]
        with mingru.use_backend("eager"):
            y_e, st_e = m(x, delta_t=dt, return_state=True, cu_seqlens=cu)
        assert rel_err(y, y_e) <= 1e-4 and rel_err(st, st_e) <= 1e-4
