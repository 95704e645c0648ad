"""One token of the delta-rule mixer in one kernel (op ``delta_rule_step``): from the projection
``p`` and the previous state to ``o`` and the new state, against a float64 oracle (the split
written out by hand, then the delta-rule loop of tests/reference.py at T = 1) and the eager
twin. Odd head sizes (padded rows, several column blocks with a remainder), one and several
micro-steps, decay per head, shared by the heads or off, a given or a zero state, a strided
projection, mixed dtypes; NaN-poisoned outputs (tests/kernels/conftest.py). The op is
inference-only: a call that needs gradients runs eager under ``auto``, is refused under
``triton``, and the custom op refuses its backward. DeltaMinGRU's step on the kernel traces
with ``torch.compile(fullgraph=True)`` into one graph holding the op. On the GPU: every dtype
against the eager step, and CUDA graphs over the compiled step.
"""

from __future__ import annotations

import pytest
import torch

import mingru
from mingru._eager.delta_rule_step import delta_rule_step as delta_rule_step_eager
from mingru._launch import REGISTRY
from mingru.cells import _run_delta_rule_step
from mingru.mixers.delta import DeltaMinGRU
from mingru_kernels._seam import pick_launcher
from mingru_kernels._spec import KEY_NORM_EPS
from mingru_kernels.launch import switches
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE, delta_inputs_oracle
from tests.reference import loop_delta

F64 = torch.float64


def _inputs(B, H, nh, dk, dv, *, decay, state, dtype=torch.float32, seed=0):
    """``p (B, W)``, ``log_gamma`` (``None``, ``(B, H)`` for ``"heads"``, ``(B, 1)`` for
    ``"shared"``) and ``h_prev (B, H, dk, dv)`` or ``None``, on the test device."""
    g = torch.Generator().manual_seed(seed)
    W = H * dk + nh * H * (dk + dv + 1)
    p = torch.randn(B, W, generator=g, dtype=F64) * 1.5
    channels = {None: 0, "heads": H, "shared": 1}[decay]
    lg = torch.log(0.3 + 0.65 * torch.rand(B, channels, generator=g, dtype=F64)) if channels else None
    h = torch.randn(B, H, dk, dv, generator=g, dtype=F64) if state else None
    return tuple(None if x is None else x.to(DEVICE, dtype) for x in (p, lg, h))


def _oracle(p, lg, h, *, H, nh, dk, dv):
    """The float64 step: the hand-written split, then the reference loop over one token."""
    q, k, v, beta = delta_inputs_oracle(p.double(), H, nh, dk, dv, eps=KEY_NORM_EPS)
    lg = None if lg is None else lg.double()[:, None]
    o, S = loop_delta(q[:, None], k[:, None], v[:, None], beta[:, None], log_gamma=lg,
                      h0=None if h is None else h.double())
    return o[:, 0], S


def _kernel(p, lg, h, *, H, nh, dk, dv):
    with mingru.use_backend("triton"), torch.no_grad():
        return _run_delta_rule_step(p, log_gamma=lg, h_prev=h, n_heads=H, nh=nh, d_k=dk, d_v=dv,
                                    eps=KEY_NORM_EPS)


def _check(B, H, nh, dk, dv, *, decay, state, tol=2e-6, seed=0):
    p, lg, h = _inputs(B, H, nh, dk, dv, decay=decay, state=state, seed=seed)
    sizes = dict(H=H, nh=nh, dk=dk, dv=dv)
    o, S = _kernel(p, lg, h, **sizes)
    o64, S64 = _oracle(p, lg, h, **sizes)
    assert o.shape == (B, H, dv) and S.shape == (B, H, dk, dv)
    assert o.dtype == S.dtype == torch.float32
    assert rel_err(o, o64) <= tol and rel_err(S, S64) <= tol  # rel_err: no NaN left
    o_eager, S_eager = delta_rule_step_eager(p, lg, h, n_heads=H, nh=nh, d_k=dk, d_v=dv,
                                             eps=KEY_NORM_EPS)
    assert rel_err(o, o_eager) <= tol and rel_err(S, S_eager) <= tol


