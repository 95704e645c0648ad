"""The packed checks of ``tests/jax/test_sequence_parallel.py``, run as a script in a fresh
process (4 CPU devices through ``XLA_FLAGS``, 64-bit JAX; see
``tests/jax/_sequence_parallel_worker.py`` for why a subprocess).

Packed and sharded together: one packed row (the GLOBAL ``cu_seqlens``, replicated) split
along T over a mesh of 2 and of 4 devices (slices of 12 and 6 steps). The offsets
``[0, 0, 3, 6, 6, 20, 24]`` hold an empty sequence first, an empty one exactly at the
boundary of devices 0 and 1, a sequence opening exactly at device 1's first step and running
across devices 1, 2 and 3 (device 2 lies wholly inside it: its map passes the carry through),
and a last one ending the row. For ``linear_recurrence``, both cells, ``MinGRU``,
``SignedMinGRU`` and a two-layer ``MinGRUStack`` (a log and a signed layer), with initial
states given and not, ``jax.jit`` of ``jax.shard_map`` of the packed call with
``axis_name=`` must equal each sequence run ALONE (unpacked, one device; an empty sequence's
final state is its initial state): every device's states, every sequence's final state on
every device (returned stacked along the axis, so each device's copy is compared), and the
gradients of a scalar loss with respect to every input and parameter (float64, ≤ 1e-10 /
1e-9 relative). Prints one line per case and exits non-zero on the first failure.

Usage: ``python tests/jax/_packed_sequence_parallel_worker.py [KIND ...]``.
"""

from __future__ import annotations

import os
import sys
import time

if __name__ == "__main__":  # run as a script: make ``tests`` importable
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402
from jax.sharding import Mesh  # noqa: E402
from jax.sharding import PartitionSpec as P  # noqa: E402

import mingru_jax  # noqa: E402
from tests.jax._sequence_parallel_worker import _check, _loss  # noqa: E402

CU = [0, 0, 3, 6, 6, 20, 24]
N, T, D, D_IN = len(CU) - 1, CU[-1], 3, 4
AXIS = "sp"
F64 = jnp.float64


def _alone(call, sliced, start):
    """Each sequence run alone: ``call(piece, n) -> (h (1, t, ·), h_T (1, ·))`` on the
    sequence's steps of every ``sliced`` array; an empty sequence's final state is
    ``start(n)``. Returns the packed row's ``(h, finals)``."""
    hs, finals = [], []
    for n, (lo, hi) in enumerate(zip(CU, CU[1:], strict=False)):
        if hi == lo:
            finals.append(start(n))
            continue
        h, h_T = call({key: x[:, lo:hi] for key, x in sliced.items()}, n)
        hs.append(h)
        finals.append(h_T.reshape(-1))
    return jnp.concatenate(hs, axis=1), jnp.stack(finals)


def _case(kind: str, with_h0: bool, rng: np.random.Generator):
    """``(packed, alone, sliced, shared)``: ``packed(sliced, shared, axis_name)`` and
    ``alone(sliced, shared)`` both return ``(h (1, T, ·), finals (N, ·))``."""
    def normal(*shape):
        return jnp.asarray(rng.standard_normal(shape), F64)

    def positive(*shape):
        return jnp.asarray(rng.uniform(0.1, 1.1, shape), F64)

    cu = jnp.asarray(CU)
    if kind in ("linear_recurrence", "mingru_cell", "signed_mingru_cell"):
        if kind == "linear_recurrence":
            sliced = {"a": jnp.tanh(2 * normal(1, T, D)), "b": normal(1, T, D)}
        else:
            gates = 2 if kind == "mingru_cell" else 3
            sliced = {"k": 2 * normal(1, T, gates * D),
                      "lg": -jnp.asarray(rng.uniform(0, 1, (1, T, 1)), F64)}
        shared = {"h0": positive(N, D)} if with_h0 else {}

        def op(s, h0, axis_name, cu_seqlens):
            packed = {"cu_seqlens": cu_seqlens} if cu_seqlens is not None else {}
            if kind == "linear_recurrence":
                return mingru_jax.linear_recurrence(s["a"], s["b"], h0, True,
                                                    axis_name=axis_name, **packed)
            if kind == "mingru_cell":
                return mingru_jax.mingru_cell(s["k"], h0, s["lg"], True, axis_name=axis_name,
                                              **packed)
            return mingru_jax.signed_mingru_cell(s["k"], h0, s["lg"], coupled=True,
                                                 return_final_state=True,
                                                 axis_name=axis_name, **packed)

        def packed(s, r, axis_name):
            return op(s, r.get("h0"), axis_name, cu)

        def alone(s, r):
            h0 = r.get("h0")
            return _alone(lambda piece, n: op(piece, None if h0 is None else h0[n:n + 1],
                                              None, None),
                          s, lambda n: jnp.zeros(D, F64) if h0 is None else h0[n])

        return packed, alone, sliced, shared
    graphdef, params = nnx.split(_module(kind, nnx.Rngs(int(rng.integers(1 << 30)))))
    sliced = {"x": normal(1, T, D_IN)}
    shared = {"params": params}
    if kind == "MinGRUStack":
        if with_h0:
            shared["h0"] = [positive(N, 1, D), normal(N, 1, D)]

        def packed(s, r, axis_name):
            out, states = nnx.merge(graphdef, r["params"])(s["x"], r.get("h0"), cu_seqlens=cu,
                                                           axis_name=axis_name)
            return out, jnp.concatenate([state[:, 0] for state in states], axis=-1)

        def alone(s, r):
            stack = nnx.merge(graphdef, r["params"])
            h0 = r.get("h0")

            def one(piece, n):
                out, states = stack(piece["x"], None if h0 is None else [h[n:n + 1] for h in h0])
                return out, jnp.concatenate([state[:, 0] for state in states], axis=-1)

            def start(n):
                if h0 is not None:
                    return jnp.concatenate([h[n, 0] for h in h0])
                return jnp.concatenate([block.mixer.initial_state(1, F64)[0]
                                        for block in stack.blocks])

            return _alone(one, s, start)

        return packed, alone, sliced, shared
    sliced["dt"] = jnp.asarray(rng.uniform(0, 1, (1, T)), F64)
    if with_h0:
        shared["h0"] = positive(N, 1, D)

    def packed(s, r, axis_name):
        h, state = nnx.merge(graphdef, r["params"])(s["x"], r.get("h0"), s["dt"], True,
                                                    cu_seqlens=cu, axis_name=axis_name)
        return h, state[:, 0]

    def alone(s, r):
        mixer = nnx.merge(graphdef, r["params"])
        h0 = r.get("h0")

        def one(piece, n):
            return mixer(piece["x"], None if h0 is None else h0[n:n + 1], piece["dt"], True)

        return _alone(one, s, lambda n: mixer.initial_state(1, F64)[0] if h0 is None
                      else h0[n, 0])

    return packed, alone, sliced, shared


