"""The framework-free part of the frontends' argument checks (``mingru._validate`` and
``mingru_jax._validate``): rules that read only ``.shape``, ``.dtype`` and ``.ndim``, and
:class:`OncePerCall`, which makes the NaN check of initial states run once per public call
however deep the call goes. This module imports neither torch, jax nor triton.

Example:
    >>> from types import SimpleNamespace
    >>> from mingru_kernels._checks import shape_is
    >>> shape_is(SimpleNamespace(shape=(2, 3)), "x", (2, 4), "(B, D)")
    Traceback (most recent call last):
        ...
    ValueError: x must have shape (B, D) = (2, 4); got (2, 3)
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any, NamedTuple, TypeVar

__all__ = ["ArrayKind", "OncePerCall", "check_float", "nonempty_time", "shape_is"]

R = TypeVar("R")


class ArrayKind(NamedTuple):
    """What a frontend's float arguments are, for :func:`check_float`'s errors."""

    types: tuple[type, ...]  # accepted classes
    type_name: str  # named in the type error: "torch.Tensor", "jax.Array"
    noun: str  # "tensor", "array"
    float_dtypes: tuple[Any, ...]  # the floating dtypes accepted


def check_float(x: object, name: str, *, ndim: int, shape: str, kind: ArrayKind) -> None:
    """``x`` must be one of ``kind.types``, of a floating dtype and of rank ``ndim``; ``shape``
    describes it for the errors (a ``TypeError`` for the class or dtype, a ``ValueError`` for
    the rank)."""
    if not isinstance(x, kind.types):
        raise TypeError(
            f"{name} must be a {kind.type_name} of shape {shape}; got {type(x).__name__}")
    if x.dtype not in kind.float_dtypes:
        raise TypeError(
            f"{name} must be a floating {kind.noun} (float16, bfloat16, float32 or float64); "
            f"got {x.dtype}"
        )
    if x.ndim != ndim:
        raise ValueError(f"{name} must have shape {shape} ({ndim} dims); got {tuple(x.shape)}")


def shape_is(x: Any, name: str, expected: Sequence[int], shape: str) -> None:
    """``x.shape`` must equal ``expected``; ``shape`` describes it for the error."""
    if tuple(x.shape) != tuple(expected):
        raise ValueError(
            f"{name} must have shape {shape} = {tuple(expected)}; got {tuple(x.shape)}"
        )


def shape_in(x: Any, allowed: Sequence[Sequence[int]]) -> bool:
    """Whether ``x.shape`` is one of ``allowed``. Compared tuple by tuple: ``torch.compile``
    traces ``==`` on symbolic sizes (``dynamic=True``) into a guard, while ``in`` over a list
    found no match for them."""
    shape = tuple(x.shape)
    for candidate in allowed:
        if shape == tuple(candidate):
            return True
    return False


def nonempty_time(x: Any, name: str) -> None:
    """``x`` (time on dim 1) must have at least one step."""
    if x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one time step (dim 1); got {tuple(x.shape)}")


class OncePerCall:
    """The NaN check of initial states, once per public call.

    :meth:`check_states` runs the frontend's ``no_nan(states)`` at the entry of a public call
    that takes an initial state, except while ``tracing()`` says a compiler traces (the check
    reads values) and :meth:`inside` a :meth:`checked_call`, whose entry checked its own
    states: the calls it makes (a stack's blocks, a block's mixer) skip the check, so each
    state is read once per call. ``step`` never checks. The flag is a
    :class:`~contextvars.ContextVar` (per thread and asyncio task) named ``name``.
    """

    def __init__(self, name: str, *, no_nan: Callable[[Sequence[tuple[str, object]]], None],
                 tracing: Callable[[], bool] = lambda: False) -> None:
        self._checked: ContextVar[bool] = ContextVar(name, default=False)
        self._trusted: ContextVar[bool] = ContextVar(f"{name}_trusted", default=False)
        self.no_nan = no_nan
        self._tracing = tracing

    def inside(self) -> bool:
        """Whether a :meth:`checked_call` whose states were checked is running."""
        return self._checked.get()

    @contextlib.contextmanager
    def trusted(self) -> Iterator[None]:
        """A block whose calls take only states the library computed itself (a prefill's
        chunks each take the state the previous chunk returned): no check reads their values,
        neither the NaN check nor a frontend's own (the sign of a MinGRU state), which asks
        :meth:`is_trusted`. Each such read is a host synchronisation per chunk and layer."""
        checked, trusted = self._checked.set(True), self._trusted.set(True)
        try:
            yield
        finally:
            self._trusted.reset(trusted)
            self._checked.reset(checked)

    def is_trusted(self) -> bool:
        """Whether a :meth:`trusted` block is running."""
        return self._trusted.get()

    def check_states(self, states: Sequence[tuple[str, object]]) -> bool:
        """``no_nan(states)`` unless tracing or :meth:`inside` a checked call; returns whether
        it ran. (The tracing test comes first: a tracer may not read the context.)"""
        if self._tracing() or self.inside():
            return False
        self.no_nan(states)
        return True

    def checked_call(self, states: Sequence[tuple[str, object]], fn: Callable[..., R], /,
                     *args: object, **kwargs: object) -> R:
        """``fn(*args, **kwargs)`` after :meth:`check_states` on ``states``; the calls ``fn``
        makes skip the check."""
        if not self.check_states(states):
            return fn(*args, **kwargs)
        token = self._checked.set(True)
        try:
            return fn(*args, **kwargs)
        finally:
            self._checked.reset(token)

    def checks_state(self, param: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
        """Decorate a public call whose argument ``param`` is an initial state: the call runs
        through :meth:`checked_call` with that state named ``param``."""

        def decorate(fn: Callable[..., R]) -> Callable[..., R]:
            index = list(inspect.signature(fn).parameters).index(param)

            @functools.wraps(fn)
            def call(*args: object, **kwargs: object) -> R:
                state = kwargs.get(param, args[index] if index < len(args) else None)
                return self.checked_call([(param, state)], fn, *args, **kwargs)

            return call

        return decorate
