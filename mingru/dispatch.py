"""The dispatch seam: decides, per call, whether a scan runs eagerly or on a Triton kernel.

Every public scan (and the fused rotation/Givens recurrence) calls :func:`call` with its op
name, its eager twin and its arguments. This module is the only place that reads
``MINGRU_SCAN``, checks :func:`available` and imports a launcher from ``mingru._launch``.

Modes (``MINGRU_SCAN``, read at call time; unset or empty means ``auto``):

* ``auto``  — CUDA inputs go to the Triton kernel when one is registered, supports the call
  and is not slower than eager there; anything else runs eager. A fallback on CUDA inputs
  warns once per process per reason. CPU inputs run eager without importing Triton.
* ``eager`` — always eager; never imports Triton.
* ``triton`` — run the kernel or raise :class:`RuntimeError` saying why. With
  ``TRITON_INTERPRET=1`` CPU inputs run the same kernels through Triton's interpreter.

:func:`use_backend` overrides the environment variable for a region of code.
"""

from __future__ import annotations

import contextlib
import os
import threading
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mingru._launch import LAUNCHERS

__all__ = [
    "MODES",
    "MinGRUFallbackWarning",
    "available",
    "call",
    "scan_mode",
    "select",
    "use_backend",
]

MODES = ("auto", "eager", "triton")

# Stack of use_backend() overrides. A plain list rather than a ContextVar: torch.compile
# traces list reads but not ContextVar.get(), and the seam must trace without graph breaks.
_override: list[str] = []
_warned: set[str] = set()
_warn_lock = threading.Lock()


class MinGRUFallbackWarning(UserWarning):
    """Emitted (once per process per reason) when ``auto`` runs a CUDA call eagerly."""


def _check_mode(value: str, source: str) -> str:
    if value not in MODES:
        raise ValueError(
            f"{source} must be one of {', '.join(repr(m) for m in MODES)} "
            f"(exact lowercase); got {value!r}"
        )
    return value


def scan_mode() -> str:
    """The backend mode in force now: the :func:`use_backend` override, else ``MINGRU_SCAN``."""
    if _override:
        return _override[-1]
    value = os.environ.get("MINGRU_SCAN", "")
    return "auto" if value == "" else _check_mode(value, "MINGRU_SCAN")


@contextlib.contextmanager
def use_backend(mode: str) -> Iterator[None]:
    """Force a backend mode inside a ``with`` block, beating ``MINGRU_SCAN``.

    Example:
        >>> import torch, mingru
        >>> with mingru.use_backend("eager"):
        ...     P, Z = mingru.linear_scan(torch.rand(1, 4, 2), torch.rand(1, 4, 2))
    """
    _override.append(_check_mode(mode, "use_backend(mode)"))
    try:
        yield
    finally:
        _override.pop()


def interpreter_mode() -> bool:
    """True when Triton kernels run through Triton's CPU interpreter (``TRITON_INTERPRET=1``)."""
    return os.environ.get("TRITON_INTERPRET", "") == "1"


def available() -> bool | str:
    """``True`` when the Triton path can serve, else a human-readable reason.

    The Triton path can serve when a CUDA device is present and Triton imports, or in
    interpreter mode (``TRITON_INTERPRET=1``) when Triton imports. This is the first
    function of the library that may import Triton.
    """
    interp = interpreter_mode()
    if interp not in _status:
        _status[interp] = _probe(interp)
    return _status[interp]


# Results of available(), keyed by interpreter mode: the answer cannot change within a process,
# and caching it keeps the import out of code that torch.compile traces.
_status: dict[bool, bool | str] = {}


def _probe(interp: bool) -> bool | str:
    if not interp and not torch.cuda.is_available():
        return "CUDA not available"
    try:
        import triton  # noqa: F401
    except Exception as exc:  # ImportError or a broken install
        return f"triton not importable: {exc}"
    return True


def _warn_once(reason: str) -> None:
    with _warn_lock:
        if reason in _warned:
            return
        _warned.add(reason)
    warnings.warn(
        f"mingru: running eagerly instead of on Triton: {reason}",
        MinGRUFallbackWarning,
        stacklevel=4,
    )


def _first_tensor(args: tuple[Any, ...]) -> torch.Tensor | None:
    # Duck-typed on ``is_cuda`` so tensor subclasses and test doubles route alike.
    for arg in args:
        if hasattr(arg, "is_cuda") and hasattr(arg, "device"):
            return arg
    return None


def _launcher_or_reason(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]):
    """Return ``(launcher_module, None)`` if the kernel can run this call, else ``(None, why)``."""
    status = available()
    if status is not True:
        return None, status
    loader = LAUNCHERS.get(op)
    if loader is None:
        return None, f"no Triton kernel is registered for {op}"
    launcher = loader()
    why = launcher.unsupported_reason(*args, **kwargs)
    if why is not None:
        return None, f"{op}: {why}"
    return launcher, None


def select(op: str, *args: Any, **kwargs: Any):
    """The launcher module that will run ``op`` on these arguments, or ``None`` for eager."""
    mode = scan_mode()
    if mode == "eager":
        return None
    ref = _first_tensor(args)
    on_cuda = ref is not None and ref.is_cuda
    if mode == "auto":
        if not on_cuda:
            return None
        launcher, why = _launcher_or_reason(op, args, kwargs)
        if launcher is None:
            _warn_once(why)
            return None
        prefer = getattr(launcher, "prefer_over_eager", None)
        if prefer is not None and not prefer(*args, **kwargs):
            return None  # measured slower than eager on this shape class: eager by design
        return launcher
    # mode == "triton"
    if not on_cuda and not interpreter_mode():
        raise RuntimeError(
            f"MINGRU_SCAN=triton: cannot run {op} on Triton: inputs are on "
            f"{ref.device if ref is not None else 'no device'}, not CUDA "
            "(set TRITON_INTERPRET=1 to run the kernels on CPU through Triton's interpreter)"
        )
    launcher, why = _launcher_or_reason(op, args, kwargs)
    if launcher is None:
        raise RuntimeError(f"MINGRU_SCAN=triton: cannot run {op} on Triton: {why}")
    return launcher


def call(op: str, eager: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the backend :func:`select` picks; ``eager`` is its eager twin."""
    launcher = select(op, *args, **kwargs)
    if launcher is None:
        return eager(*args, **kwargs)
    return launcher.run(*args, **kwargs)
