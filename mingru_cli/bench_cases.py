"""Benchmark cases for ``mingru bench``: input builders, the plain sequential-loop baselines,
and the per-backend callables (eager, Triton, torch.compile, JAX, peer kernels).

A :class:`Case` is one (op, shape) pair. ``make()`` builds fresh inputs; ``runners`` maps a
backend name to a function of those inputs returning a tensor or a tuple of tensors. The
harness in :mod:`mingru_cli.bench` times ``fwd`` (under ``no_grad``) and ``fwd+bwd`` (forward,
then ``.float().sum().backward()`` over every output) for each backend.

The sequential loops are the obvious implementation — a few PyTorch ops per time step — written
independently of the library, so a ratio against them measures what the parallel scan buys.
They take time steps with ``unbind(1)`` rather than indexing ``x[:, t]``: indexing would make
autograd add a full-size zero-padded gradient per step (``O(T²)`` memory traffic), which
would flatter the scans unfairly.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

Tensors = tuple[torch.Tensor, ...]
Runner = Callable[..., Any]

SCAN_OPS = ("parallel_scan_log", "linear_scan", "matrix_scan", "matrix_affine_scan")
MIXERS = ("log", "signed", "rotation", "givens", "delta")


@dataclass
class Case:
    """One benchmark row group: an op at one shape, with a runner per backend."""

    group: str
    op: str
    shape: str
    make: Callable[[bool], Tensors]  # requires_grad -> inputs
    runners: dict[str, Runner] = field(default_factory=dict)
    modes: tuple[str, ...] = ("fwd", "fwd+bwd")
    module: torch.nn.Module | None = None  # mixers: parameters also need grads cleared
    skip: dict[str, str] = field(default_factory=dict)  # backend -> why it did not run
    flops: dict[str, float] = field(default_factory=dict)  # mode -> nominal FLOPs per call
    bytes_moved: dict[str, float] = field(default_factory=dict)  # mode -> least HBM bytes
    peak_flops: float | None = None  # FLOP/s ceiling of the case's dtype (compute floor)
    reference: Callable[[], torch.Tensor] | None = None  # float64 first output (error column)


# --------------------------------------------------------------------------- loop baselines


def loop_log_scan(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    """``h_t = a_t h_{t-1} + b_t`` one step at a time, from the log-space inputs."""
    a, b = log_coeffs.exp().unbind(1), log_values.exp().unbind(1)
    h = b[0]
    out = []
    for t in range(len(a)):
        h = a[t] * h + b[t + 1]
        out.append(h)
    return torch.stack(out, 1)


def loop_linear_scan(a: torch.Tensor, b: torch.Tensor) -> Tensors:
    """Running product ``P`` and zero-start state ``Z``, one step at a time."""
    p = torch.ones_like(a[:, 0])
    z = torch.zeros_like(b[:, 0])
    ps, zs = [], []
    for a_t, b_t in zip(a.unbind(1), b.unbind(1), strict=True):
        p = a_t * p
        z = a_t * z + b_t
        ps.append(p)
        zs.append(z)
    return torch.stack(ps, 1), torch.stack(zs, 1)


def loop_matrix_scan(A: torch.Tensor, Bm: torch.Tensor) -> Tensors:
    """``P_t = A_t P_{t-1}``, ``Z_t = A_t Z_{t-1} + B_t`` with batched matmuls, step by step."""
    k = A.shape[-1]
    p = torch.eye(k, dtype=A.dtype, device=A.device).expand_as(A[:, 0])
    z = torch.zeros_like(Bm[:, 0])
    ps, zs = [], []
    for A_t, B_t in zip(A.unbind(1), Bm.unbind(1), strict=True):
        p = A_t @ p
        z = A_t @ z + B_t
        ps.append(p)
        zs.append(z)
    return torch.stack(ps, 1), torch.stack(zs, 1)


def loop_matrix_scan_2x2(M: torch.Tensor, b: torch.Tensor) -> Tensors:
    P, Z = loop_matrix_scan(M, b.unsqueeze(-1))
    return P, Z.squeeze(-1)


def loop_mixer(mixer: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The mixer run token by token through its ``step`` method (the O(1) recurrent form)."""
    h = None
    outs = []
    for x_t in x.unbind(1):
        out = mixer.step(x_t, h)
        if isinstance(out, tuple):  # DeltaMinGRU.step returns (y_t, h_t)
            y, h = out
        else:
            y = h = out
        outs.append(y)
    return torch.stack(outs, 1)


