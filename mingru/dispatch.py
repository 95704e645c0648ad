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
from contextvars import ContextVar
from typing import Any

import torch

from mingru._launch import REGISTRY
from mingru_kernels._seam import (
    MODES,
    WarnOnce,
    check_mode,
    interpreter_mode,
    interpreter_problem,
    mode_in_force,
    override_mode,
    pick_launcher,
    wants_kernel,
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

# The use_backend() override of this context (thread, asyncio task).
_override: ContextVar[str | None] = ContextVar("mingru_scan_override", default=None)
# torch.compile cannot trace ContextVar.get: while it traces, the seam reads this plain copy of
# the innermost override entered (per process, not per context), on which dynamo guards, so a
# compiled function re-traces when the override changes.
_traced_override: str | None = None


class MinGRUFallbackWarning(UserWarning):
    """Emitted (once per process per reason) when ``auto`` runs a CUDA call eagerly."""


_warn_once = WarnOnce(MinGRUFallbackWarning, "mingru: running eagerly instead of on Triton: ")
_warned = _warn_once.seen  # the reasons already warned about (tests reset it)

# Why a CUDA-only kernel cannot take the call (``where``: the inputs' device).
_OFF_CUDA = ("inputs are on {where}, not CUDA (set TRITON_INTERPRET=1 to run the kernels on "
             "CPU through Triton's interpreter)")


def _forced_mode() -> str | None:
    """The override in force (see :data:`_traced_override` for ``torch.compile``)."""
    return _traced_override if torch.compiler.is_compiling() else _override.get()


def scan_mode() -> str:
    """The backend mode in force now: the :func:`use_backend` override, else ``MINGRU_SCAN``."""
    return mode_in_force(_forced_mode())


@contextlib.contextmanager
def use_backend(mode: str) -> Iterator[None]:
    """Force a backend mode inside a ``with`` block, beating ``MINGRU_SCAN``.

    The override belongs to the running thread (and asyncio task). A function compiled with
    ``torch.compile`` re-traces when the override it was traced under changes.

    Example:
        >>> import torch, mingru
        >>> with mingru.use_backend("eager"):
        ...     P, Z = mingru.linear_scan(torch.rand(1, 4, 2), torch.rand(1, 4, 2))
    """
    global _traced_override
    mode = check_mode(mode, "use_backend(mode)")
    # Entered inside a function torch.compile traces, only the plain copy can change.
    inside = contextlib.nullcontext() if torch.compiler.is_compiling() else (
        override_mode(_override, mode))
    with inside:
        outer, _traced_override = _traced_override, mode
        try:
            yield
        finally:
            _traced_override = outer


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
        import numpy
        import triton
    except Exception as exc:  # ImportError or a broken install
        return f"triton not importable: {exc}"
    if interp:
        return interpreter_problem(triton.__version__, numpy.__version__) or True
    return True


def _first_tensor(args: tuple[Any, ...]) -> torch.Tensor | None:
    # Duck-typed on ``is_cuda`` so tensor subclasses and test doubles route alike.
    for arg in args:
        if hasattr(arg, "is_cuda") and hasattr(arg, "device"):
            return arg
    return None


def select(op: str, *args: Any, **kwargs: Any):
    """The launcher module that will run ``op`` on these arguments, or ``None`` for eager."""
    ref = _first_tensor(args)
    mode = scan_mode()
    if not wants_kernel(op, mode=mode, on_accelerator=ref is not None and ref.is_cuda,
                        where=ref.device if ref is not None else "no device",
                        off_accelerator=_OFF_CUDA):
        return None
    return pick_launcher(op, args, kwargs, mode=mode, status=available(), registry=REGISTRY,
                         warn=_warn_once)


def call(op: str, eager: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the backend :func:`select` picks; ``eager`` is its eager twin."""
    launcher = select(op, *args, **kwargs)
    if launcher is None:
        return eager(*args, **kwargs)
    return launcher.run(*args, **kwargs)
