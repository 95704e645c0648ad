"""The PyTorch frontend's uses of private internals: Triton launches without per-call binding,
and torch's device-side assert (:func:`assert_async`, at the end).

``kernel[grid](*args, **kwargs)`` on a ``triton.jit`` function binds every argument in Python
on every call: it specialises each one, builds the cache key, looks the compiled kernel up and
assembles the launch. At the small shapes where host time is the whole cost that binding is
most of a launch, and the backward runs it on the autograd engine's device thread, where Python
is slower still.

:class:`CachedKernels` wraps a kernel module: its ``triton.jit`` kernels answer
``kernel[grid](...)`` as before, but a call whose arguments specialise the same way as an earlier
one goes straight to that call's compiled kernel. Arguments may be passed by position or by
keyword; each launch binds them to the kernel's parameters in signature order (defaults filled
in), as Triton does. The key is conservative: every constexpr, integer, bool and ``None`` by
value (Triton specialises ints on ``== 1``, divisibility by 16 and 32/64-bit range), every
tensor by dtype and 16-byte alignment (Triton's pointer specialisation), other floats by type
(never specialised), the launch options (``num_warps``, ...) by value, and the current device. A miss takes Triton's own path and remembers the compiled kernel it
returns. The launch itself is the call Triton's ``JITFunction.run`` makes, launch hooks
included: it reads the compiled kernel's ``run``, ``function``, ``packed_metadata`` and
``launch_metadata`` and ``triton.knobs.runtime``'s hooks, all private, so the hook
``"triton_launch"`` (:mod:`mingru_kernels._compat`) is declared for the Triton versions that
call was written against. Outside them, with ``MINGRU_PRIVATE_HOOKS=0``, inside
``mingru_kernels._compat.hooks_disabled("triton_launch")`` (checked per launch) and under the
interpreter (``TRITON_INTERPRET=1``: nothing is wrapped) every launch takes Triton's own path.

Either way a launch states ``enable_fp_fusion`` (:data:`mingru_kernels.launch.FP_FUSION`)
unless its caller does.
"""

from __future__ import annotations

import operator
from types import ModuleType
from typing import Any

import torch

from mingru_kernels._compat import (
    Hook,
    fall_back,
    hook_active,
    hook_available,
    parse_version,
    register,
)
from mingru_kernels.launch import FP_FUSION

__all__ = ["ASSERT_ASYNC_RANGE", "TRITON_LAUNCH", "CachedKernels", "CachedLaunch",
           "PublicLaunch", "assert_async", "launch_key"]

TRITON_LAUNCH = register(Hook(
    name="triton_launch", dependency="triton", minimum=(3, 4), below=(3, 10),
    public_path="Triton's own launch path (kernel[grid](...))"))
"""The hook: ``triton.knobs`` (where ``JITFunction.run`` reads the launch hooks) is new in
Triton 3.4; the compiled kernel's ``run`` call is the one ``JITFunction.run`` makes up to 3.9."""

_NAME = TRITON_LAUNCH.name
_COMPILED_ATTRIBUTES = ("run", "function", "packed_metadata", "launch_metadata")

# More distinct keys than this (shapes x alignments x flags) and the cache starts over: a
# workload that never repeats a key must not grow it without bound.
_MAX_ENTRIES = 4096


_TENSOR = torch.Tensor


def launch_key(device: int, values: tuple[Any, ...], *, constexprs: tuple[bool, ...],
               options: tuple[tuple[str, Any], ...] = ()) -> tuple[Any, ...]:
    """The cache key of one launch: ``values`` are the kernel's arguments in signature order,
    ``constexprs`` flags the parameters keyed by value whatever their type, ``options`` the
    launch options (see the module docstring for what the key holds and why)."""
    # One comprehension, no call per argument: the key is most of a repeat launch's host time.
    return (device, options,
            *[(value.dtype, not value.data_ptr() & 15) if isinstance(value, _TENSOR)
              else float if not constexpr and isinstance(value, float) else value
              for value, constexpr in zip(values, constexprs, strict=True)])