@pytest.mark.interpreter
@pytest.mark.parametrize("state", [False, True], ids=["zero-state", "state"])
@pytest.mark.parametrize("decay", [None, "heads", "shared"])
@pytest.mark.parametrize("B", [1, 5])
def test_odd_heads_match_float64_and_eager(B, decay, state):
    """``d_k = 24`` (rows padded to 32), ``d_v = 40`` (a 32-wide block and an 8-wide one)."""
    assert switches.poison_outputs()  # outputs NaN-filled before the kernel runs
    _check(B, 3, 2, 24, 40, decay=decay, state=state)


@pytest.mark.interpreter
@pytest.mark.parametrize(("B", "H", "nh", "dk", "dv"), [
    (2, 1, 1, 1, 1), (3, 2, 1, 16, 16), (2, 2, 3, 5, 70), (1, 1, 2, 200, 20),
], ids=["d1", "nh1-d16", "nh3-three-blocks", "dk200"])
def test_other_sizes_match_float64_and_eager(B, H, nh, dk, dv):
    _check(B, H, nh, dk, dv, decay="heads", state=True, seed=dk)


@pytest.mark.interpreter
def test_strided_projection_and_expanded_decay():
    """``p`` a column slice of a wider row (row stride ≠ W), ``log γ`` a ``(B, H)`` view of one
    rate per row (column stride 0)."""
    B, H, nh, dk, dv = 3, 2, 2, 8, 6
    p, lg, h = _inputs(B, H, nh, dk, dv, decay="shared", state=True, seed=4)
    wide = torch.cat([p, torch.randn(B, 7, device=DEVICE)], dim=-1)[:, :p.shape[-1]]
    assert wide.stride(0) != wide.shape[-1]
    sizes = dict(H=H, nh=nh, dk=dk, dv=dv)
    o, S = _kernel(wide, lg.expand(B, H), h, **sizes)
    o64, S64 = _oracle(p, lg, h, **sizes)
    assert rel_err(o, o64) <= 2e-6 and rel_err(S, S64) <= 2e-6


@pytest.mark.interpreter
def test_mixed_dtypes_compute_in_float32_and_return_the_promoted_dtype():
    """A float16 projection with a float32 state and decay (as under autocast): float32
    outputs, as the eager twin's promotion gives."""
    B, H, nh, dk, dv = 2, 2, 2, 12, 10
    p, lg, h = _inputs(B, H, nh, dk, dv, decay="heads", state=True, seed=5)
    p = p.half()
    sizes = dict(H=H, nh=nh, dk=dk, dv=dv)
    o, S = _kernel(p, lg, h, **sizes)
    assert o.dtype == S.dtype == torch.float32
    o64, S64 = _oracle(p, lg, h, **sizes)  # the float16 inputs, exactly
    assert rel_err(o, o64) <= 2e-6 and rel_err(S, S64) <= 2e-6


@pytest.mark.interpreter
def test_custom_op_matches_the_direct_launch_and_registers():
    """``run`` calls the implementation outside ``torch.compile`` and the custom op under it:
    the same numbers, bit for bit; the op's schema, fake implementation and autograd
    registration pass ``opcheck``."""
    from mingru._launch import delta_rule_step as launcher

    B, H, nh, dk, dv = 2, 2, 2, 6, 5
    p, lg, h = _inputs(B, H, nh, dk, dv, decay="heads", state=True, seed=6)
    sizes = dict(n_heads=H, nh=nh, d_k=dk, d_v=dv, eps=KEY_NORM_EPS)
    direct = launcher.run(p, lg, h, **sizes)
    via_op = torch.ops.mingru.delta_rule_step_fwd(p, lg, h, H, nh, dk, dv, KEY_NORM_EPS)
    for a, b in zip(direct, via_op, strict=True):
        assert torch.equal(a, b)
    result = torch.library.opcheck(
        torch.ops.mingru.delta_rule_step_fwd.default, (p, None, h, H, nh, dk, dv, KEY_NORM_EPS),
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor",
                    "test_aot_dispatch_dynamic"))
    assert set(result.values()) == {"SUCCESS"}, result
    assert launcher.prefer_over_eager(p, **sizes) is True


