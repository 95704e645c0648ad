"""The PyTorch side: the inputs and the timed call of every (case, backend, mode).

:func:`timed_call` returns a zero-argument call (one forward, one forward + backward, or one
training step) and the row's extra fields (bytes moved for the memory floor, the error against
float64 for the delta rule). :func:`hook_rows` times the training step with each private hook
of ``mingru_kernels._compat`` off against on, paired in one process.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

import mingru
from mingru import cells, scans
from mingru_benchmarks import peers, timers
from mingru_benchmarks.registry import MIXERS, Case, Skip
from mingru_kernels._seam import interpreter_mode

__all__ = ["copy_bandwidth", "hook_rows", "timed_call"]

VOCAB = 256
MIXER_KEYS = {"MinGRU": "log", "SignedMinGRU": "signed", "RotationMinGRU": "rotation",
              "GivensMinGRU": "givens", "DeltaMinGRU": "delta"}
CELL_WIDTH = {"mingru_cell": 2, "signed_mingru_cell": 3, "rotation_cell": 3}  # k's width / D
Call = Callable[[], Any]


def _dtype(case: Case) -> torch.dtype:
    return torch.bfloat16 if case.precision == "bf16" else torch.float32


def op_inputs(op: str, dims: tuple[int, ...], device: str,
              dtype: torch.dtype) -> tuple[list[torch.Tensor], dict[str, Any]]:
    """Well-conditioned inputs of ``op`` at ``(B, T, D)`` (``matrix_scan``: ``D/2`` rotations
    scaled into (0.9, 1); ``matrix_affine_scan``: ``D/8`` contractive 8×8 blocks, ``v = 1``;
    ``givens_cell``: 8×8 blocks, 3 rounds), and its keyword arguments."""
    B, T, D = dims
    g = torch.Generator(device=device).manual_seed(0)

    def r(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, device=device, generator=g)

    def u(*shape: int) -> torch.Tensor:
        return torch.rand(*shape, device=device, generator=g)

    kw: dict[str, Any] = {}
    if op == "parallel_scan_log":
        xs = [-F.softplus(r(B, T, D)), 0.5 * r(B, T + 1, D)]
    elif op in ("linear_scan", "linear_recurrence"):
        xs = [0.5 + 0.5 * u(B, T, D), r(B, T, D)]
    elif op == "matrix_scan":
        ang, rad = r(B, T, D // 2), 0.9 + 0.1 * u(B, T, D // 2)
        c, s = rad * ang.cos(), rad * ang.sin()
        xs = [torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2),
              r(B, T, D // 2, 2)]
    elif op == "matrix_affine_scan":
        xs = [r(B, T, D // 8, 8, 8) * (0.5 / 8**0.5), r(B, T, D // 8, 8, 1)]
    elif op == "givens_cell":
        xs, kw = [r(B, T, D * 3 // 2 + 2 * D)], {"block_size": 8, "rounds": 3}
    else:
        xs = [r(B, T, CELL_WIDTH[op] * D)]
    return [x.to(dtype) for x in xs], kw


def delta_inputs(case: Case, device: str) -> list[torch.Tensor]:
    """``q, k, v, β`` (and ``log γ`` for ``decay``) with unit-norm keys, ``nh`` micro-steps."""
    B, T, H, dk = case.dims
    nh = 2 if "nh2" in case.name else 1
    g = torch.Generator(device=device).manual_seed(0)
    r = lambda *s: torch.randn(*s, device=device, generator=g)
    xs = [r(B, T, H, dk) / dk**0.5, F.normalize(r(B, T, nh, H, dk), dim=-1), r(B, T, nh, H, dk),
          2 * torch.sigmoid(r(B, T, nh, H))]
    if "decay" in case.name:
        xs.append(F.logsigmoid(3 + r(B, T, H)))
    return [x.to(_dtype(case)) for x in xs]


def _delta_rule(q, k, v, beta, log_gamma=None):  # the DeltaMinGRU mixer's op, chunk 64
    return scans._delta_rule(q, k, v, beta, log_gamma, None, 64)


@contextlib.contextmanager
def _mode(mode: str | None) -> Iterator[None]:
    with mingru.use_backend(mode) if mode else contextlib.nullcontext():
        yield


def _in_mode(mode: str | None, fn: Callable[..., Any]) -> Callable[..., Any]:
    def run(*xs: Any) -> Any:
        with _mode(mode):
            return fn(*xs)

    return run


def _compiled(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``torch.compile`` of ``fn`` with a fresh dynamo cache, traced on the eager path."""
    from torch import _dynamo

    _dynamo.reset()
    _dynamo.config.cache_size_limit = 64
    return _in_mode("eager", torch.compile(fn, dynamic=False))