def _module(kind: str, rngs: nnx.Rngs) -> nnx.Module:
    kw = dict(param_dtype=F64, rngs=rngs)
    if kind == "MinGRU":  # a learned h0: the default state of every sequence
        return mingru_jax.MinGRU(D_IN, D, learnable_h0=True, decay="learnable", **kw)
    if kind == "SignedMinGRU":
        return mingru_jax.SignedMinGRU(D_IN, D, coupled=True, decay="learnable", **kw)
    return mingru_jax.MinGRUStack(D_IN, D, 2, mlp_expansion=0, mixer=["log", "signed"], **kw)


def run_case(kind: str, with_h0: bool, n: int, rng: np.random.Generator) -> None:
    packed, alone, sliced, shared = _case(kind, with_h0, rng)
    mesh = Mesh(np.array(jax.devices()[:n]), (AXIS,))
    sharded = jax.shard_map(
        lambda s, r: packed(s, r, AXIS), mesh=mesh, in_specs=(jax.tree.map(lambda _: P(None, AXIS), sliced), P()),
        out_specs=(P(None, AXIS), P()))
    # Every device's copy of the final states, stacked along the axis.
    copies = jax.shard_map(lambda s, r: packed(s, r, AXIS)[1][None], mesh=mesh,
                           in_specs=(jax.tree.map(lambda _: P(None, AXIS), sliced), P()),
                           out_specs=P(AXIS))

    def loss_of(fn):
        def loss(sliced, shared):
            out = fn(sliced, shared)
            return _loss(out), out
        return loss

    def both(sliced, shared):  # one compilation for the oracle and the sharded call
        grads = [jax.value_and_grad(loss_of(f), (0, 1), has_aux=True)(sliced, shared)
                 for f in (alone, sharded)]
        return grads, copies(sliced, shared)

    (((_, (h, finals)), ref_grads), ((_, (hs, fs)), grads)), every = jax.jit(both)(sliced,
                                                                                 shared)
    label = f"{kind} n={n} h0={with_h0}"
    _check(f"{label}: states", hs, h, 1e-10)
    _check(f"{label}: final states", fs, finals, 1e-10)
    for device in range(n):
        _check(f"{label}: final states on device {device}", every[device], finals, 1e-10)
    _check(f"{label}: gradients", grads, ref_grads, 1e-9)


KINDS = ["linear_recurrence", "mingru_cell", "signed_mingru_cell", "MinGRU", "SignedMinGRU",
         "MinGRUStack"]


def main(kinds: list[str]) -> None:
    assert len(jax.devices()) >= 4, f"needs 4 CPU devices; got {jax.devices()}"
    for i, kind in enumerate(kinds):
        # With and without initial states, one on 2 devices and the other on 4, alternating.
        for with_h0 in (True, False):
            n = 2 if (i + with_h0) % 2 else 4
            t0 = time.perf_counter()
            run_case(kind, with_h0, n, np.random.default_rng(10 * i + with_h0))
            print(f"ok {kind} n={n} h0={with_h0} ({time.perf_counter() - t0:.2f} s)",
                  flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or KINDS)
