"""The checks of ``tests/jax/test_sequence_parallel.py``, run as a script in a fresh process:
``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must reach jax before it initialises
its CPU backend, which the pytest process (whose other JAX tests imported jax) cannot redo.

Usage: ``python tests/jax/_sequence_parallel_worker.py [KIND ...]`` (all kinds by default).
For each kind, with an initial state and without (one of the two on a mesh over the first 2
CPU devices, the other over the first 4, alternating between kinds; the block-rotation
mixers and the stack only with one, see :func:`run_kind`): ``jax.jit`` of
``jax.shard_map`` of the call with ``axis_name=`` must equal the single-device call on the
whole sequence — outputs and the whole sequence's final state (≤ 1e-5 relative) and the
gradients of a scalar loss with respect to every input and every module parameter (≤ 1e-4
relative). The loss is taken outside ``shard_map`` (the parameters and the initial state
enter replicated, ``P()``, so JAX sums their per-device gradients); one case also takes it
inside ``shard_map`` (``check_vma=False``) and ``psum``s the replicated gradients by hand, as
a training step under ``shard_map`` would. Prints one line per case and exits non-zero on the
first failure.
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":  # run as a script: make ``tests`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

import mingru_jax
from mingru_jax.cells import mingru_cell, signed_mingru_cell
from tests.helpers import rel_err

B, T, D = 2, 12, 5
AXIS = "sp"


def _case(kind: str, with_h0: bool, rng: np.random.Generator):
    """``(fn, sliced, shared)``: ``fn(sliced, shared, axis_name) -> (h, h_T or None)``, where
    ``sliced`` (split along T) and ``shared`` (replicated) are dicts of arrays (``h_T``: the
    whole sequence's final state, any pytree)."""
    f32 = np.float32

    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), f32)

    def positive(*shape):
        return jnp.asarray(rng.uniform(0.1, 1.1, shape), f32)

    if kind == "linear_recurrence":
        sliced = {"a": jnp.tanh(2 * normal(B, T, D)), "b": normal(B, T, D)}

        def fn(s, r, axis_name):
            return mingru_jax.linear_recurrence(s["a"], s["b"], r.get("h0"), True,
                                                axis_name=axis_name)

        return fn, sliced, {"h0": positive(B, D)} if with_h0 else {}
    if kind in ("mingru_cell", "signed_mingru_cell"):
        n = 2 if kind == "mingru_cell" else 3
        sliced = {"k": 2 * normal(B, T, n * D),
                  "lg": -jnp.asarray(rng.uniform(0, 1, (B, T, 1)), f32)}

        def fn(s, r, axis_name):
            if kind == "mingru_cell":
                return mingru_cell(s["k"], r.get("h0"), s["lg"], True, axis_name=axis_name)
            return signed_mingru_cell(s["k"], r.get("h0"), s["lg"], coupled=True,
                                      return_final_state=True, axis_name=axis_name)

        return fn, sliced, {"h0": positive(B, D)} if with_h0 else {}
    decay = {"decay": "learnable"}
    make, state = {  # the module, and the shape of a given initial state
        "MinGRU": (lambda rngs: mingru_jax.MinGRU(4, D, **decay, rngs=rngs), (B, 1, D)),
        "SignedMinGRU": (lambda rngs: mingru_jax.SignedMinGRU(4, D, **decay, rngs=rngs),
                         (B, 1, D)),
        "RotationMinGRU": (lambda rngs: mingru_jax.RotationMinGRU(4, 6, **decay, rngs=rngs),
                           (B, 1, 6)),
        "GivensMinGRU": (lambda rngs: mingru_jax.GivensMinGRU(
            4, 8, block_size=4, rounds=2, **decay, rngs=rngs), (B, 1, 8)),
        "DeltaMinGRU": (lambda rngs: mingru_jax.DeltaMinGRU(
            4, D, n_heads=2, d_k=3, d_v=2, chunk_size=2, **decay, rngs=rngs),
            (B, 1, 12)),
        "MinGRUStack": (lambda rngs: mingru_jax.MinGRUStack(  # both kinds of block state
            4, 6, 2, mlp_expansion=0, mixer=["signed", "delta"],
            mixer_kwargs={"delta": {"n_heads": 2, "chunk_size": 2}}, rngs=rngs), None),
    }[kind]
    graphdef, params = nnx.split(make(nnx.Rngs(int(rng.integers(1 << 30)))))
    sliced = {"x": normal(B, T, 4)}
    shared = {"params": params}
    if kind == "MinGRUStack":
        if with_h0:
            shared["h0"] = [normal(B, 1, 6), normal(B, 1, 18)]

        def fn(s, r, axis_name):
            stack = nnx.merge(graphdef, r["params"])
            return stack(s["x"], r.get("h0"), axis_name=axis_name)

        return fn, sliced, shared
    sliced["dt"] = jnp.asarray(rng.uniform(0, 1, (B, T)), f32)
    if with_h0:
        shared["h0"] = positive(*state)

    def fn(s, r, axis_name):
        mixer = nnx.merge(graphdef, r["params"])
        kw = dict(h_0=r.get("h0"), delta_t=s["dt"], axis_name=axis_name)
        if kind == "DeltaMinGRU":
            return mixer(s["x"], return_state=True, **kw)
        return mixer(s["x"], **kw), None

    return fn, sliced, shared


def _loss(out) -> jax.Array:
    """A scalar loss of the (global) outputs: fixed weights of each leaf's shape."""
    return sum(jnp.sum(t * jnp.sin(jnp.arange(t.size, dtype=t.dtype) + 0.5).reshape(t.shape))
               for t in jax.tree.leaves(out))


