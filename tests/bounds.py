"""Out-of-bounds checks for Triton's interpreter: every address a kernel loads, stores or
updates atomically (where its mask is on) must lie inside the storage of one of the kernel's
tensor arguments.

Why. On a GPU an address past a buffer either reads a neighbour's bytes silently or kills the
CUDA context with an illegal memory access, and neither names the kernel or the pointer. The
interpreter runs the same index arithmetic on the host, so checking each address there finds
an out-of-bounds access in CI, with the kernel's name, before any GPU run. (It cannot find
what only the GPU compiler introduces.)

Framework-free: the storages come from the tensor arguments the interpreter copies to the
host (``untyped_storage()``: PyTorch tensors, and the JAX frontend's host buffers, whose
storage is a NumPy array); NumPy does the checks.

    with bounds_checked() as report:
        run_some_kernels()
    assert not report.violations
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import numpy as np


@dataclasses.dataclass
class BoundsReport:
    """What :func:`bounds_checked` saw: ``checks`` accesses (one per masked load, store or
    atomic of a tile) and ``violations`` (kernel, access, addresses outside every argument's
    storage, first three of them)."""

    checks: int = 0
    violations: list[tuple[str, str, int, list[str]]] = dataclasses.field(default_factory=list)


def _storage_ranges(args) -> list[tuple[int, int]]:
    ranges = []
    for arg in args:
        storage = getattr(arg, "untyped_storage", None)
        if storage is not None:
            s = storage()
            nbytes = s.nbytes() if hasattr(s, "nbytes") else s.array.nbytes
            ranges.append((s.data_ptr(), s.data_ptr() + nbytes))
    return ranges


@contextlib.contextmanager
def bounds_checked(*, raise_on_violation: bool = True) -> Iterator[BoundsReport]:
    """Check every kernel launched through the interpreter inside the block (see the module
    docstring). ``raise_on_violation``: raise ``AssertionError`` at the first access outside
    the arguments' storages, naming the kernel; otherwise only record it in the report."""
    from triton.runtime import interpreter

    report = BoundsReport()
    state = {"kernel": "?", "ranges": []}
    executor = interpreter.GridExecutor
    builder = interpreter.InterpreterBuilder
    saved = {
        "init": executor._init_args_hst,
        "load": builder.create_masked_load,
        "store": builder.create_masked_store,
        "atomic": builder.create_atomic_rmw,
        "cas": builder.create_atomic_cas,
    }

    def init_args(self, args_dev, kwargs):
        args, kwargs_hst = saved["init"](self, args_dev, kwargs)
        state["kernel"] = getattr(self.fn, "__name__", "?")
        state["ranges"] = _storage_ranges(list(args) + list(kwargs_hst.values()))
        return args, kwargs_hst

    def check(ptrs, mask, what: str, itemsize: int) -> None:
        report.checks += 1
        addr = ptrs.data if mask is None else ptrs.data[np.broadcast_to(mask.data, ptrs.data.shape)]
        if addr.size == 0:
            return
        addr = addr.astype(np.uint64, copy=False)
        inside = np.zeros(addr.shape, dtype=bool)
        for lo, hi in state["ranges"]:
            inside |= (addr >= lo) & (addr + itemsize <= hi)
        if inside.all():
            return
        outside = addr[~inside]
        entry = (state["kernel"], what, int(outside.size), [hex(int(a)) for a in outside[:3]])
        report.violations.append(entry)
        if raise_on_violation:
            raise AssertionError(
                f"{entry[0]}: {entry[2]} {what} address(es) outside every tensor argument's "
                f"storage, e.g. {entry[3]}")

    def itemsize(ptrs) -> int:
        return np.dtype(interpreter._get_np_dtype(ptrs.get_element_ty())).itemsize

    def load(self, ptrs, mask, other, cache_policy, is_volatile):
        check(ptrs, mask, "load", itemsize(ptrs))
        return saved["load"](self, ptrs, mask, other, cache_policy, is_volatile)

    def store(self, ptrs, value, mask, cache_policy):
        check(ptrs, mask, "store", itemsize(ptrs))
        return saved["store"](self, ptrs, value, mask, cache_policy)

    def atomic(self, rmw_op, ptr, val, mask, sem, scope):
        check(ptr, mask, "atomic", itemsize(ptr))
        return saved["atomic"](self, rmw_op, ptr, val, mask, sem, scope)

    def cas(self, ptr, cmp, val, sem, scope):
        check(ptr, None, "atomic_cas", itemsize(ptr))
        return saved["cas"](self, ptr, cmp, val, sem, scope)

    executor._init_args_hst = init_args
    builder.create_masked_load = load
    builder.create_masked_store = store
    builder.create_atomic_rmw = atomic
    builder.create_atomic_cas = cas
    try:
        yield report
    finally:
        executor._init_args_hst = saved["init"]
        builder.create_masked_load = saved["load"]
        builder.create_masked_store = saved["store"]
        builder.create_atomic_rmw = saved["atomic"]
        builder.create_atomic_cas = saved["cas"]