LOOPS: dict[str, Runner] = {
    "parallel_scan_log": loop_log_scan,
    "linear_scan": loop_linear_scan,
    "matrix_scan": loop_matrix_scan_2x2,
    "matrix_affine_scan": loop_matrix_scan,
}


# --------------------------------------------------------------------------- inputs


def scan_inputs(op: str, B: int, T: int, D: int, device: str, dtype: torch.dtype,
                seed: int = 0) -> Callable[[bool], Tensors]:
    """A builder of well-conditioned inputs for ``op`` at width ``D`` (blocks: ``D/k``).

    ``matrix_scan`` uses ``n = D/2`` 2×2 blocks; ``matrix_affine_scan`` uses ``n = D/8``
    8×8 blocks with ``v = 1``. Transitions are contractive so long products stay finite.
    """

    def make(requires_grad: bool) -> Tensors:
        g = torch.Generator(device="cpu").manual_seed(seed)

        def rnd(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g)

        if op == "parallel_scan_log":
            xs = (-torch.nn.functional.softplus(rnd(B, T, D)), 0.5 * rnd(B, T + 1, D))
        elif op == "linear_scan":
            xs = (0.5 + 0.5 * torch.rand(B, T, D, generator=g), rnd(B, T, D))
        elif op == "matrix_scan":
            n = max(1, D // 2)
            ang = rnd(B, T, n)
            r = 0.9 + 0.1 * torch.rand(B, T, n, generator=g)
            c, s = r * ang.cos(), r * ang.sin()
            M = torch.stack([torch.stack([c, -s], -1), torch.stack([s, c], -1)], -2)
            xs = (M, rnd(B, T, n, 2))
        elif op == "matrix_affine_scan":
            n, k = max(1, D // 8), 8
            xs = (rnd(B, T, n, k, k) * (0.5 / k**0.5), rnd(B, T, n, k, 1))
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown scan op {op!r}")
        return tuple(x.to(device=device, dtype=dtype).requires_grad_(requires_grad) for x in xs)

    return make


FUSED_OPS = ("givens_recurrence", "delta_rule")


def fused_inputs(op: str, B: int, T: int, D: int, device: str, dtype: torch.dtype,
                 seed: int = 0, heads: int = 4, nh: int = 1,
                 decay: bool = False) -> Callable[[bool], Tensors]:
    """Inputs of the fused mixer recurrences at width ``D``.

    ``givens_recurrence``: ``n = D/8`` blocks of ``k = 8``, 3 rounds (GivensMinGRU's default).
    ``delta_rule``: ``q, k, v, beta`` with ``heads`` heads of ``d_k = d_v = D/heads``, ``nh``
    micro-steps, unit-norm keys; with ``decay`` also ``log_gamma (B, T, heads)`` (γ ≈ 0.95).
    """

    def make(requires_grad: bool) -> Tensors:
        g = torch.Generator(device="cpu").manual_seed(seed)

        def rnd(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, generator=g)

        if op == "givens_recurrence":
            n = max(1, D // 8)
            xs = (0.3 * rnd(B, T, n, 3, 4), rnd(B, T, n, 8), rnd(B, n, 8))
        elif op == "delta_rule":
            H, dk = heads, max(1, D // heads)
            k = torch.nn.functional.normalize(rnd(B, T, nh, H, dk), dim=-1)
            beta = 2 * torch.sigmoid(rnd(B, T, nh, H))
            xs = (rnd(B, T, H, dk) / dk**0.5, k, rnd(B, T, nh, H, dk), beta)
            if decay:
                xs += (torch.nn.functional.logsigmoid(3 + rnd(B, T, H)),)
        else:  # pragma: no cover - programming error
            raise ValueError(f"unknown fused op {op!r}")
        return tuple(x.to(device=device, dtype=dtype).requires_grad_(requires_grad) for x in xs)

    return make


def fused_eager(op: str) -> Runner:
    """The library's eager twin of a fused op, called directly (no dispatch)."""
    if op == "givens_recurrence":
        from mingru._eager.givens_recurrence import givens_recurrence_eager

        return lambda theta, b, h0: givens_recurrence_eager(theta, b, h0, None, None)
    from mingru._eager.delta_rule import delta_rule_eager

    return lambda q, k, v, beta, log_gamma=None: delta_rule_eager(q, k, v, beta, log_gamma,
                                                                  None, 64)


def fused_public(op: str) -> Runner:
    """The fused op through its validated private entry and the dispatch seam (so
    ``use_backend`` picks eager or Triton)."""
    if op == "givens_recurrence":
        from mingru.scans import _givens_recurrence

        return lambda theta, b, h0: _givens_recurrence(theta, b, h0)
    from mingru.scans import _delta_rule

    return lambda q, k, v, beta, log_gamma=None: _delta_rule(q, k, v, beta, log_gamma, None, 64)


def build_mixer(name: str, d: int, device: str, dtype: torch.dtype) -> torch.nn.Module:
    """A mixer with ``input_size = hidden_size = d`` and the library defaults
    (Givens: block 8, 3 rounds; Delta: 4 heads)."""
    import mingru

    cls = {"log": mingru.MinGRU, "signed": mingru.SignedMinGRU, "rotation": mingru.RotationMinGRU,
           "givens": mingru.GivensMinGRU, "delta": mingru.DeltaMinGRU}[name]
    torch.manual_seed(0)
    return cls(d, d).to(device=device, dtype=dtype)


# --------------------------------------------------------------------------- backends


def _with_backend(mode: str, fn: Runner) -> Runner:
    import mingru

    def run(*xs: Any) -> Any:
        with mingru.use_backend(mode):
            return fn(*xs)

    return run


def _eager_twin(op: str) -> Runner:
    """The library's eager implementation of ``op``, bypassing dispatch (for torch.compile)."""
    if op == "matrix_scan":
        affine = _eager_twin("matrix_affine_scan")

        def matrix_scan_eager(M: torch.Tensor, b: torch.Tensor) -> Tensors:
            P, Z = affine(M, b.unsqueeze(-1))
            return P, Z.squeeze(-1)

        return matrix_scan_eager
    module = importlib.import_module(f"mingru._eager.{op}")
    return getattr(module, f"{op}_eager")


def fresh_dynamo() -> None:
    """A fresh dynamo cache (each benchmark case compiles from scratch) with room for the
    recompiles a case may need."""
    import torch._dynamo

    torch._dynamo.reset()
    for knob in ("cache_size_limit", "recompile_limit"):
        if hasattr(torch._dynamo.config, knob):
            setattr(torch._dynamo.config, knob, 64)


def compiled(fn: Runner, **kwargs: Any) -> Runner:
    """``torch.compile`` of ``fn`` (static shapes unless ``kwargs`` say otherwise); each
    benchmark case gets a fresh dynamo cache."""
    fresh_dynamo()
    return torch.compile(fn, **{"dynamic": False, **kwargs})


def triton_status(device: str) -> str | None:
    """``None`` when the Triton backend can run on ``device``, else why not."""
    import mingru

    status = mingru.available()
    if status is not True:
        return str(status)
    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        return "CPU inputs (set TRITON_INTERPRET=1 to run the interpreter)"
    return None


def peer_status(module: str) -> str | None:
    try:
        importlib.import_module(module)
    except Exception as exc:
        return f"{module} not importable: {type(exc).__name__}: {exc}"
    return None


def _accelerated_scan(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # accelerated-scan wants (B, C, T) contiguous; its inputs are built in that layout below,
    # so the timing covers the kernel only.
    from accelerated_scan.scalar import scan

    return scan(a, b)


def _fla_hgrn(log_a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from fla.ops.hgrn import chunk_hgrn

    return chunk_hgrn(b, log_a)[0]


def peer_linear_scan_runners(make: Callable[[bool], Tensors]) -> dict[str, tuple[Callable, Runner]]:
    """Peer kernels for the diagonal recurrence (positive ``a``), each with its own input layout.

    Returns ``{backend: (make_inputs, run)}``; inputs are derived from the same tensors as the
    library's case so every backend solves the same recurrence.
    """

    def acc_make(rg: bool) -> Tensors:
        a, b = make(False)
        return tuple(x.transpose(1, 2).contiguous().requires_grad_(rg) for x in (a, b))

    def fla_make(rg: bool) -> Tensors:
        a, b = make(False)
        return a.log().contiguous().requires_grad_(rg), b.contiguous().requires_grad_(rg)

    return {"accelerated_scan": (acc_make, _accelerated_scan), "fla": (fla_make, _fla_hgrn)}


def jax_scan_runners(op: str, make: Callable[[bool], Tensors]) -> dict[str, tuple[Callable, Runner]]:
    """JAX twins of a scan op (``jax`` eager = ``lax.associative_scan``; ``jax-triton``), or
    of the fused ``delta_rule`` (``jax`` = its eager chunked twin).

    Each entry is ``(make_inputs, run)`` where ``run(mode, *xs)`` returns a compiled function
    of the JAX arrays; the harness calls it once per timing mode. ``fwd+bwd`` differentiates
    with respect to every input ``make`` builds.
    """
    import jax
    import jax.numpy as jnp
    import numpy as np

    mingru_jax = importlib.import_module("mingru_jax")
    if op == "delta_rule":
        from mingru_jax.scans import _delta_rule

        def fn(q: Any, k: Any, v: Any, beta: Any, log_gamma: Any = None) -> Any:
            return _delta_rule(q, k, v, beta, log_gamma, None, 64)
    else:
        fn = getattr(mingru_jax, op)
    n_args = len(make(False))

    def to_jax(rg: bool) -> tuple[Any, ...]:
        xs = make(False)
        return tuple(jnp.asarray(np.asarray(x.detach().cpu().float().numpy()), dtype=_jax_dtype(x))
                     for x in xs)

    def builder(backend_mode: str) -> Runner:
        def factory(timing_mode: str) -> Runner:
            # The backend is read when jit traces, at the first call: choose it inside the
            # traced function (around jax.jit's construction it would already be gone).
            def traced(*xs: Any) -> Any:
                with mingru_jax.use_backend(backend_mode):
                    return fn(*xs)

            if timing_mode == "fwd":
                return jax.jit(traced)

            def loss(*xs: Any) -> Any:
                out = traced(*xs)
                outs = out if isinstance(out, tuple) else (out,)
                return sum(jnp.sum(o.astype(jnp.float32)) for o in outs)

            return jax.jit(jax.grad(loss, argnums=tuple(range(n_args))))

        return factory

    out: dict[str, tuple[Callable, Runner]] = {"jax": (to_jax, builder("eager"))}
    status = mingru_jax.available()
    if status is True:
        out["jax-triton"] = (to_jax, builder("triton"))
    return out


def jax_mixer_runners(name: str, d: int, make: Callable[[bool], Tensors],
                      dtype: torch.dtype) -> dict[str, tuple[Callable, Runner]]:
    """The ``mingru_jax`` twin of a mixer (``input = hidden = d``), jitted; same protocol as
    :func:`jax_scan_runners`. Parameters are passed as an argument (not baked in as
    constants), and ``fwd+bwd`` differentiates with respect to parameters and input."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import nnx

    mingru_jax = importlib.import_module("mingru_jax")
    cls = getattr(mingru_jax, {"log": "MinGRU", "signed": "SignedMinGRU",
                               "rotation": "RotationMinGRU", "givens": "GivensMinGRU",
                               "delta": "DeltaMinGRU"}[name])
    jdt = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16,
           torch.float16: jnp.float16}[dtype]
    module = cls(d, d, rngs=nnx.Rngs(0), param_dtype=jdt)
    graphdef, state = nnx.split(module)

    def to_jax(rg: bool) -> tuple[Any, ...]:
        (x,) = make(False)
        return state, jnp.asarray(np.asarray(x.detach().cpu().float().numpy()), dtype=jdt)

    def builder(backend_mode: str) -> Runner:
        def factory(timing_mode: str) -> Runner:
            def fwd(st: Any, x: Any) -> Any:
                with mingru_jax.use_backend(backend_mode):
                    return nnx.merge(graphdef, st)(x)

            if timing_mode == "fwd":
                return jax.jit(fwd)

            def loss(st: Any, x: Any) -> Any:
                return jnp.sum(fwd(st, x).astype(jnp.float32))

            return jax.jit(jax.grad(loss, argnums=(0, 1)))

        return factory

    out: dict[str, tuple[Callable, Runner]] = {"jax": (to_jax, builder("eager"))}
    if mingru_jax.available() is True:
        out["jax-triton"] = (to_jax, builder("triton"))
    return out


def _jax_dtype(x: torch.Tensor) -> Any:
    import jax.numpy as jnp

    return {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16,
            torch.float16: jnp.float16}[x.dtype]


def jax_status() -> str | None:
    try:
        import jax  # noqa: F401

        mingru_jax = importlib.import_module("mingru_jax")
    except Exception as exc:
        return f"jax / mingru_jax not importable: {exc}"
    if not all(hasattr(mingru_jax, op) for op in SCAN_OPS):
        return "mingru_jax does not export the scan ops"
    return None


def all_outputs(out: Any) -> Sequence[torch.Tensor]:
    if isinstance(out, torch.Tensor):
        return (out,)
    return tuple(o for o in out if isinstance(o, torch.Tensor))
