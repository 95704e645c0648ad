"""Test-session setup, framework-free (imports neither torch nor jax: ``pytest tests/jax``
runs without torch installed).

* Without a CUDA device, kernel tests run through Triton's interpreter: ``TRITON_INTERPRET=1``
  must be set before anything imports triton (kernels bind their mode at decoration time).
  The device is asked of the CUDA driver itself, not of a framework.
* ``gpu``-marked tests are skipped without a CUDA device; ``host``-marked ones (they reach
  no GPU: CPU tensors, gloo ranks) with one. With one, long tests run first
  (``slow``-marked, then ``gpu``-marked; spread over the workers' first tests under
  ``pytest-xdist --dist worksteal``): see :func:`_long_tests_first`.
* Through Triton's interpreter, every address a kernel loads, stores or updates atomically is
  checked against its tensor arguments' storages (:func:`tests.bounds.bounds_checked`, both
  frontends): an out-of-bounds access fails the test and names the kernel.
* Under pytest-xdist each worker takes its share of the cores' threads (PyTorch, NumPy's
  BLAS) and inductor compiles in the worker (no compile pool per worker).
* XLA's backend optimisation (and, on a GPU, its autotuning) is turned down before jax
  initialises: the JAX tests compile many tiny graphs, where compile time, not run time, is
  the cost. On a GPU JAX does not preallocate memory (PyTorch tests share the device).
* With ``MINGRU_TEST_DURATION_LOG=FILE`` every finished test's time is appended to ``FILE``
  as it happens (:func:`pytest_runtest_logreport`); with ``MINGRU_TEST_COMPILE_LOG=FILE``
  every Triton compile of either frontend, with the test that asked for it
  (:func:`_log_compiles`).
* ``on_host`` (opt-in): JAX on XLA's CPU device; like ``host`` tests, skipped on a GPU machine.
* Every test starts from ``torch.manual_seed(0)`` when torch is in use (already imported by
  the test's module); torch is never imported here. Without torch installed, the folders
  that need it are not collected.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.util
import os
import sys
import time

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

# pytest-xdist workers share the machine's cores: each takes its share of intra-op threads
# (PyTorch and NumPy's BLAS size their pools by the whole machine; oversubscribed, their
# threads mostly spin-wait, slowing the host-side float64 references and inputs of the GPU
# tests), and inductor compiles in the worker instead of starting a pool per worker.
_workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _workers > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // _workers)))
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")

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


@pytest.hookimpl(trylast=True)  # after ``-m`` / ``-k`` deselect: the blocks are of what runs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if cuda_device_present():
        # The GPU suite's time goes to what only a GPU can check; the CPU suite runs these.
        skip_host = pytest.mark.skip(reason="reaches no GPU: the CPU suite runs it")
        for item in items:
            if "host" in item.keywords or "on_host" in getattr(item, "fixturenames", ()):
                item.add_marker(skip_host)
        items[:] = _long_tests_first(items, _worksteal_workers(config))
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)


_DURATION_LOG = os.environ.get("MINGRU_TEST_DURATION_LOG")
_SESSION_START = time.monotonic()


def _append_line(path: str, *fields: object) -> None:
    """One tab-separated line of a timing log, led by the seconds since the session started."""
    with open(path, "a", encoding="utf-8") as log:
        log.write("\t".join([f"{time.monotonic() - _SESSION_START:.1f}", *map(str, fields)]) + "\n")


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With ``MINGRU_TEST_DURATION_LOG=FILE`` (``scripts/gpu_check.sh`` sets it), a line per
    test as it finishes: seconds since the session started, the test's seconds, the worker
    that ran it (``gw3``; ``main`` without xdist), outcome and id, tab-separated (the compile
    log's column order). Unlike ``--durations`` it survives a run stopped at a time limit,
    which is when knowing what took the time matters. Written by the controller only."""
    if _DURATION_LOG is None or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    if report.when != "call" and not report.failed:  # a failed setup or teardown counts
        return
    worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "main")
    _append_line(_DURATION_LOG, f"{report.duration:.2f}", worker, report.outcome, report.nodeid)


_COMPILE_LOG = os.environ.get("MINGRU_TEST_COMPILE_LOG")
_running = {"test": ""}


def pytest_runtest_logstart(nodeid: str, location: tuple) -> None:
    _running["test"] = nodeid


def pytest_configure(config: pytest.Config) -> None:
    if _COMPILE_LOG is not None and _installed("triton"):
        _log_compiles(_COMPILE_LOG)


