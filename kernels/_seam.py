"""The dispatch rules both frontends share, framework-free (no torch, jax or triton import).

``mingru.dispatch`` and ``mingru_jax.dispatch`` differ only in how they tell where a call runs
(CUDA tensor vs jax platform) and whether Triton can serve there (their ``available()``); the
mode names, the environment variable, the backend override (:func:`override_mode` on a
:class:`~contextvars.ContextVar` of each frontend), the launcher registry (:class:`Registry`:
op name → loader of its launcher module) and the auto/eager/triton decision
(:func:`wants_kernel`, then :func:`pick_launcher`) live here once, so the two seams cannot
drift apart. The seam asks the registry for a launcher itself: a frontend hands it values
(the mode, where the call runs, the availability) and its registry, no callbacks.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib
import os
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from mingru_kernels._compat import parse_version

MODES = ("auto", "eager", "triton")


def check_mode(value: str, source: str) -> str:
    """``value`` if it is one of :data:`MODES`, else a ``ValueError`` naming ``source``."""
    if value not in MODES:
        raise ValueError(
            f"{source} must be one of {', '.join(repr(m) for m in MODES)} "
            f"(exact lowercase); got {value!r}"
        )
    return value


def env_mode() -> str:
    """``MINGRU_SCAN`` (unset or empty means ``auto``)."""
    value = os.environ.get("MINGRU_SCAN", "")
    return "auto" if value == "" else check_mode(value, "MINGRU_SCAN")


def interpreter_mode() -> bool:
    """True when Triton kernels run through Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def interpreter_problem(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's interpreter cannot run the kernels with these versions, or ``None``.

    Before Triton 3.7 the interpreter turns a scalar computed in a kernel (a loop bound) into a
    Python int with ``int()`` of a one-element array, which NumPy 2.4 refuses: every kernel
    with such a loop fails with an ``InterpreterError`` deep in Triton.

    Example:
        >>> interpreter_problem("3.9.0", "2.4.1") is None
        True
    """
    if parse_version(triton_version) < (3, 7) and parse_version(numpy_version) >= (2, 4):
        return (f"Triton {triton_version}'s interpreter (TRITON_INTERPRET=1) cannot run the "
                f"kernels with NumPy {numpy_version}: install triton>=3.7 or numpy<2.4")
    return None


class WarnOnce:
    """Issues ``category`` warnings at most once per process per reason."""

    def __init__(self, category: type[Warning], prefix: str) -> None:
        self.category = category
        self.prefix = prefix
        self.seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, reason: str) -> None:
        with self._lock:
            if reason in self.seen:
                return
            self.seen.add(reason)
        warnings.warn(f"{self.prefix}{reason}", self.category, stacklevel=5)


def mode_in_force(forced: str | None) -> str:
    """The mode a call runs under: ``forced`` (a ``use_backend`` override), else
    ``MINGRU_SCAN``."""
    return forced if forced is not None else env_mode()


@contextlib.contextmanager
def override_mode(override: contextvars.ContextVar[str | None], mode: str) -> Iterator[None]:
    """The body of each frontend's ``use_backend(mode)``: inside the block ``override`` holds
    the checked ``mode`` (per thread and per asyncio task, as a
    :class:`~contextvars.ContextVar` does), and its previous value after it."""
    token = override.set(check_mode(mode, "use_backend(mode)"))
    try:
        yield
    finally:
        override.reset(token)


@dataclass(frozen=True)
class Registry:
    """A frontend's launchers: ``launchers`` maps an op name to a loader that imports and
    returns the module launching its kernel (a static import inside a function: importing the
    registry imports no launcher and no Triton, and ``torch.compile`` traces the import, which
    it cannot do for ``importlib`` with a computed name); ``package`` names the frontend in
    reasons.

    Each launcher module provides ``unsupported_reason(*args, **kwargs) -> str | None`` (why
    the kernel cannot run this call, or ``None``), optionally ``prefer_over_eager(*args,
    **kwargs) -> bool`` (whether ``auto`` should pick the kernel for this shape class), and
    ``run(*args, **kwargs)``: the op, with the eager twin's signature and outputs.
    """

    package: str
    launchers: Mapping[str, Callable[[], ModuleType]]

    def launcher(self, op: str) -> ModuleType | None:
        """The launcher module registered for ``op``, or ``None``."""
        load = self.launchers.get(op)
        return None if load is None else load()


def import_loaders(package: str, ops: Iterable[str]) -> dict[str, Callable[[], ModuleType]]:
    """``op -> loader`` of :attr:`Registry.launchers` whose loader imports the module
    ``<package>.<op>`` by name when first called (importing the registry imports no
    launcher). For ``mingru_jax._launch``: ``jax.jit`` traces plain Python.
    ``torch.compile(fullgraph=True)`` cannot trace an import by a computed name, so
    ``mingru._launch`` writes one loader per op with a static import instead.

    Example:
        >>> loaders = import_loaders("json", ["decoder"])
        >>> loaders["decoder"]().__name__
        'json.decoder'
    """
    return {op: functools.partial(importlib.import_module, f"{package}.{op}") for op in ops}


def wants_kernel(op: str, *, mode: str, on_accelerator: bool, where: object,
                 off_accelerator: str) -> bool:
    """Whether ``op`` should look for a kernel (then :func:`pick_launcher`) or run eager.

    * ``eager``: never.
    * ``auto``: on the accelerator only (off it, calls run eager silently).
    * ``triton``: always, but off the accelerator only in interpreter mode: otherwise a
      ``RuntimeError`` whose reason is ``off_accelerator.format(where=where)``.
    """
    if mode == "eager":
        return False
    if mode == "auto":
        return on_accelerator
    if not on_accelerator and not interpreter_mode():
        raise RuntimeError(
            f"MINGRU_SCAN=triton: cannot run {op} on Triton: "
            f"{off_accelerator.format(where=where)}"
        )
    return True


def pick_launcher(
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    mode: str,
    status: bool | str,
    registry: Registry,
    warn: WarnOnce,
) -> Any:
    """The launcher that runs ``op`` on these arguments under ``mode`` (``auto`` or ``triton``,
    once :func:`wants_kernel` said yes), or ``None`` for eager.

    ``status`` is the frontend's ``available()``: ``True`` or why Triton cannot serve here.
    The launcher comes from ``registry``; a missing one, or one whose ``unsupported_reason``
    names a reason, is a fallback: under ``auto`` it warns once per reason (``warn``) and runs
    eager, under ``triton`` it is a ``RuntimeError`` saying why. Under ``auto`` a launcher
    whose ``prefer_over_eager`` says no (where eager is the faster path) runs eager silently.
    """
    launcher, why = _launcher_or_reason(op, args, kwargs, status=status, registry=registry)
    if mode == "auto":
        if launcher is None:
            warn(why)
            return None
        prefer = getattr(launcher, "prefer_over_eager", None)
        if prefer is not None and not prefer(*args, **kwargs):
            return None
        return launcher
    if launcher is None:
        raise RuntimeError(f"MINGRU_SCAN=triton: cannot run {op} on Triton: {why}")
    return launcher


def _launcher_or_reason(op: str, args: tuple[Any, ...], kwargs: dict[str, Any], *,
                        status: bool | str, registry: Registry) -> tuple[Any, str | None]:
    """``(launcher_module, None)`` if the kernel can run this call, else ``(None, why)``."""
    if status is not True:
        return None, str(status)
    launcher = registry.launcher(op)
    if launcher is None:
        return None, f"no Triton kernel is registered for {op} in {registry.package}"
    why = launcher.unsupported_reason(*args, **kwargs)
    if why is not None:
        return None, f"{op}: {why}"
    return launcher, None