@pytest.mark.interpreter
def test_gradients_run_eager_or_are_refused():
    """The kernel has no backward. For a call that needs gradients the launcher prefers eager
    (``auto`` runs the eager twin) and refuses to run (``triton`` raises, naming the reason);
    without gradients the same call takes the kernel; the custom op refuses its backward."""
    from mingru._launch import delta_rule_step as launcher

    B, H, nh, dk, dv = 2, 1, 1, 4, 3
    p, lg, h = _inputs(B, H, nh, dk, dv, decay="heads", state=True, seed=7)
    p = p.requires_grad_()
    sizes = dict(n_heads=H, nh=nh, d_k=dk, d_v=dv, eps=KEY_NORM_EPS)
    assert launcher.unsupported_reason(p, lg, h, **sizes) is None
    assert launcher.prefer_over_eager(p, lg, h, **sizes) is False
    with torch.no_grad():
        assert launcher.prefer_over_eager(p, lg, h, **sizes) is True
    warned = []
    for grad, want in ((True, None), (False, launcher)):
        with torch.set_grad_enabled(grad):
            assert pick_launcher("delta_rule_step", (p, lg, h), sizes, mode="auto", status=True,
                                 registry=REGISTRY, warn=warned.append) is want
    assert not warned  # eager by preference, not a fallback
    with mingru.use_backend("triton"), pytest.raises(RuntimeError, match="inference-only"):
        _run_delta_rule_step(p, log_gamma=lg, h_prev=h, **sizes)
    with mingru.use_backend("eager"):  # the twin: differentiable
        o, _ = _run_delta_rule_step(p, log_gamma=lg, h_prev=h, **sizes)
    o.sum().backward()
    assert p.grad is not None and bool(p.grad.isfinite().all())
    o, _ = torch.ops.mingru.delta_rule_step_fwd(p, lg, h, H, nh, dk, dv, KEY_NORM_EPS)
    with pytest.raises(RuntimeError, match="has no backward"):
        o.sum().backward()


@pytest.mark.interpreter
def test_a_head_wider_than_the_tile_is_refused_under_triton():
    H, nh, dk, dv = 1, 1, 300, 2
    p = torch.randn(2, H * dk + nh * H * (dk + dv + 1), device=DEVICE)
    with mingru.use_backend("triton"), torch.no_grad(), pytest.raises(RuntimeError,
                                                                       match="d_k = 300"):
        _run_delta_rule_step(p, log_gamma=None, h_prev=None, n_heads=H, nh=nh, d_k=dk, d_v=dv,
                             eps=KEY_NORM_EPS)


def _mixer(decay, dtype=torch.float32, **sizes):
    torch.manual_seed(2)
    kwargs = dict(n_heads=3, nh=2, d_k=24, d_v=40) | sizes
    return DeltaMinGRU(7, 16, decay=decay, decay_rate=0.4, **kwargs).to(DEVICE, dtype)


def _tokens(B, T, dtype=torch.float32):
    g = torch.Generator().manual_seed(11)
    x = torch.randn(B, T, 7, generator=g).to(DEVICE, dtype)
    return x, (torch.rand(B, T, generator=g) * 2).to(DEVICE, dtype)


def _decode(step, x, dt, *, mode):
    """``(y (B, T, 16), states (B, T, Z))`` of ``step`` over the tokens of ``x``."""
    h, ys, states = None, [], []
    with torch.no_grad(), mingru.use_backend(mode):
        for t in range(x.shape[1]):
            y, h = step(x[:, t], h, None if dt is None else dt[:, t])
            ys.append(y)
            states.append(h)
    return torch.stack(ys, 1), torch.stack(states, 1)


