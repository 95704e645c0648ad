"""Kernel tests: every test runs with NaN-poisoned outputs and scratch buffers
(:func:`mingru_kernels.launch.switches.forced` with ``poison=True``; automatic in the
interpreter, forced here on a GPU too), so any element a kernel fails to write shows up as
NaN (and, through Triton's interpreter, every address it touches is checked: see
``tests/conftest.py``). ``fast_interpreter`` (opt-in, per module) speeds up
Triton's interpreter for the elementwise scans."""

from __future__ import annotations

import numpy as np
import pytest

from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import switches


@pytest.fixture(autouse=True)
def _poisoned():
    with switches.forced(poison=True):
        yield


# --- speed: a row-vectorised generic scan for the interpreter ------------------------------
# Triton's interpreter runs a custom-combine scan/reduce one ELEMENT at a time in Python
# (~0.5 ms each). This patch runs the same sequential left-to-right combine one ROW at a time
# (the combine is elementwise across the other axes, so the arithmetic is identical). It only
# makes the tests fast; it changes no kernel code.


def _rows(axis, i):
    return (slice(None),) * axis + (i,)


def _fold(self, input):
    """Yield ``(index, running combine)`` row by row along ``self.axis``."""
    axis = self.axis
    datas = [arg.handle.data for arg in input]
    acc = None
    for i in range(datas[0].shape[axis]):
        idx = _rows(axis, i)
        cur = tuple(self.to_tensor(d[idx], arg.dtype) for d, arg in zip(datas, input, strict=True))
        if acc is not None:
            ret = self.combine_fn.fn(*acc, *cur)
            cur = ret if isinstance(ret, tuple) else (ret,)
        acc = cur
        yield idx, acc


def _fast_scan(self, input):
    outs = [np.empty_like(arg.handle.data) for arg in input]
    for idx, acc in _fold(self, input):
        for o, v in zip(outs, acc, strict=True):
            o[idx] = v.handle.data
    return [self.to_tensor(o, arg.dtype) for o, arg in zip(outs, input, strict=True)]


def _make_fast_reduce(orig_reduce):
    def _fast_reduce(self, input):
        if self.axis is None or self.keep_dims:
            return orig_reduce(self, input)
        *_, (_, acc) = _fold(self, input)  # the running combine after the last row
        return list(acc)

    return _fast_reduce


@pytest.fixture(scope="module")
def fast_interpreter():
    """Row-at-a-time custom-combine scans and reduces in Triton's interpreter, for a module
    (``pytestmark = pytest.mark.usefixtures("fast_interpreter")``)."""
    if not interpreter_mode():
        yield
        return
    from triton.runtime import interpreter

    mp = pytest.MonkeyPatch()
    mp.setattr(interpreter.ScanOps, "generic_scan", _fast_scan)
    mp.setattr(interpreter.ReduceOps, "generic_reduce", _make_fast_reduce(interpreter.ReduceOps.generic_reduce))
    yield
    mp.undo()