def _backend_fn(backend: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    if backend == "compile":
        return _compiled(fn)
    return _in_mode(None if backend == "ours" else backend, fn)


def _subject(case: Case, backend: str, device: str
             ) -> tuple[Callable[..., Any], list[torch.Tensor], list[torch.Tensor]]:
    """``(fn, inputs, parameters)`` of the case on ``backend``."""
    if case.name in MIXERS:
        torch.manual_seed(0)
        mixer = getattr(mingru, case.name)(case.dims[-1], case.dims[-1]).to(device)
        x = torch.randn(*case.dims, device=device, generator=torch.Generator(device).manual_seed(1))
        fn = (peers.mixer_peer(backend, case.name, mixer, device) if backend in peers.MODULES
              else _backend_fn(backend, mixer))
        params = list(fn.parameters()) if isinstance(fn, nn.Module) else list(mixer.parameters())
        if case.precision == "bf16":
            fn = _autocast(fn, device)
        return fn, [x], params
    if case.suite == "delta":
        xs = delta_inputs(case, device)
        if backend == "fla":
            return (*peers.delta_peer(xs, 2 if "nh2" in case.name else 1, "decay" in case.name,
                                      device), [])
        return _backend_fn(backend, _delta_rule), xs, []
    xs, kw = op_inputs(case.name, case.dims, device, _dtype(case))
    if backend in peers.MODULES:
        return (*peers.op_peer(backend, case.name, xs, device), [])
    public = getattr(scans, case.name, None) or getattr(cells, case.name)
    return _backend_fn(backend, functools.partial(public, **kw)), xs, []


def _autocast(fn: Callable[..., Any], device: str) -> Callable[..., Any]:
    def run(*xs: Any) -> Any:
        with torch.autocast(device_type=device, dtype=torch.bfloat16):
            return fn(*xs)

    return run


def _outputs(out: Any) -> list[torch.Tensor]:
    outs = out if isinstance(out, (tuple, list)) else (out,)
    return [o for o in outs if isinstance(o, torch.Tensor) and o.is_floating_point()]


def _nbytes(ts: list[torch.Tensor]) -> int:
    return sum(t.numel() * t.element_size() for t in ts)


def timed_call(case: Case, backend: str, mode: str, device: str) -> tuple[Call, dict[str, Any]]:
    """The call to time and the row's extra fields."""
    if backend == "triton" and (why := _why_no_kernels(device)) is not None:
        raise Skip(why)
    if case.suite in ("train-step", "hooks"):
        return train_step(case, backend, device), {}
    fn, xs, params = _subject(case, backend, device)
    extra: dict[str, Any] = {}
    if mode == "fwd":
        call = lambda: _no_grad(fn, xs)
        if case.suite in ("memory-floor", "delta"):  # one untimed call for the extra fields
            out = _outputs(call())
            if case.suite == "delta":
                extra["err_vs_f64"] = _err_vs_f64(case, device, out[0])
            else:
                extra["bytes"] = _nbytes([x for x in xs if x.is_floating_point()]) + _nbytes(out)
        return call, extra
    leaves = [x.requires_grad_() for x in xs if x.is_floating_point()] + params

    def fwd_bwd() -> None:
        for t in leaves:
            t.grad = None
        sum(o.float().sum() for o in _outputs(fn(*xs))).backward()

    return fwd_bwd, extra


def _why_no_kernels(device: str) -> str | None:
    """Why the forced kernels cannot run on ``device`` here (``None``: they can): they take
    CUDA tensors, or CPU ones through Triton's interpreter (``TRITON_INTERPRET=1``), which a
    GPU machine does not run unless asked."""
    if (status := mingru.available()) is not True:
        return str(status)
    if torch.device(device).type != "cuda" and not interpreter_mode():
        return f"the kernels need CUDA tensors on {device} (TRITON_INTERPRET=1 runs them on CPU)"
    return None


def _no_grad(fn: Callable[..., Any], xs: list[torch.Tensor]) -> Any:
    with torch.no_grad():
        return fn(*xs)


@functools.cache
def _reference(case: Case, device: str) -> torch.Tensor:
    """The delta rule's float64 output on the case's inputs (the eager chunked form)."""
    with mingru.use_backend("eager"), torch.no_grad():
        return _delta_rule(*[x.double() for x in delta_inputs(case, device)])[0]


def _err_vs_f64(case: Case, device: str, out: torch.Tensor) -> float:
    """``max |o − o₆₄| / max |o₆₄|``, the tests' relative error."""
    ref = _reference(case, device)
    return float((out.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300))


class LM(nn.Module):
    """A byte-level language model: ``Embedding(256, d)`` → ``MinGRUStack(d, d, layers,
    mixer, mlp_expansion=4)`` → ``Linear(d, 256)`` (DeltaMinGRU: ``d/64`` heads)."""

    def __init__(self, mixer: str, d: int, layers: int) -> None:
        super().__init__()
        kwargs = {"n_heads": max(1, d // 64)} if mixer == "DeltaMinGRU" else None
        self.embed = nn.Embedding(VOCAB, d)
        self.stack = mingru.MinGRUStack(d, d, layers, mixer=MIXER_KEYS[mixer], mixer_kwargs=kwargs)
        self.head = nn.Linear(d, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.stack(self.embed(tokens))[0])


def train_step(case: Case, backend: str, device: str) -> Call:
    """One AdamW step (fused on CUDA) of :class:`LM` on a fixed random batch, cross-entropy,
    bf16 autocast for ``bf16``; ``compile`` compiles every block (regional compilation)."""
    B, T, d, layers = case.dims
    torch.manual_seed(0)
    model = LM("MinGRU" if case.suite == "hooks" else case.name, d, layers).to(device)
    if backend == "compile":
        from torch import _dynamo

        _dynamo.reset()
        for block in model.stack.blocks:
            block.compile(dynamic=False)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=device == "cuda")
    tokens = torch.randint(0, VOCAB, (B, T + 1), generator=torch.Generator().manual_seed(3))
    inp, tgt = tokens[:, :-1].to(device), tokens[:, 1:].reshape(-1).to(device)
    mode = {"ours": None, "on": None, "off": None, "compile": "eager"}.get(backend, backend)

    def step() -> torch.Tensor:
        with _mode(mode), torch.autocast(device, torch.bfloat16, enabled=case.precision == "bf16"):
            loss = F.cross_entropy(model(inp).reshape(-1, VOCAB).float(), tgt)
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def copy_bandwidth(device: str) -> float:
    """Device copy bandwidth in bytes/s: a 1 GiB ``clone`` (read + write; 64 MiB on CPU)."""
    x = torch.ones((1 << 28) if device == "cuda" else (1 << 24), device=device)
    ms = timers.torch_time(x.clone, device, warmup=2, repeats=5)
    return 2 * x.numel() * 4 / (ms * 1e-3)


def hook_rows(case: Case, device: str, rounds: int) -> list[dict[str, Any]]:
    """The step with the hook ``case.name`` (``all``: every hook) off and on, paired in one
    process: the training step, or for ``jax_triton_compile`` a MinGRU fwd+bwd through
    jax-triton (a fresh ``jax.jit`` traced on each side)."""
    try:
        from mingru_kernels import _compat
    except ImportError as exc:
        raise Skip(f"mingru_kernels._compat not importable: {exc}") from None
    names = () if case.name == "all" else (case.name,)
    if case.name == "jax_triton_compile":
        from mingru_benchmarks import jax_side

        on = jax_side.hook_subject(case, device)
        with _compat.hooks_disabled(*names):
            off = jax_side.hook_subject(case, device)
        measure = lambda call: timers.jax_time(call, 2, 5)
    else:
        on = off = train_step(case, "ours", device)
        measure = lambda call: timers.torch_time(call, device, 2, 5, rep_ms=300)

    def disabled() -> float:
        with _compat.hooks_disabled(*names):
            return measure(off)

    times = timers.paired({"on": lambda: measure(on), "off": disabled}, rounds)
    return [{"ms": statistics.median(times["on"]), "backend": "on"},
            {"ms": statistics.median(times["off"]), "backend": "off",
             "off_vs_on": timers.paired_ratio(times["off"], times["on"])}]
