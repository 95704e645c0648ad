"""MinGRUBlock and MinGRUStack: composition, step vs forward, chunked calls (outputs and
gradients), heterogeneous stacks, decay_layers, the widened mixer state (``mixer_expansion``)
and argument errors."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from mingru import MinGRUBlock, MinGRUStack
from tests.helpers import close

F64 = torch.float64
B, D = 2, 8
HAS_DELTA = importlib.util.find_spec("mingru.mixers.delta") is not None
needs_delta = pytest.mark.skipif(not HAS_DELTA, reason="mingru.mixers.delta not present yet")

KWARGS = {
    "log": {},
    "signed": {"coupled": True},
    "rotation": {"snap": (2, 3)},
    "givens": {"block_size": 4, "rounds": 2},
    "delta": {"n_heads": 2, "nh": 2, "chunk_size": 4},
}
NAMES = [
    pytest.param(name, marks=needs_delta) if name == "delta" else name for name in KWARGS
]
DECAY = {"decay": "learnable", "decay_rate": 0.5, "log1p_delta": True}
# (mixer, mixer_expansion): every mixer as it is, and the state-output mixers with a state
# 3·d_model wide ("delta" projects its own output and takes no expansion).
EXPANSIONS = [
    *[pytest.param(name, 1, marks=needs_delta) if name == "delta" else (name, 1)
      for name in KWARGS],
    *[(name, 3) for name in KWARGS if name != "delta"],
]


def block(name, seed=0, **kw):
    torch.manual_seed(seed)
    mk = dict(KWARGS[name], **kw.pop("mixer_kwargs", {}))
    return MinGRUBlock(D, mixer=name, mixer_kwargs=mk, **kw).double()


def gaps(T, seed=3):
    return 1.5 * torch.rand(B, T, generator=torch.Generator().manual_seed(seed), dtype=F64)


# ---------------------------------------------------------------- block


@pytest.mark.parametrize(("name", "mixer_expansion"), EXPANSIONS)
@pytest.mark.parametrize("mlp_expansion", [0, 2])
def test_block_is_prenorm_residual(name, mixer_expansion, mlp_expansion):
    blk = block(name, mlp_expansion=mlp_expansion, mixer_expansion=mixer_expansion)
    assert blk.mixer.hidden_size == mixer_expansion * D
    x = torch.randn(B, 5, D, dtype=F64)
    out, state = blk(x)

    def ln(v, norm):
        mu = v.mean(-1, keepdim=True)
        var = ((v - mu) ** 2).mean(-1, keepdim=True)
        return (v - mu) / torch.sqrt(var + 1e-5) * norm.weight + norm.bias

    u = ln(x, blk.norm1)
    if name == "delta":
        y, want_state = blk.mixer(u, return_state=True)
    else:
        y = blk.mixer(u)
        want_state = y[:, -1:]
    if mixer_expansion == 1:
        assert blk.out_proj is None
    else:  # the mixer's m·d-wide output, projected back to d
        assert tuple(blk.out_proj.weight.shape) == (D, mixer_expansion * D)
        y = y @ blk.out_proj.weight.T + blk.out_proj.bias
    mid = x + y
    if mlp_expansion == 0:
        assert blk.mlp is None
        want = mid
    else:
        lin1, lin2 = blk.mlp[0], blk.mlp[2]
        assert lin1.out_features == mlp_expansion * D
        hid = ln(mid, blk.norm2) @ lin1.weight.T + lin1.bias
        hid = 0.5 * hid * (1 + torch.erf(hid / 2**0.5))  # exact GELU
        want = mid + hid @ lin2.weight.T + lin2.bias
    close(out, want)
    close(state, want_state)
    assert out.shape == (B, 5, D)
    size = blk.mixer.state_size if name == "delta" else mixer_expansion * D
    assert state.shape == (B, 1, size)


@pytest.mark.parametrize(("name", "mixer_expansion"), EXPANSIONS)
@pytest.mark.parametrize("decay", [False, True])
def test_block_step_matches_forward(name, mixer_expansion, decay):
    blk = block(name, mixer_kwargs=DECAY if decay else {}, mixer_expansion=mixer_expansion)
    x = torch.randn(B, 6, D, dtype=F64)
    dt = gaps(6) if decay else None
    full, last = blk(x, None, dt)
    h, outs = None, []
    with torch.inference_mode():
        for t in range(6):
            o, h = blk.step(x[:, t], h, None if dt is None else dt[:, t])
            outs.append(o)
    close(torch.stack(outs, 1), full.detach())
    close(h, last[:, 0].detach())


def test_block_learnable_h0_only_where_taken():
    assert block("log", learnable_h0=True).mixer.h0 is not None
    assert block("signed", learnable_h0=True).mixer.h0 is not None
    assert block("givens", learnable_h0=True).mixer.h0.shape == (D,)  # its own learned h0
    with pytest.raises(ValueError, match="learnable_h0"):
        MinGRUBlock(D, mixer="log", mixer_kwargs={"learnable_h0": True})


def test_block_dropout_only_in_training():
    torch.manual_seed(0)
    blk = MinGRUBlock(D, dropout=0.5, mixer="signed").double()
    ref = MinGRUBlock(D, dropout=0.0, mixer="signed").double()
    ref.load_state_dict(blk.state_dict())
    x = torch.randn(B, 4, D, dtype=F64)
    blk.eval()
    assert torch.equal(blk(x)[0], ref(x)[0])
    blk.train()
    assert not torch.equal(blk(x)[0], ref(x)[0])


# ---------------------------------------------------------------- stack


def stack(mixer, seed=0, input_size=3, n_layers=2, **kw):
    torch.manual_seed(seed)
    return MinGRUStack(input_size, D, n_layers, mlp_expansion=2, mixer=mixer, **kw).double()


def check_step_and_chaining(model, T=7, split=3, dt=None):
    x = torch.randn(B, T, model.input_size, dtype=F64)
    full, state = model(x, None, dt)
    assert full.shape == (B, T, D) and len(state) == model.n_layers

    # step, token by token
    s, outs = model.init_state(), []
    with torch.inference_mode():
        for t in range(T):
            o, s = model.step(x[:, t], s, None if dt is None else dt[:, t])
            outs.append(o)
    close(torch.stack(outs, 1), full.detach())
    for a, b in zip(s, state, strict=True):
        close(a, b[:, 0].detach())

    # two chained calls == one call, outputs and gradients
    w = torch.randn(B, T, D, dtype=F64)

    def run(chained):
        model.zero_grad()
        xx = x.clone().requires_grad_()
        if chained:
            d1, d2 = (None, None) if dt is None else (dt[:, :split], dt[:, split:])
            y1, st = model(xx[:, :split], None, d1)
            y2, st = model(xx[:, split:], st, d2)
            y = torch.cat([y1, y2], 1)
        else:
            y, st = model(xx, None, dt)
        (y * w).sum().backward()
        grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
        return y.detach(), xx.grad, grads, [v.detach() for v in st]

    ya, gxa, gpa, sta = run(False)
    yb, gxb, gpb, stb = run(True)
    close(yb, ya)
    close(gxb, gxa)
    assert gpa.keys() == gpb.keys() and len(gpa) > 0
    for n in gpa:
        close(gpb[n], gpa[n])
    for a, b in zip(sta, stb, strict=True):
        close(b, a)


@pytest.mark.parametrize(("name", "mixer_expansion"), EXPANSIONS)
def test_homogeneous_stack(name, mixer_expansion):
    model = stack(name, mixer_kwargs=KWARGS[name], mixer_expansion=mixer_expansion)
    assert all(blk.mixer_name == name for blk in model.blocks)
    assert isinstance(model.in_proj, torch.nn.Linear)
    # Unexpanded blocks keep their parameter names: no out_proj of the block's own.
    widened = [n for n, _ in model.named_parameters() if n.split(".")[2:3] == ["out_proj"]]
    assert len(widened) == (0 if mixer_expansion == 1 else 2 * model.n_layers)
    check_step_and_chaining(model)


def test_heterogeneous_stack():
    model = stack(
        ["signed", "givens"], mixer_kwargs={"givens": {"block_size": 4}}, learnable_h0=True
    )
    assert [type(b.mixer).__name__ for b in model.blocks] == ["SignedMinGRU", "GivensMinGRU"]
    assert model.blocks[1].mixer.block_size == 4
    assert model.blocks[0].mixer.h0 is not None
    check_step_and_chaining(model)


@needs_delta
def test_heterogeneous_stack_with_delta_and_decay():
    model = stack(
        ["log", "rotation", "delta"],
        n_layers=3,
        input_size=D,
        mixer_kwargs={"delta": dict(KWARGS["delta"], **DECAY), "log": DECAY},
    )
    assert isinstance(model.in_proj, torch.nn.Identity)
    assert [b.decay_enabled for b in model.blocks] == [True, False, True]
    check_step_and_chaining(model, dt=gaps(7))


@pytest.mark.parametrize("mixer", ["log", "givens", ["signed", "rotation", "givens"]])
def test_decay_layers(mixer):
    kw = {"block_size": 4} if mixer == "givens" else {}
    flat = dict(kw, **DECAY) if isinstance(mixer, str) else {"givens": dict(DECAY, block_size=4),
                                                              "signed": DECAY}
    n = 3
    all_ = stack(mixer, n_layers=n, mixer_kwargs=flat, decay_layers="all")
    last = stack(mixer, n_layers=n, mixer_kwargs=flat, decay_layers="last")
    plain_kw = kw if isinstance(mixer, str) else {"givens": {"block_size": 4}}
    plain = stack(mixer, n_layers=n, mixer_kwargs=plain_kw)
    expect_all = [True] * n if isinstance(mixer, str) else [True, False, True]
    assert [b.decay_enabled for b in all_.blocks] == expect_all
    assert [b.decay_enabled for b in last.blocks] == [False] * (n - 1) + [True]
    check_step_and_chaining(last, dt=gaps(7))
    check_step_and_chaining(all_, dt=gaps(7))
    # Zero gaps reproduce the decay-free stack exactly; real gaps change the output.
    missing, _ = plain.load_state_dict(last.state_dict(), strict=False)
    assert not missing
    x = torch.randn(B, 5, 3, dtype=F64)
    assert torch.equal(last(x, None, torch.zeros(B, 5, dtype=F64))[0], plain(x)[0])
    assert not torch.allclose(last(x, None, gaps(5))[0], plain(x)[0])


def test_stack_delta_t_pairing():
    plain = stack("signed")
    x = torch.randn(B, 4, 3, dtype=F64)
    with pytest.raises(ValueError, match="delta_t"):
        plain(x, None, gaps(4))
    with pytest.raises(ValueError, match="delta_t"):
        plain.step(x[:, 0], None, gaps(4)[:, 0])
    decayed = stack("signed", mixer_kwargs=DECAY, decay_layers="last")
    with pytest.raises(ValueError, match="delta_t"):
        decayed(x)
    with pytest.raises(ValueError, match="delta_t"):
        decayed.step(x[:, 0], decayed.init_state())


def test_stack_mlp_expansion_zero():
    torch.manual_seed(0)
    model = MinGRUStack(3, D, 2, mlp_expansion=0, mixer="rotation").double()
    assert all(b.mlp is None for b in model.blocks)
    assert not any("mlp" in n for n, _ in model.named_parameters())
    check_step_and_chaining(model)


def test_stack_init_state():
    model = stack("log", n_layers=3)
    assert model.init_state() == [None, None, None]


def test_stack_and_block_errors():
    with pytest.raises(ValueError, match="mixer"):
        MinGRUBlock(D, mixer="lstm")
    with pytest.raises(ValueError, match="mixer"):
        MinGRUStack(3, D, 2, mixer="gru")
    with pytest.raises(ValueError, match=r"mixer\[1\]"):
        MinGRUStack(3, D, 2, mixer=["log", "nope"])
    with pytest.raises(ValueError, match="n_layers"):
        MinGRUStack(3, D, 2, mixer=["log"])
    with pytest.raises(ValueError, match="keyed by mixer name"):
        MinGRUStack(3, D, 2, mixer=["log", "signed"], mixer_kwargs={"block_size": 4})
    with pytest.raises(ValueError, match="mixer_kwargs"):
        MinGRUStack(3, D, 2, mixer=["log", "givens"], mixer_kwargs={"givens": 4})
    with pytest.raises(ValueError, match="decay_layers"):
        MinGRUStack(3, D, 2, decay_layers="first")
    with pytest.raises(ValueError, match="n_layers"):
        MinGRUStack(3, D, 0)
    with pytest.raises(ValueError, match="mixer_kwargs"):
        MinGRUBlock(D, mixer_kwargs={"hidden_size": 4})
    with pytest.raises(ValueError, match="mlp_expansion"):
        MinGRUBlock(D, mlp_expansion=-1)
    for bad in (0, -2, True, 1.5, "2", None):
        with pytest.raises(ValueError, match="mixer_expansion must be an int ≥ 1"):
            MinGRUBlock(D, mixer_expansion=bad)
    with pytest.raises(ValueError, match="mixer_expansion=2 does not apply to the 'delta'"):
        MinGRUBlock(D, mixer="delta", mixer_kwargs={"n_heads": 2}, mixer_expansion=2)
    with pytest.raises(ValueError, match="mixer_expansion=3 does not apply to the 'delta'"):
        MinGRUStack(3, D, 2, mixer=["log", "delta"], mixer_expansion=3)
    with pytest.raises(ValueError, match="even"):  # 3·3 = 9 rotation channels
        MinGRUBlock(3, mixer="rotation", mixer_expansion=3)
    with pytest.raises(ValueError, match="hidden_size=24"):  # block_size 16 does not divide 3·8
        MinGRUBlock(D, mixer="givens", mixer_kwargs={"block_size": 16}, mixer_expansion=3)
    with pytest.raises(ValueError, match="dropout"):
        MinGRUBlock(D, dropout=1.5)
    with pytest.raises(ValueError, match="block_size"):
        MinGRUStack(3, D, 1, mixer="givens", mixer_kwargs={"block_size": 3})
    model = stack("log")
    x = torch.randn(B, 4, 3, dtype=F64)
    with pytest.raises(ValueError, match="state"):
        model(x, [None])
    with pytest.raises(ValueError, match="x"):
        model(torch.randn(B, 4, 5, dtype=F64))
    with pytest.raises(TypeError, match="x_t"):
        model.step(torch.ones(B, 3, dtype=torch.long), model.init_state())
    with pytest.raises(ValueError, match="x"):
        block("log")(torch.randn(B, 4, D + 1, dtype=F64))


@pytest.mark.parametrize("mlp_expansion", [0, 2])
def test_every_parameter_gets_a_gradient(mlp_expansion):
    """No parameter sits idle (DistributedDataParallel rejects unused parameters): without an
    MLP the block has no norm for it."""
    block = MinGRUBlock(8, mlp_expansion=mlp_expansion, mixer_expansion=2)
    out, _ = block(torch.randn(2, 5, 8))
    out.sum().backward()
    idle = [name for name, p in block.named_parameters() if p.grad is None]
    assert not idle
    assert (block.norm2 is None) == (mlp_expansion == 0)