def _log_compiles(path: str) -> None:
    """A line per Triton compile (a kernel's in-memory cache miss; a hit on the disk cache
    takes milliseconds): seconds since the session started, the compile's seconds, the
    worker, the kernel, the test that launched it and (PyTorch's launches) a hash of the
    variant. On a GPU a test costs mostly its
    kernels' compiles, and two tests that compile the same kernel variant pay once: this
    says which parametrizations add variants. PyTorch's launches are seen through Triton's
    jit hooks (hooks set before are kept and called); the JAX frontend's, which compile
    through ``triton.compile`` (``mingru_jax._compat``), by wrapping it."""
    import triton
    from triton import knobs

    hooks = knobs.runtime
    before, after = hooks.jit_cache_hook, hooks.jit_post_compile_hook
    started = [0.0]
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")

    variant = [""]

    def on_miss(**kwargs):
        started[0] = time.monotonic()
        # The specialisation (signature, constants): the same variant compiled by several
        # workers shows as one hash on several lines.
        variant[0] = hashlib.sha1(str(kwargs.get("key", "")).encode()).hexdigest()[:12]
        return before(**kwargs) if before else None

    def write(start: float, kernel: str, key: str = "") -> None:
        _append_line(path, f"{time.monotonic() - start:.2f}", worker, kernel, _running["test"],
                     key)

    def on_compiled(**kwargs):
        write(started[0], kwargs["fn"].name, variant[0])
        return after(**kwargs) if after else None

    compile_ = triton.compile

    @functools.wraps(compile_)
    def timed_compile(src, *args, **kwargs):
        start = time.monotonic()
        compiled = compile_(src, *args, **kwargs)
        write(start, getattr(getattr(src, "fn", None), "__name__", "?"))
        return compiled

    hooks.jit_cache_hook, hooks.jit_post_compile_hook = on_miss, on_compiled
    triton.compile = timed_compile


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist, in the controller: tell each worker how the tests are shared out (a
    worker's own ``dist`` option reads ``no``)."""
    node.workerinput["dist"] = node.config.option.dist


def _worksteal_workers(config: pytest.Config) -> int:
    """In a pytest-xdist worker: the number of workers if they share the tests by work
    stealing; else 1."""
    workerinput = getattr(config, "workerinput", {})
    return workerinput.get("workercount", 1) if workerinput.get("dist") == "worksteal" else 1


def _long_tests_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    """The collection reordered so that long tests start first (on a GPU, where a test costs
    its kernels' compiles): ``slow``-marked tests, then the other ``gpu``-marked ones, then the
    rest, each group in collection order (neighbours share compiled kernels).

    pytest-xdist's work stealing (``--dist worksteal``) hands each of its ``workers`` one
    consecutive block of the collection (block ``i`` holds ``remaining // (workers - i)``
    tests) and later moves the tail of a long queue to an idle worker. So every block begins
    with its share: every ``workers``-th slow test, a ``1 / workers`` run of the gpu tests,
    then a run of the rest that fills the block. With one worker: slow, gpu, rest."""

    def marked(item: pytest.Item, name: str) -> bool:
        return item.get_closest_marker(name) is not None

    slow = [i for i in items if marked(i, "slow")]
    gpu = [i for i in items if marked(i, "gpu") and not marked(i, "slow")]
    rest = [i for i in items if not (marked(i, "gpu") or marked(i, "slow"))]
    ordered: list[pytest.Item] = []
    remaining = len(items)
    for w in range(workers):
        size = remaining // (workers - w)
        head = slow[w::workers] + gpu[w * len(gpu) // workers:(w + 1) * len(gpu) // workers]
        fill = max(0, size - len(head)) if w < workers - 1 else len(rest)
        block = head + rest[:fill]
        rest = rest[fill:]
        ordered += block
        remaining -= size
    return ordered


@pytest.fixture(autouse=True)
def _bounds_checked():
    if os.environ.get("TRITON_INTERPRET") != "1" or not _installed("triton"):
        yield
        return
    from tests.bounds import bounds_checked

    with bounds_checked():
        yield


@pytest.fixture
def on_host():
    """JAX arrays and computations on XLA's CPU device (skipped on a GPU machine, as ``host``
    tests are: what they check depends on no device, and the CPU suite runs them).

    For the float64 checks of the eager twins' semantics (packing, chaining, ``vmap``,
    numerical gradients) and the CPU parity of the two frontends, which depend on no device:
    on a GPU the kernels' tests compare against the eager twins there (in float32), the GPU
    parity test runs both frontends there, and XLA's GPU compiles, which these tests consist
    of, cost several times its CPU ones."""
    import jax

    try:
        cpu = jax.devices("cpu")[0]
    except RuntimeError:  # JAX_PLATFORMS leaves the CPU out: stay on the default device
        yield
        return
    with jax.default_device(cpu):
        yield


@pytest.fixture(autouse=True)
def _seeded() -> None:
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(0)
