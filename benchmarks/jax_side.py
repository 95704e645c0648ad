"""The JAX side: the ``mingru_jax`` twin of a case, jitted, on ``jax`` (its eager path) or
``jax-triton`` (its kernels).

Inputs are generated in NumPy (the same recipes as the PyTorch side, not the same values);
``fwd+bwd`` is ``jax.grad`` of the ``float32`` sum of every output with respect to every input
(and a mixer's parameters). The backend is chosen inside the traced function: it is read when
``jax.jit`` traces, at the first call.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from mingru_benchmarks.registry import MIXERS, Case, Skip

__all__ = ["hook_subject", "timed_call"]


def _inputs(op: str, dims: tuple[int, ...]) -> list[Any]:
    import numpy as np

    B, T, D = dims
    rng = np.random.default_rng(0)
    r = lambda *s: rng.standard_normal(s, dtype=np.float32)
    u = lambda *s: rng.random(s, dtype=np.float32)
    if op == "parallel_scan_log":
        return [-np.logaddexp(0, r(B, T, D)), 0.5 * r(B, T + 1, D)]
    if op in ("linear_scan", "linear_recurrence"):
        return [0.5 + 0.5 * u(B, T, D), r(B, T, D)]
    if op == "matrix_scan":
        ang, rad = r(B, T, D // 2), 0.9 + 0.1 * u(B, T, D // 2)
        c, s = rad * np.cos(ang), rad * np.sin(ang)
        return [np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2), r(B, T, D // 2, 2)]
    if op == "matrix_affine_scan":
        return [r(B, T, D // 8, 8, 8) * (0.5 / 8**0.5), r(B, T, D // 8, 8, 1)]
    if op == "givens_cell":  # 8×8 blocks, 3 rounds: [k_θ | k_z | k_h]
        return [r(B, T, D * 3 // 2 + 2 * D)]
    return [r(B, T, {"mingru_cell": 2, "signed_mingru_cell": 3, "rotation_cell": 3}[op] * D)]


def _function(case: Case) -> tuple[Callable[..., Any], list[Any]]:
    """``(fn, args)``: the op on its inputs, or the mixer as a function of (state, x)."""
    import jax.numpy as jnp
    import numpy as np

    import mingru_jax

    if case.name in MIXERS:
        from flax import nnx

        d = case.dims[-1]
        graphdef, state = nnx.split(getattr(mingru_jax, case.name)(d, d, rngs=nnx.Rngs(0)))
        x = np.random.default_rng(1).standard_normal(case.dims, dtype=np.float32)
        return (lambda st, x_: nnx.merge(graphdef, st)(x_)), [state, jnp.asarray(x)]
    fn = getattr(mingru_jax, case.name)
    if case.name == "givens_cell":
        fn = functools.partial(fn, block_size=8, rounds=3)
    return fn, [jnp.asarray(x) for x in _inputs(case.name, case.dims)]


def timed_call(case: Case, backend: str, mode: str, device: str) -> tuple[Callable[[], Any], dict]:
    """The jitted call of ``case`` on ``backend`` (``jax`` or ``jax-triton``)."""
    try:
        import jax
        import jax.numpy as jnp

        import mingru_jax
    except ImportError as exc:
        raise Skip(f"jax / mingru_jax not importable: {exc}") from None
    if backend == "jax-triton" and (why := mingru_jax.available()) is not True:
        raise Skip(str(why))
    if case.precision != "fp32":
        raise Skip("the JAX rows are fp32")
    fn, args = _function(case)

    def traced(*a: Any) -> Any:
        with mingru_jax.use_backend("triton" if backend == "jax-triton" else "eager"):
            return fn(*a)

    if mode == "fwd":
        f = jax.jit(traced)
    else:
        def loss(*a: Any) -> Any:
            out = traced(*a)
            return sum(jnp.sum(o.astype(jnp.float32)) for o in (out if isinstance(out, tuple)
                                                                   else (out,)))

        f = jax.jit(jax.grad(loss, argnums=tuple(range(len(args)))))
    return (lambda: f(*args)), {}


def hook_subject(case: Case, device: str) -> Callable[[], Any]:
    """MinGRU fwd+bwd through jax-triton at the training step's ``B, T, d``, freshly jitted and
    traced now (so a private-hook switch around this call decides its lowering)."""
    import jax

    B, T, d, _ = case.dims
    call, _ = timed_call(Case("jax", "MinGRU", (B, T, d)), "jax-triton", "fwd+bwd", device)
    jax.block_until_ready(call())
    return call
