"""Repeat launches of a Triton kernel without Triton's per-call binding.

``kernel[grid](*args, **kwargs)`` on a ``triton.jit`` function binds every argument in Python
on every call: it specialises each one, builds the cache key, looks the compiled kernel up and
assembles the launch. At the small shapes where host time is the whole cost, that is
15–25 µs per launch on an H100 host (a bare three-argument launch measured 11.5 µs), and the
backward runs it on the autograd engine's device thread, where Python is slower still.

:class:`CachedKernels` wraps a kernel module: its ``triton.jit`` kernels answer
``kernel[grid](...)`` as before, but a call whose arguments specialise the same way as an earlier
one goes straight to that call's compiled kernel. The key is conservative: every integer, bool
and ``None`` by value (Triton specialises ints on ``== 1``, divisibility by 16 and 32/64-bit
range), every tensor by dtype and 16-byte alignment (Triton's pointer specialisation), floats
by type (never specialised), the keyword arguments (constexprs and launch options) by value,
and the current device. A miss takes Triton's own path and remembers the compiled kernel it
returns. The launch itself is the call Triton's ``JITFunction.run`` makes (Triton 3.3 to 3.9),
hooks included; under the interpreter (``TRITON_INTERPRET=1``) nothing is wrapped, nor with
``MINGRU_CACHED_LAUNCH=0`` in the environment when the kernels are first used (Triton's path for
every launch: the baseline of ``scripts/profile_overhead.py``).
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import torch

__all__ = ["CachedKernels", "CachedLaunch", "launch_key"]

# More distinct keys than this (shapes x alignments x flags) and the cache starts over: a
# workload that never repeats a key must not grow it without bound.
_MAX_ENTRIES = 4096


def _arg_key(arg: Any) -> Any:
    if isinstance(arg, torch.Tensor):
        return arg.dtype, not arg.data_ptr() & 15
    if isinstance(arg, float):
        return float
    return arg


def launch_key(device: int, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
    """The cache key of one launch (see the module docstring for what it holds and why)."""
    return (device, tuple(kwargs.items()), *map(_arg_key, args))


class CachedLaunch:
    """``kernel[grid](*args, **kwargs)`` with repeat launches sent to the compiled kernel."""

    __slots__ = ("kernel", "_cache", "_names", "_defaults", "_device", "_stream", "_hooks")

    def __init__(self, kernel: Any, device: Any = None, stream: Any = None) -> None:
        """``device()`` and ``stream(device)`` give the current device and its raw stream
        (Triton's driver by default, as ``JITFunction.run`` asks it)."""
        try:
            from triton import knobs
        except ImportError:  # before Triton 3.4: hooks lived elsewhere; no cache
            knobs = None
        self._hooks = None if knobs is None else knobs.runtime
        self.kernel = kernel
        self._cache: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._names = tuple(kernel.arg_names)
        self._defaults = {p.name: p.default for p in kernel.params if p.has_default}
        if device is None or stream is None:
            from triton.runtime.driver import driver

            device, stream = driver.active.get_current_device, driver.active.get_current_stream
        self._device, self._stream = device, stream

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.launch(grid, args, kwargs)

        return launch

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> None:
        """Launch on ``grid`` (a tuple of up to three ints)."""
        device = self._device()
        key = launch_key(device, args, kwargs)
        try:
            entry = self._cache.get(key)
        except TypeError:  # an unhashable argument: every such launch takes Triton's path
            self.kernel[grid](*args, **kwargs)
            return
        if entry is None:  # (never stored without Triton's hooks: see _first_launch)
            self._first_launch(key, grid, args, kwargs)
            return
        run, function, metadata, launch_metadata, tail = entry
        stream = self._stream(device)
        grid_x, grid_y, grid_z = (*grid, 1, 1)[:3]
        hooks = self._hooks
        run(grid_x, grid_y, grid_z, stream, function, metadata,
            launch_metadata(grid, stream, *args, *tail), hooks.launch_enter_hook,
            hooks.launch_exit_hook, *args, *tail)

    def _first_launch(self, key: tuple[Any, ...], grid: tuple[int, ...], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> None:
        compiled = self.kernel[grid](*args, **kwargs)
        if self._hooks is None:
            return
        if hasattr(compiled, "result"):  # an asynchronous compile's future
            compiled = compiled.result()
        if not all(hasattr(compiled, name) for name in
                   ("run", "function", "packed_metadata", "launch_metadata")):
            return  # a Triton whose launch this module does not know: stay on its own path
        # Every parameter after the positional ones, in signature order: the keyword
        # arguments and defaults, fixed for this key (they are part of it).
        try:
            tail = tuple(kwargs[name] if name in kwargs else self._defaults[name]
                         for name in self._names[len(args):])
        except KeyError:
            return
        if len(self._cache) >= _MAX_ENTRIES:
            self._cache.clear()
        self._cache[key] = (compiled.run, compiled.function, compiled.packed_metadata,
                            compiled.launch_metadata, tail)


class CachedKernels:
    """A kernel module whose ``triton.jit`` kernels are :class:`CachedLaunch` es; every other
    attribute (and every kernel under the interpreter) is the module's own."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        from triton.runtime.jit import JITFunction

        if isinstance(value, JITFunction) and os.environ.get("MINGRU_CACHED_LAUNCH") != "0":
            value = CachedLaunch(value)
        setattr(self, name, value)  # looked up once
        return value
