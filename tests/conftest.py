"""Test-session setup, framework-free (imports neither torch nor jax: ``pytest tests/jax``
runs without torch installed).

* Without a CUDA device, kernel tests run through Triton's interpreter: ``TRITON_INTERPRET=1``
  must be set before anything imports triton (kernels bind their mode at decoration time).
  The device is asked of the CUDA driver itself, not of a framework.
* ``gpu``-marked tests are skipped without a CUDA device.
* Through Triton's interpreter, every address a kernel loads, stores or updates atomically is
  checked against its tensor arguments' storages (:func:`tests.bounds.bounds_checked`, both
  frontends): an out-of-bounds access fails the test and names the kernel.
* XLA's backend optimisation (and, on a GPU, its autotuning) is turned down before jax
  initialises: the JAX tests compile many tiny graphs, where compile time, not run time, is
  the cost. On a GPU JAX does not preallocate memory (PyTorch tests share the device).
* Every test starts from ``torch.manual_seed(0)`` when torch is in use (already imported by
  the test's module); torch is never imported here. Without torch installed, the folders
  that need it are not collected.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import os
import sys

import pytest


def _installed(name: str) -> bool:
    """Whether ``name`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


# The PyTorch frontend and the kernel tests (run through the PyTorch launchers) need torch;
# without it only the framework-free and the JAX tests are collected (parity skips itself).
collect_ignore = [] if _installed("torch") else ["torch", "kernels"]


@functools.cache
def cuda_device_present() -> bool:
    """Whether the CUDA driver reports at least one device (honours CUDA_VISIBLE_DEVICES)."""
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(count)) == 0 and (
        count.value > 0
    )


if not cuda_device_present():
    os.environ.setdefault("TRITON_INTERPRET", "1")

if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + " --xla_backend_optimization_level=0"
    ).strip()
# On a GPU XLA also autotunes every new matmul / fusion it compiles (the eager twins' block
# products): seconds per shape that the tests, which time nothing, do not need.
if cuda_device_present() and "xla_gpu_autotune_level" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_gpu_autotune_level=0"
# JAX would take 75% of the GPU up front, starving PyTorch tests in the same session.
if cuda_device_present():
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_present():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


@pytest.fixture(autouse=True)
def _bounds_checked():
    if os.environ.get("TRITON_INTERPRET") != "1" or not _installed("triton"):
        yield
        return
    from tests.bounds import bounds_checked

    with bounds_checked():
        yield


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