@pytest.mark.interpreter
@pytest.mark.parametrize("decay", [None, "learnable"])
def test_step_compiles_fullgraph_onto_the_kernel(decay):
    """``torch.compile(DeltaMinGRU.step, fullgraph=True)`` on the kernel route: one graph,
    the op in it, no delta_inputs kernel (the step reads the projection itself), the eager
    step's numbers; from a zero state and from a given one."""
    m = _mixer(decay)
    x, dt = _tokens(2, 3)
    graphs: list[str] = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    compiled = torch.compile(m.step, fullgraph=True, backend=recording_backend)
    got = _decode(compiled, x, dt if decay else None, mode="triton")
    want = _decode(m.step, x, dt if decay else None, mode="eager")
    assert graphs and all("mingru.delta_rule_step_fwd" in graph for graph in graphs)
    assert not any("delta_inputs" in graph for graph in graphs)
    assert len(graphs) <= 2  # the zero-state call and the stepped one
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) <= 1e-5


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2),
                                        (torch.float16, 2e-3)])
@pytest.mark.parametrize("sizes", [dict(), dict(n_heads=4, nh=1, d_k=64, d_v=64),
                                   dict(n_heads=2, nh=3, d_k=128, d_v=128)],
                         ids=["d24x40-nh2", "d64-nh1", "d128-nh3"])
@pytest.mark.parametrize("decay", [None, "learnable", "fixed"])
def test_gpu_step_matches_the_eager_step(decay, sizes, dtype, tol):
    m = _mixer(decay, dtype, **sizes)
    x, dt = _tokens(5, 9, dtype)
    dt = dt if decay else None
    for got, want in zip(_decode(m.step, x, dt, mode="triton"),
                         _decode(m.step, x, dt, mode="eager"), strict=True):
        assert got.dtype == want.dtype == dtype
        assert rel_err(got, want) <= tol


@pytest.mark.gpu
@pytest.mark.parametrize("dtype, tol", [(torch.float32, 2e-6), (torch.bfloat16, 1e-2),
                                        (torch.float16, 2e-3)])
def test_gpu_op_matches_float64(dtype, tol):
    """The kernel keeps the state in float32 through the micro-steps and rounds once."""
    B, H, nh, dk, dv = 7, 4, 2, 64, 96
    p, lg, h = _inputs(B, H, nh, dk, dv, decay="heads", state=True, dtype=dtype, seed=9)
    sizes = dict(H=H, nh=nh, dk=dk, dv=dv)
    for got, want in zip(_kernel(p, lg, h, **sizes), _oracle(p, lg, h, **sizes), strict=True):
        assert got.dtype == dtype
        assert rel_err(got, want) <= tol


@pytest.mark.gpu
def test_gpu_compiled_step_with_gradients_runs_eager_in_one_graph():
    """Under ``auto`` a step that needs gradients traces the eager step: one graph (no
    fallback warning to break it), no kernel op in it, gradients flowing."""
    m = _mixer("learnable")
    x, dt = _tokens(3, 1)
    graphs: list[str] = []

    def recording_backend(gm, example_inputs):
        graphs.append(str(gm.graph))
        return gm.forward

    with mingru.use_backend("auto"):
        y, h = torch.compile(m.step, fullgraph=True, backend=recording_backend)(x[:, 0], None,
                                                                                 dt[:, 0])
    (y.sum() + h.sum()).backward()
    assert len(graphs) == 1 and "delta_rule_step" not in graphs[0]
    assert m.linear_q.weight.grad is not None


@pytest.mark.gpu
@pytest.mark.slow
def test_gpu_compiled_step_captures_and_replays_in_cuda_graphs():
    """``mode="reduce-overhead"``: CUDA graphs over the whole compiled step (no skip), correct
    over replays with new tokens and the state carried from replay to replay."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    m = _mixer("learnable")
    x, dt = _tokens(4, 6)
    compiled = torch.compile(m.step, fullgraph=True, mode="reduce-overhead")

    def step(x_t, h, dt_t):
        torch.compiler.cudagraph_mark_step_begin()
        y, h = compiled(x_t, h, dt_t)
        return y.clone(), h.clone()

    got = _decode(step, x, dt, mode="triton")
    want = _decode(m.step, x, dt, mode="eager")
    for a, b in zip(got, want, strict=True):
        assert rel_err(a, b) <= 1e-5
    assert not counters["inductor"]["cudagraph_skips"], dict(counters["inductor"])
