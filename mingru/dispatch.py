"""The dispatch seam: decides, per call, whether a scan runs eagerly or on a Triton kernel.

Every public scan (and the fused rotation/Givens recurrence) calls :func:`call` with its op
name, its eager twin and its arguments. This module is the only place that reads
``MINGRU_SCAN``, checks :func:`available` and imports a launcher from ``mingru._launch``. The
mode names and the auto/eager/triton decision are shared with ``mingru_jax`` through the
framework-free :mod:`mingru_kernels._seam`; this module supplies the CUDA-specific parts.

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
from collections.abc import Callable, Iterator
from typing import Any

import torch

from mingru._launch import LAUNCHERS
from mingru_kernels._seam import (
    MODES,
    WarnOnce,
    check_mode,
    choose_launcher,
    env_mode,
    interpreter_mode,
)

__all__ = [
    "MODES",
    "MinGRUFallbackWarning",
    "available",
    "call",
    "scan_mode",
    "select",
    "use_backend",
]

# Stack of use_backend() overrides. A plain list rather than a ContextVar: torch.compile
# traces list reads but not ContextVar.get(), and the seam must trace without graph breaks.
_override: list[str] = []


class MinGRUFallbackWarning(UserWarning):
    """Emitted (once per process per reason) when ``auto`` runs a CUDA call eagerly."""


_warn_once = WarnOnce(MinGRUFallbackWarning, "mingru: running eagerly instead of on Triton: ")
_warned = _warn_once.seen  # the reasons already warned about (tests reset it)


def scan_mode() -> str:
    """The backend mode in force now: the :func:`use_backend` override, else ``MINGRU_SCAN``."""
    return _override[-1] if _override else env_mode()


@contextlib.contextmanager
def use_backend(mode: str) -> Iterator[None]:
    """Force a backend mode inside a ``with`` block, beating ``MINGRU_SCAN``.

    Example:
        >>> import torch, mingru
        >>> with mingru.use_backend("eager"):
        ...     P, Z = mingru.linear_scan(torch.rand(1, 4, 2), torch.rand(1, 4, 2))
    """
    _override.append(check_mode(mode, "use_backend(mode)"))
    try:
        yield
    finally:
        _override.pop()


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
    ref = _first_tensor(args)

    def off_cuda() -> str:
        return (
            f"inputs are on {ref.device if ref is not None else 'no device'}, not CUDA "
            "(set TRITON_INTERPRET=1 to run the kernels on CPU through Triton's interpreter)"
        )

    return choose_launcher(
        op, args, kwargs, mode=scan_mode(), on_accelerator=ref is not None and ref.is_cuda,
        off_accelerator_reason=off_cuda, resolve=_launcher_or_reason, warn_once=_warn_once,
    )


def call(op: str, eager: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the backend :func:`select` picks; ``eager`` is its eager twin."""
    launcher = select(op, *args, **kwargs)
    if launcher is None:
        return eager(*args, **kwargs)
    return launcher.run(*args, **kwargs)