class CachedLaunch:
    """``kernel[grid](*args, **kwargs)`` with repeat launches sent to the compiled kernel while
    the hook is active (decided per launch), Triton's own path otherwise."""

    __slots__ = ("kernel", "_cache", "_names", "_name_set", "_constexprs", "_defaults",
                 "_device", "_stream", "_hooks", "_layouts")

    def __init__(self, kernel: Any, device: Any = None, stream: Any = None) -> None:
        """``device()`` and ``stream(device)`` give the current device and its raw stream
        (Triton's driver by default, as ``JITFunction.run`` asks it)."""
        try:
            from triton import knobs
        except ImportError:
            knobs = None
            fall_back(_NAME, "this Triton has no triton.knobs")
        self._hooks = None if knobs is None else knobs.runtime
        self.kernel = kernel
        self._cache: dict[tuple[Any, ...], tuple[Any, ...]] = {}
        self._names = tuple(kernel.arg_names)
        self._name_set = frozenset(self._names)
        self._constexprs = tuple(bool(getattr(p, "is_constexpr", False)) for p in kernel.params)
        self._defaults = {p.name: p.default for p in kernel.params if p.has_default}
        # How a call of one shape (the positional count and the keyword names, in order)
        # binds; a launcher calls with one shape, so binding is a lookup and one C-level get.
        self._layouts: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        if device is None or stream is None:
            from triton.runtime.driver import driver

            device, stream = driver.active.get_current_device, driver.active.get_current_stream
        self._device, self._stream = device, stream

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.launch(grid, args, kwargs)

        return launch

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]
              ) -> tuple[tuple[Any, ...], tuple[tuple[str, Any], ...]] | None:
        """Every argument in signature order and the launch options; ``None`` when the call
        does not bind (Triton's own path then raises the error)."""
        shape = (len(args), *kwargs)
        try:
            layout = self._layouts[shape]
        except KeyError:
            layout = self._layouts[shape] = self._layout(len(args), kwargs)
        if layout is None:
            return None
        get_named, defaults, option_names = layout
        named = get_named({**defaults, **kwargs} if defaults else kwargs)
        return (*args, *named), tuple([(name, kwargs[name]) for name in option_names])

    def _layout(self, n_args: int, kwargs: dict[str, Any]) -> tuple[Any, ...] | None:
        """How calls of this shape bind: a getter of the parameters past the positional ones
        (as a tuple), the defaults they need, and the launch options' names."""
        rest = self._names[n_args:]
        if n_args > len(self._names) or any(name not in kwargs and name not in self._defaults
                                            for name in rest):
            return None
        defaults = {name: self._defaults[name] for name in rest if name not in kwargs}
        get_named = (operator.itemgetter(*rest) if len(rest) > 1
                     else (lambda values: (values[rest[0]],)) if rest else (lambda values: ()))
        return get_named, defaults, tuple(name for name in kwargs if name not in self._name_set)

    def launch(self, grid: tuple[int, ...], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> None:
        """Launch on ``grid`` (a tuple of up to three ints)."""
        kwargs.setdefault("enable_fp_fusion", FP_FUSION)
        if not hook_active(_NAME):
            self.kernel[grid](*args, **kwargs)
            return
        bound = self._bind(args, kwargs)
        if bound is None:
            self.kernel[grid](*args, **kwargs)
            return
        values, options = bound
        device = self._device()
        key = launch_key(device, values, constexprs=self._constexprs, options=options)
        try:
            entry = self._cache.get(key)
        except TypeError:  # an unhashable argument: every such launch takes Triton's path
            self.kernel[grid](*args, **kwargs)
            return
        if entry is None:
            self._first_launch(key, grid, args, kwargs)
            return
        run, function, metadata, launch_metadata = entry
        stream = self._stream(device)
        grid_x, grid_y, grid_z = (*grid, 1, 1)[:3]
        hooks = self._hooks
        run(grid_x, grid_y, grid_z, stream, function, metadata,
            launch_metadata(grid, stream, *values), hooks.launch_enter_hook,
            hooks.launch_exit_hook, *values)

    def _first_launch(self, key: tuple[Any, ...], grid: tuple[int, ...], args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> None:
        compiled = self.kernel[grid](*args, **kwargs)
        if self._hooks is None:
            return
        if hasattr(compiled, "result"):  # an asynchronous compile's future
            compiled = compiled.result()
        missing = [name for name in _COMPILED_ATTRIBUTES if not hasattr(compiled, name)]
        if missing:  # a Triton whose launch this hook does not know: its own path from now on
            fall_back(_NAME, f"Triton's compiled kernel has no {', '.join(missing)}")
            return
        if len(self._cache) >= _MAX_ENTRIES:
            self._cache.clear()
        self._cache[key] = (compiled.run, compiled.function, compiled.packed_metadata,
                            compiled.launch_metadata)


class PublicLaunch:
    """``kernel[grid](*args, **kwargs)`` through Triton's own path, with the launch options
    every launch states (where the hook cannot run)."""

    __slots__ = ("kernel",)

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel

    def __getitem__(self, grid: tuple[int, ...]) -> Any:
        def launch(*args: Any, **kwargs: Any) -> Any:
            kwargs.setdefault("enable_fp_fusion", FP_FUSION)
            return self.kernel[grid](*args, **kwargs)

        return launch


class CachedKernels:
    """A kernel module whose ``triton.jit`` kernels are :class:`CachedLaunch` es when the hook
    can run in this process, else :class:`PublicLaunch` es; every other attribute (and every
    kernel under the interpreter, which takes no launch options) is the module's own."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        from triton.runtime.jit import JITFunction

        if isinstance(value, JITFunction):
            value = CachedLaunch(value) if hook_available(_NAME) else PublicLaunch(value)
        setattr(self, name, value)  # looked up once
        return value


ASSERT_ASYNC_RANGE = ((2, 4), (3, 0))
"""The torch versions (first inclusive, bound exclusive) whose ``torch._assert_async(tensor,
message)`` :func:`assert_async` calls: documented in torch's reference but underscored (so
private), with the message overload and ``torch.compile`` support (inductor keeps it as a
device-side assert) through the 2.x series."""

# Decided at import: the check runs inside code that torch.compile traces.
_ASSERT_ASYNC_OK = ASSERT_ASYNC_RANGE[0] <= parse_version(torch.__version__) < ASSERT_ASYNC_RANGE[1]


def assert_async(condition: torch.Tensor, message: str) -> None:
    """Assert on the device that the one-element ``condition`` is true, without a host sync
    (``torch._assert_async``). A failure raises ``RuntimeError(message)`` on the CPU; on CUDA
    it is a device-side assert, which surfaces at a later synchronisation and leaves the
    process's CUDA context unusable: a debugging aid, not control flow. Outside
    :data:`ASSERT_ASYNC_RANGE` a ``NotImplementedError`` says so (there is no public
    device-side assert to fall back to)."""
    if not _ASSERT_ASYNC_OK:
        minimum, below = ASSERT_ASYNC_RANGE
        raise NotImplementedError(
            f"a device-side assert needs torch >={'.'.join(map(str, minimum))},"
            f"<{'.'.join(map(str, below))} (torch._assert_async); this is torch "
            f"{torch.__version__}: check outside the compiled function instead")
    torch._assert_async(condition, message)