def _check(what: str, got, want, tol: float) -> None:
    got_leaves, want_leaves = jax.tree.leaves(got), jax.tree.leaves(want)
    assert len(got_leaves) == len(want_leaves), what
    for g, w in zip(got_leaves, want_leaves, strict=True):
        err = rel_err(g, w)
        assert err <= tol, f"{what}: relative error {err:.3g} > {tol:g}"


def run_kind(kind: str, seed: int) -> None:
    """With and without an initial state, one on 2 devices and the other on 4 (alternating
    with ``seed``, so every kind and device count meets both). The slowest to compile only
    with one: the block-rotation mixers (without one they start from their learned ``h0``,
    the same sharded path as a given state) and the stack (its mixers are checked alone)."""
    once = ("RotationMinGRU", "GivensMinGRU", "MinGRUStack")
    for with_h0 in (True,) if kind in once else (True, False):
        n = 2 if (seed // 10 + with_h0) % 2 else 4
        t0 = time.perf_counter()
        run_case(kind, with_h0, n, np.random.default_rng(seed + int(with_h0)))
        print(f"ok {kind} n={n} h0={with_h0} ({time.perf_counter() - t0:.2f} s)", flush=True)


def run_case(kind: str, with_h0: bool, n: int, rng: np.random.Generator) -> None:
    fn, sliced, shared = _case(kind, with_h0, rng)

    def ref_loss(sliced, shared):
        out = fn(sliced, shared, None)
        return _loss(out), out

    h_T = jax.eval_shape(ref_loss, sliced, shared)[1][1]
    mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
    spec = P(None, AXIS)
    sharded = jax.shard_map(
        lambda s, r: fn(s, r, AXIS), mesh=mesh,
        in_specs=(jax.tree.map(lambda _: spec, sliced), P()),
        out_specs=(spec, None if h_T is None else P()))

    def loss(sliced, shared):
        out = sharded(sliced, shared)
        return _loss(out), out

    def both(sliced, shared):  # one compilation for the reference and the sharded call
        return [jax.value_and_grad(f, (0, 1), has_aux=True)(sliced, shared)
                for f in (ref_loss, loss)]

    ((_, (h, h_T)), ref_grads), ((_, (hs, hs_T)), grads) = jax.jit(both)(sliced, shared)
    label = f"{kind} n={n} h0={with_h0}"
    _check(f"{label}: outputs", hs, h, 1e-5)
    if h_T is not None:
        _check(f"{label}: final state", hs_T, h_T, 1e-5)
    _check(f"{label}: gradients", grads, ref_grads, 1e-4)


def run_grad_inside_shard_map() -> None:
    """A training step inside ``shard_map`` (``check_vma=False``): each device's gradients
    of the replicated parameters are partials of the whole loss; their ``psum`` is the
    single-device gradient."""
    rng = np.random.default_rng(123)
    fn, sliced, shared = _case("MinGRU", True, rng)
    w = jnp.asarray(rng.standard_normal((B, T, D)), np.float32)

    def local_loss(s, r, w, axis_name):
        h, _ = fn(s, r, axis_name)
        return jnp.sum(h * w)

    ref = jax.jit(jax.grad(local_loss, 1), static_argnums=3)(sliced, shared, w, None)
    n = 4
    mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
    spec = P(None, AXIS)

    def step(s, r, w):
        g = jax.grad(local_loss, 1)(s, r, w, AXIS)
        return jax.lax.psum(g, AXIS)

    got = jax.jit(jax.shard_map(step, mesh=mesh, in_specs=(
        jax.tree.map(lambda _: spec, sliced), P(), spec), out_specs=P(), check_vma=False))(
        sliced, shared, w)
    _check("grad inside shard_map: psum of the replicated gradients", got, ref, 1e-4)
    print("ok MinGRU grad inside shard_map + psum", flush=True)


def run_data_and_sequence_parallel() -> None:
    """The recipe of ``docs/how-to/shard-sequences.md``: a 2 × 2 mesh with a data axis (the
    batch) and a sequence axis (T), the parameters replicated, the loss (a mean over every
    token) taken on the global output: its gradients equal one device's on the whole batch."""
    rng = np.random.default_rng(7)
    fn, sliced, shared = _case("MinGRUStack", False, rng)
    y = jnp.asarray(rng.standard_normal((B, T, 6)), np.float32)
    mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", AXIS))
    spec = P("data", AXIS)
    sharded = jax.shard_map(lambda s, r: fn(s, r, AXIS)[0], mesh=mesh,
                            in_specs=(jax.tree.map(lambda _: spec, sliced), P()),
                            out_specs=spec)

    def loss(forward, sliced, shared):
        return jnp.mean((forward(sliced, shared) - y) ** 2)

    def both(sliced, shared):
        one = jax.value_and_grad(loss, 2)(lambda s, r: fn(s, r, None)[0], sliced, shared)
        return one, jax.value_and_grad(loss, 2)(sharded, sliced, shared)

    (ref, ref_grads), (got, grads) = jax.jit(both)(sliced, shared)
    _check("data x sequence: loss", got, ref, 1e-5)
    _check("data x sequence: parameter gradients", grads, ref_grads, 1e-4)
    print("ok MinGRUStack data x sequence mesh (2 x 2)", flush=True)


KINDS = ["linear_recurrence", "mingru_cell", "signed_mingru_cell", "MinGRU", "SignedMinGRU",
         "RotationMinGRU", "GivensMinGRU", "DeltaMinGRU", "MinGRUStack"]


def main(kinds: list[str]) -> None:
    assert len(jax.devices()) >= 4, f"needs 4 CPU devices; got {jax.devices()}"
    for kind in kinds:
        run_kind(kind, seed=10 * KINDS.index(kind))
    run_grad_inside_shard_map()
    run_data_and_sequence_parallel()


if __name__ == "__main__":
    main(sys.argv[1:] or KINDS)
