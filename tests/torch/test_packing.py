"""Packed sequences (``cu_seqlens``): one call on sequences laid end to end in one row equals
running each sequence alone — outputs, per-sequence final states and every gradient — for the
scans, the fused cells, the mixers, the block and a heterogeneous stack; on the eager path
(float64, on the host) and through the Triton kernels (fp32, on the device they run on: the
GPU when there is one, else the CPU through Triton's interpreter), with an empty and a
length-1 sequence among them; chaining through the per-sequence final states; bad offsets.

The delta rule and DeltaMinGRU have their own file (``test_delta_packing.py``).
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru import MinGRUBlock, MinGRUStack
from mingru.cells import mingru_cell, signed_mingru_cell
from mingru.scans import _givens_recurrence
from tests.helpers import close
from tests.kernels.cases import DEVICE, PLANS, triton_plan

F64 = torch.float64
CU = [0, 3, 3, 4, 11]  # an empty and a length-1 sequence among them
T, N = CU[-1], len(CU) - 1
SPANS = [(CU[n], CU[n + 1]) for n in range(N)]


def _rand(*shape, dtype=F64, seed=None, device="cpu"):
    g = torch.Generator().manual_seed(seed) if seed is not None else None
    return torch.randn(*shape, dtype=F64, generator=g).to(device, dtype)


def _weights(shape, dtype, device="cpu"):
    return torch.linspace(-1.0, 1.0, int(torch.tensor(shape).prod()), dtype=dtype,
                          device=device).view(shape)


def _device(path):
    """Where a path's inputs live: the eager path's float64 checks on the host, the kernels'
    on the device they run on (a GPU when there is one, else the CPU, where the ``interpreter``
    tests run them through Triton's interpreter)."""
    return "cpu" if path == "eager" else DEVICE


def _backend(path):
    """Eager, or the Triton kernels with the elementwise scans' plan forced to ``path``."""
    if path == "eager":
        return mingru.use_backend("eager")
    return triton_plan("linear_recurrence", "mingru_cell", "parallel_scan_log", **PLANS[path])


PATHS = [("eager", F64), pytest.param("walk", torch.float32, marks=pytest.mark.interpreter),
         pytest.param("lookback", torch.float32, marks=pytest.mark.interpreter)]
# Look-backs that compose aggregates (every third chunk publishes) restart sequences too.
LOOKBACK_PATHS = PATHS + [pytest.param("lookback-walks", torch.float32,
                                       marks=pytest.mark.interpreter)]
TOL = {F64: 1e-10, torch.float32: 1e-5}
GTOL = {F64: 1e-9, torch.float32: 1e-4}


def _check_against_alone(packed, alone, leaves, dtype):
    """``packed()`` → ``(h (1, T, …), finals (N, …))``; ``alone(n, s, e)`` → ``(h_n, final_n)``
    for sequence n. Outputs, final states and the gradients of ``leaves`` must agree."""
    h, finals = packed()
    w = _weights(h.shape, h.dtype, h.device)
    wf = _weights(finals.shape, finals.dtype, finals.device) * 0.5
    grads = torch.autograd.grad((h * w).sum() + (finals * wf).sum(), leaves, allow_unused=True)
    loss = 0.0
    for n, (s, e) in enumerate(SPANS):
        h_n, final_n = alone(n, s, e)
        if e > s:
            close(h[:, s:e], h_n, TOL[dtype])
            loss = loss + (h_n * w[:, s:e]).sum()
        close(finals[n], final_n.reshape(finals[n].shape), TOL[dtype])
        loss = loss + (final_n.reshape(finals[n].shape) * wf[n]).sum()
    ref = torch.autograd.grad(loss, leaves, allow_unused=True)
    for g, r in zip(grads, ref, strict=True):
        if r is None:
            assert g is None or not g.abs().any()
        else:
            close(g, r, GTOL[dtype])


@pytest.mark.parametrize("path,dtype", LOOKBACK_PATHS)
@pytest.mark.parametrize("with_h0", [True, False])
def test_linear_recurrence(path, dtype, with_h0):
    dev = _device(path)
    a = torch.tanh(_rand(1, T, 5, dtype=dtype, device=dev)).requires_grad_()
    b = _rand(1, T, 5, dtype=dtype, device=dev).requires_grad_()
    h0 = _rand(N, 5, dtype=dtype, device=dev).requires_grad_() if with_h0 else None
    cu = torch.tensor(CU, device=dev)

    def packed():
        with _backend(path):
            return mingru.linear_recurrence(a, b, h0, True, cu_seqlens=cu)

    def alone(n, s, e):
        init = None if h0 is None else h0[n:n + 1]
        if e == s:
            return None, h0[n] if h0 is not None else torch.zeros(5, dtype=dtype, device=dev)
        with mingru.use_backend("eager"):
            h, h_T = mingru.linear_recurrence(a[:, s:e], b[:, s:e], init, True)
        return h, h_T

    leaves = [x for x in (a, b, h0) if x is not None]
    _check_against_alone(packed, alone, leaves, dtype)


@pytest.mark.parametrize("path,dtype", LOOKBACK_PATHS)
@pytest.mark.parametrize("cell", ["log", "signed", "coupled"])
@pytest.mark.parametrize("decay", [False, True])
def test_cells(path, dtype, cell, decay):
    D, dev = 3, _device(path)
    gates = 2 if cell == "log" else 3
    k = _rand(1, T, gates * D, dtype=dtype, device=dev).requires_grad_()
    h0 = _rand(N, D, dtype=dtype, device=dev).abs().requires_grad_()  # MinGRU states are ≥ 0
    lg = (-_rand(1, T, 1, dtype=dtype, device=dev).abs()).requires_grad_() if decay else None
    cu = torch.tensor(CU, dtype=torch.int32, device=dev)

    def fn(*args, **kw):
        if cell == "log":
            return mingru_cell(*args, **kw)
        return signed_mingru_cell(*args, coupled=cell == "coupled", **kw)

    def packed():
        with _backend(path):
            return fn(k, h0, lg, return_final_state=True, cu_seqlens=cu)

    def alone(n, s, e):
        if e == s:
            return None, h0[n]
        with mingru.use_backend("eager"):
            return fn(k[:, s:e], h0[n:n + 1], None if lg is None else lg[:, s:e],
                      return_final_state=True)

    _check_against_alone(packed, alone, [x for x in (k, h0, lg) if x is not None], dtype)


@pytest.mark.parametrize("path,dtype", LOOKBACK_PATHS)
def test_public_scans(path, dtype):
    dev = _device(path)
    cu = torch.tensor(CU, device=dev)
    a = torch.tanh(_rand(1, T, 4, dtype=dtype, device=dev)).requires_grad_()
    b = _rand(1, T, 4, dtype=dtype, device=dev).requires_grad_()
    la = (-_rand(1, T, 4, dtype=dtype, device=dev).abs()).requires_grad_()
    lv = _rand(1, T + N, 4, dtype=dtype, device=dev).requires_grad_()
    A = (0.5 * _rand(1, T, 2, 2, 2, dtype=dtype, device=dev)).requires_grad_()
    Bm = _rand(1, T, 2, 2, 1, dtype=dtype, device=dev).requires_grad_()
    with _backend(path):
        P, Z = mingru.linear_scan(a, b, cu_seqlens=cu)
        h = mingru.parallel_scan_log(la, lv, cu_seqlens=cu)
        MP, MZ = mingru.matrix_affine_scan(A, Bm, cu_seqlens=cu)
        SP, SZ = mingru.matrix_scan(A, Bm[..., 0], cu_seqlens=cu)
    outs = [P, Z, h, MP, MZ, SP, SZ]
    ws = [_weights(o.shape, o.dtype, o.device) for o in outs]
    leaves = [a, b, la, lv, A, Bm]
    grads = torch.autograd.grad(sum((o * w).sum() for o, w in zip(outs, ws, strict=True)), leaves)
    loss = 0.0
    with mingru.use_backend("eager"):
        for n, (s, e) in enumerate(SPANS):
            if e == s:
                continue
            refs = [*mingru.linear_scan(a[:, s:e], b[:, s:e]),
                    mingru.parallel_scan_log(la[:, s:e], lv[:, s + n:e + n + 1]),
                    *mingru.matrix_affine_scan(A[:, s:e], Bm[:, s:e]),
                    *mingru.matrix_scan(A[:, s:e], Bm[:, s:e, ..., 0])]
            for o, r, w in zip(outs, refs, ws, strict=True):
                close(o[:, s:e], r, TOL[dtype])
                loss = loss + (r * w[:, s:e]).sum()
    for g, r in zip(grads, torch.autograd.grad(loss, leaves), strict=True):
        close(g, r, GTOL[dtype])


@pytest.mark.parametrize("path,dtype", PATHS)
def test_givens_recurrence(path, dtype):
    n, k, dev = 2, 4, _device(path)
    theta = _rand(1, T, n, 2, k // 2, dtype=dtype, device=dev).requires_grad_()
    b = _rand(1, T, n, k, dtype=dtype, device=dev).requires_grad_()
    h0 = _rand(N, n, k, dtype=dtype, device=dev).requires_grad_()
    scale = torch.tanh(_rand(1, T, n, k, dtype=dtype, device=dev)).requires_grad_()
    lg = (-_rand(1, T, n, dtype=dtype, device=dev).abs()).requires_grad_()
    cu = torch.tensor(CU, device=dev)

    def packed():
        with _backend(path):
            h = _givens_recurrence(theta, b, h0, scale, lg, cu_seqlens=cu)
        return h, h0 * 0  # finals are not part of this op

    def alone(i, s, e):
        if e == s:
            return None, h0[i] * 0
        with mingru.use_backend("eager"):
            h = _givens_recurrence(theta[:, s:e], b[:, s:e], h0[i:i + 1], scale[:, s:e],
                                   lg[:, s:e])
        return h, h0[i] * 0

    _check_against_alone(packed, alone, [theta, b, h0, scale, lg], dtype)


MIXERS = {
    "log": (mingru.MinGRU, {"learnable_h0": True}),
    "signed": (mingru.SignedMinGRU, {"coupled": True, "learnable_h0": True}),
    "rotation": (mingru.RotationMinGRU, {"snap": (2, 3)}),
    "givens": (mingru.GivensMinGRU, {"block_size": 4, "rounds": 2}),
}


@pytest.mark.parametrize("name", list(MIXERS))
@pytest.mark.parametrize("decay", [False, True])
@pytest.mark.parametrize("given_h0", [False, True])
def test_mixers(name, decay, given_h0):
    cls, kw = MIXERS[name]
    torch.manual_seed(0)
    extra = {"decay": "learnable", "decay_rate": 0.5} if decay else {}
    m = cls(6, 8, **kw, **extra).double()
    x = _rand(1, T, 6, seed=1).requires_grad_()
    dt = torch.rand(1, T, dtype=F64) * 2 if decay else None
    h_0 = _rand(N, 1, 8, seed=2).abs().requires_grad_() if given_h0 else None
    leaves = [x, *m.parameters()] + ([h_0] if given_h0 else [])
    cu = torch.tensor(CU)

    def packed():
        y, state = m(x, h_0, dt, return_state=True, cu_seqlens=cu)
        return y, state

    def alone(n, s, e):
        init = None if h_0 is None else h_0[n:n + 1]
        if e == s:
            if init is None:  # the mixer's default state: run one step and read h_0 back
                _, state = m(x[:, :1], None, None if dt is None else dt[:, :1], return_state=True,
                             cu_seqlens=torch.tensor([0, 0, 1]))
                return None, state[0]
            return None, init[0]
        return m(x[:, s:e], init, None if dt is None else dt[:, s:e], return_state=True)

    _check_against_alone(packed, alone, leaves, F64)


@pytest.mark.interpreter
@pytest.mark.parametrize("name", ["log", "signed"])
def test_mixers_on_the_kernels(name):
    cls, kw = MIXERS[name]
    torch.manual_seed(0)
    m = cls(6, 8, **kw, decay="learnable").to(DEVICE)  # both paths where the kernels run
    x = _rand(1, T, 6, dtype=torch.float32, seed=1, device=DEVICE).requires_grad_()
    dt = (torch.rand(1, T) * 2).to(DEVICE)
    cu = torch.tensor(CU, device=DEVICE)
    outs = []
    for path in ("eager", "lookback"):
        with _backend(path):
            y, state = m(x, None, dt, return_state=True, cu_seqlens=cu)
        grads = torch.autograd.grad((y * _weights(y.shape, y.dtype, DEVICE)).sum() + state.sum(),
                                    [x, *m.parameters()])
        outs.append((y, state, grads))
    (y1, s1, g1), (y2, s2, g2) = outs
    close(y1, y2, 1e-5)
    close(s1, s2, 1e-5)
    for a, b in zip(g1, g2, strict=True):
        close(a, b, 1e-4)


STACK = ["signed", "givens", "log"]
STACK_KW = {"signed": {"coupled": True}, "givens": {"block_size": 4, "rounds": 2}}


@pytest.mark.parametrize("kind", ["block", "stack"])
def test_block_and_stack(kind):
    torch.manual_seed(0)
    if kind == "block":
        model = MinGRUBlock(8, mixer="givens", mixer_kwargs=STACK_KW["givens"]).double()
    else:
        model = MinGRUStack(5, 8, 3, mixer=STACK, mixer_kwargs=STACK_KW).double()
    x = _rand(1, T, 8 if kind == "block" else 5, seed=4).requires_grad_()
    cu = torch.tensor(CU)
    out, state = model(x, cu_seqlens=cu)
    states = [state] if kind == "block" else state
    leaves = [x, *model.parameters()]
    loss = (out * _weights(out.shape, out.dtype)).sum() + sum(s.sum() for s in states)
    grads = torch.autograd.grad(loss, leaves, retain_graph=True)
    ref_loss = 0.0
    for n, (s, e) in enumerate(SPANS):
        if e == s:
            for layer_state in states:
                assert layer_state.shape[0] == N
            continue
        o_n, st_n = model(x[:, s:e])
        st_n = [st_n] if kind == "block" else st_n
        close(out[:, s:e], o_n, 1e-10)
        for layer_state, ref in zip(states, st_n, strict=True):
            close(layer_state[n], ref[0], 1e-10)
        ref_loss = ref_loss + (o_n * _weights(out.shape, out.dtype)[:, s:e]).sum()
        ref_loss = ref_loss + sum(r.sum() for r in st_n)
    # The empty sequence's states are the mixers' defaults: their gradient comes from h0.
    empty = [n for n, (s, e) in enumerate(SPANS) if e == s]
    ref_loss = ref_loss + sum(layer_state[empty].sum() for layer_state in states)
    for g, r in zip(grads, torch.autograd.grad(ref_loss, leaves, allow_unused=True),
                    strict=True):
        close(g, torch.zeros_like(g) if r is None else r, 1e-9)


def test_chaining_through_final_states():
    """Two packed calls chained through the per-sequence final states equal one packed call on
    the concatenated sequences (streaming many documents at once)."""
    torch.manual_seed(0)
    m = mingru.MinGRU(4, 6).double()
    first, second = [0, 2, 2, 5], [0, 3, 4, 6]
    lengths = [a + b for a, b in zip(torch.diff(torch.tensor(first)).tolist(),
                                     torch.diff(torch.tensor(second)).tolist(), strict=True)]
    whole = [0, *torch.cumsum(torch.tensor(lengths), 0).tolist()]
    x = _rand(1, whole[-1], 4, seed=5)
    parts1, parts2 = [], []
    for n in range(3):
        start, l1 = whole[n], first[n + 1] - first[n]
        parts1.append(x[:, start:start + l1])
        parts2.append(x[:, start + l1:whole[n + 1]])
    y1, s1 = m(torch.cat(parts1, 1), return_state=True, cu_seqlens=torch.tensor(first))
    y2, s2 = m(torch.cat(parts2, 1), s1, return_state=True, cu_seqlens=torch.tensor(second))
    y, s = m(x, return_state=True, cu_seqlens=torch.tensor(whole))
    for n in range(3):
        start, l1 = whole[n], first[n + 1] - first[n]
        close(y[:, start:start + l1], y1[:, first[n]:first[n + 1]], 1e-12)
        close(y[:, start + l1:whole[n + 1]], y2[:, second[n]:second[n + 1]], 1e-12)
    close(s, s2, 1e-12)


@pytest.mark.parametrize("cu,batch,error,match", [
    ([0, 3, 11], 2, ValueError, "batch size must be 1"),
    ([1, 3, 11], 1, ValueError, "must start at 0"),
    ([0, 3, 10], 1, ValueError, "must end at T = 11"),
    ([0, 5, 3, 11], 1, ValueError, "non-decreasing"),
    ([0], 1, ValueError, r"\(N\+1,\)"),
    ([0.0, 11.0], 1, TypeError, "integer dtype"),
    ([[0, 11]], 1, ValueError, r"\(N\+1,\)"),
])
def test_bad_offsets(cu, batch, error, match):
    a = torch.rand(batch, T, 3)
    with pytest.raises(error, match=match) as info:
        mingru.linear_recurrence(a, a, cu_seqlens=torch.tensor(cu))
    assert "cu_seqlens" in str(info.value)
    with pytest.raises(error, match="cu_seqlens"):
        mingru.MinGRU(3, 4)(a, cu_seqlens=torch.tensor(cu))
    with pytest.raises(TypeError, match="cu_seqlens"):
        mingru.linear_recurrence(a, a, cu_seqlens=[0, T])


def test_bad_packed_state():
    a = torch.rand(1, T, 3)
    with pytest.raises(ValueError, match=r"initial_state must have shape \(N, 3\) = \(4, 3\)"):
        mingru.linear_recurrence(a, a, torch.zeros(1, 3), cu_seqlens=torch.tensor(CU))
    with pytest.raises(ValueError, match="h_0"):
        mingru.MinGRU(3, 4)(a, torch.ones(1, 1, 4), cu_seqlens=torch.tensor(CU))


def test_compiles_without_graph_breaks():
    m = mingru.SignedMinGRU(3, 4)
    x, cu = torch.randn(1, T, 3), torch.tensor(CU)
    compiled = torch.compile(m, fullgraph=True, backend="eager")
    close(compiled(x, cu_seqlens=cu), m(x, cu_seqlens=cu), 1e-6)


def _gpu_offsets(T: int, seed: int) -> torch.Tensor:
    """Random offsets over T steps with an empty and a length-1 sequence among ~60 others."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.sort(torch.randint(1, T, (60,), generator=g)).values.tolist()
    return torch.tensor([0, 0, *cuts, cuts[-1] + 1 if cuts[-1] + 1 < T else cuts[-1], T])


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4), (torch.bfloat16, 3e-2),
                                       (torch.float16, 1e-2)])
@pytest.mark.parametrize("op", ["linear_recurrence", "log", "signed", "coupled", "log_scan"])
def test_packed_kernels_on_the_gpu(op, dtype, tol):
    """The compiled kernels on packed rows (T = 70 001, ~60 sequences) against the eager
    packed twin in float64 (itself checked against each sequence alone above)."""
    from tests.helpers import assert_rel

    T, D = 70_001, 33
    cu = _gpu_offsets(T, 7).cuda()
    N = cu.shape[0] - 1
    g = torch.Generator(device="cuda").manual_seed(3)

    def rnd(*shape):
        return torch.randn(*shape, device="cuda", generator=g, dtype=F64)

    if op == "linear_recurrence":
        args = [torch.tanh(rnd(1, T, D)), rnd(1, T, D), rnd(N, D)]

        def fn(a, b, h0):
            return mingru.linear_recurrence(a, b, h0, True, cu_seqlens=cu)
    elif op == "log_scan":
        args = [-rnd(1, T, D).abs(), rnd(1, T + N, D)]

        def fn(la, lv):
            return (mingru.parallel_scan_log(la, lv, cu_seqlens=cu),)
    else:
        gates = 2 if op == "log" else 3
        args = [rnd(1, T, gates * D), rnd(N, D).abs(), -rnd(1, T, 1).abs()]

        def fn(k, h0, lg):
            if op == "log":
                return mingru_cell(k, h0, lg, return_final_state=True, cu_seqlens=cu)
            return signed_mingru_cell(k, h0, lg, coupled=op == "coupled",
                                      return_final_state=True, cu_seqlens=cu)
    results = []
    for backend, cast in (("triton", dtype), ("eager", F64)):
        xs = [x.to(dtype).to(cast).requires_grad_() for x in args]  # the same rounded inputs
        with mingru.use_backend(backend):
            outs = fn(*xs)
        ws = [torch.linspace(-1, 1, o.numel(), device="cuda", dtype=F64).view(o.shape)
              for o in outs]
        grads = torch.autograd.grad(sum((o.double() * w).sum() for o, w in zip(outs, ws,
                                                                              strict=True)), xs)
        results.append([*outs, *grads])
    for i, (got, want) in enumerate(zip(*results, strict=True)):
        assert_rel(got.double(), want, tol, what=f"{op} output/grad {i}")
