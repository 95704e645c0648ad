"""Sequence parallelism in the JAX frontend (``axis_name=`` under ``jax.shard_map``).

The sharded checks need 4 CPU devices, i.e. ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
before jax initialises its backend; this pytest process has already initialised it, so they
run in ONE subprocess (``tests/jax/_sequence_parallel_worker.py``, eager backend): for every
op and mixer that takes ``axis_name``, the sharded call under ``jax.jit`` equals the
single-device call on the whole sequence — outputs, the whole sequence's final state, and the
gradients of every input and parameter — on 2 and on 4 devices, with and without an initial
state; and the data-parallel recipe (a 2 × 2 mesh, the batch over a data axis and T over the
sequence axis: the loss and parameter gradients equal one device's on the whole batch).
Packed and sharded together (``cu_seqlens`` with ``axis_name``) run in a second subprocess
(``tests/jax/_packed_sequence_parallel_worker.py``): equal to each sequence run alone. Bad
``axis_name`` values, and the mixers that do not take both together, are checked here,
in-process.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

import mingru_jax
from mingru_kernels._seam import interpreter_problem

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).parent


def run_worker(worker: Path, cases: int, *kinds: str, scan: str = "eager") -> None:
    """Run ``worker`` (a script of ``ok …`` lines, one per passed case; ``kinds``: its
    arguments) on 4 CPU devices with the ``scan`` backend (``triton``: the kernels through
    Triton's interpreter, set in the worker's environment, on a GPU machine too); fail with
    its output unless it passes all ``cases``."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["MINGRU_SCAN"] = scan
    if scan == "triton":
        env["TRITON_INTERPRET"] = "1"
    env["JAX_PLATFORMS"] = "cpu"
    flags = [env.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=4",
             "--xla_backend_optimization_level=0"]
    # Many small graphs: compile time is the cost (the legacy CPU fusion emitter compiles
    # them 2-3x faster; the numbers are the same to rounding). Newer XLA builds (jax 0.11)
    # no longer know the flag and abort at start-up: then run without it.
    for speedup in (["--xla_cpu_use_fusion_emitters=false"], []):
        env["XLA_FLAGS"] = " ".join(flags + speedup).strip()
        res = subprocess.run([sys.executable, str(worker), *kinds], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
        if not (speedup and res.returncode and "Unknown flag in XLA_FLAGS" in res.stderr):
            break
    if res.returncode < 0 and not any(line.startswith("ok ") for line in res.stdout.splitlines()):
        # jaxlib 0.11.2's CPU compiler (on the GPU machine) segfaults compiling the first
        # sharded program, inside XLA, with or without the flags above; jax 0.10.2 passes.
        pytest.xfail(f"the worker died by signal {-res.returncode} before its first case "
                     f"(jax {jax.__version__}): XLA's CPU compiler, not this library")
    assert res.returncode == 0, f"{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    print(res.stdout)
    assert sum(line.startswith("ok ") for line in res.stdout.splitlines()) == cases, res.stdout


def test_sharded_equals_one_device_on_2_and_4_cpu_devices():
    run_worker(HERE / "_sequence_parallel_worker.py", 17)


@pytest.mark.interpreter
def test_sharded_through_the_kernels_on_2_and_4_cpu_devices():
    """The same checks on the Triton kernels (here through Triton's interpreter; jax-triton's
    route on a GPU types its launches alike) for an elementwise scan, a mixer and the delta
    rule: inside ``shard_map`` the kernels' outputs and cotangents are typed varying like
    their inputs, so ``jax.grad`` through them matches one device's."""
    triton = pytest.importorskip("triton")
    problem = interpreter_problem(triton.__version__, np.__version__)
    if problem is not None:
        pytest.skip(problem)
    run_worker(HERE / "_sequence_parallel_worker.py", 8, "linear_recurrence", "MinGRU",
               "DeltaMinGRU", scan="triton")


def test_packed_and_sharded_equals_each_sequence_alone_on_2_and_4_cpu_devices():
    """``cu_seqlens`` with ``axis_name``: sequences straddling devices, empty ones, one
    opening at a device's first step; see ``tests/jax/_packed_sequence_parallel_worker.py``."""
    run_worker(HERE / "_packed_sequence_parallel_worker.py", 12)


@pytest.mark.parametrize("call", [
    lambda: mingru_jax.linear_recurrence(jnp.ones((1, 4, 2)), jnp.ones((1, 4, 2)),
                                         axis_name="sp"),
    lambda: mingru_jax.mingru_cell(jnp.ones((1, 4, 4)), axis_name="sp"),
    lambda: mingru_jax.signed_mingru_cell(jnp.ones((1, 4, 6)), axis_name="sp"),
    lambda: mingru_jax.MinGRU(3, 2, rngs=nnx.Rngs(0))(jnp.ones((1, 4, 3)), axis_name="sp"),
    lambda: mingru_jax.MinGRUBlock(4, mixer="delta", mixer_kwargs={"n_heads": 2},
                                   rngs=nnx.Rngs(0))(jnp.ones((1, 4, 4)), axis_name="sp"),
], ids=["linear_recurrence", "mingru_cell", "signed_mingru_cell", "MinGRU", "MinGRUBlock"])
def test_an_unbound_axis_name_is_a_clear_error(call):
    with pytest.raises(ValueError, match="axis_name='sp' is not a bound mesh axis"):
        call()


@pytest.mark.parametrize("name", ["RotationMinGRU", "GivensMinGRU", "DeltaMinGRU"])
def test_packed_and_sharded_together_is_not_supported_by_the_block_mixers(name):
    kwargs = {"DeltaMinGRU": {"n_heads": 2}, "GivensMinGRU": {"block_size": 4}}.get(name, {})
    mixer = getattr(mingru_jax, name)(3, 4, **kwargs, rngs=nnx.Rngs(0))
    with pytest.raises(NotImplementedError, match=f"{name}: cu_seqlens together with axis_name"):
        mixer(jnp.ones((1, 4, 3)), cu_seqlens=jnp.array([0, 1, 4]), axis_name="sp")


def test_packed_offsets_under_an_unbound_axis_name_are_a_clear_error():
    with pytest.raises(ValueError, match="axis_name='sp' is not a bound mesh axis"):
        mingru_jax.mingru_cell(jnp.ones((1, 4, 4)), cu_seqlens=jnp.array([0, 4]), axis_name="sp")


def test_a_non_string_axis_name_is_a_type_error():
    a = jnp.ones((1, 4, 2))
    with pytest.raises(TypeError, match="axis_name must be a str"):
        mingru_jax.linear_recurrence(a, a, axis_name=0)
