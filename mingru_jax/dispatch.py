"""The dispatch seam of the JAX frontend: decides, per traced call, eager or Triton.

The twin of :mod:`mingru.dispatch`. Every scan (and the fused rotation/Givens recurrence and
the delta rule) calls :func:`call` with its op name, its eager twin and its arguments. This
module is the only place that reads ``MINGRU_SCAN``, checks :func:`available` and imports a
launcher from ``mingru_jax._launch``; the decision rules themselves are :mod:`mingru_kernels._seam`,
shared with the PyTorch seam.

Modes (``MINGRU_SCAN``; unset or empty means ``auto``):

* ``auto``  — on a GPU, the jax-triton kernel runs when one is registered, supports the call
  and is not slower than eager there; anything else runs eager, and a fallback on the GPU
  warns once per process per reason. CPU calls run eager without importing Triton, on a GPU
  machine too: where a call runs is its committed arrays' device, else the trace's mesh, the
  default device or the default backend (:func:`mingru_jax._platform.platform_of`).
* ``eager`` — always eager; never imports Triton or jax-triton.
* ``triton`` — run the kernel or raise :class:`RuntimeError` saying why.

**The mode is read at trace time.** Under :func:`jax.jit` the choice is made while the
function is traced and baked into the compiled computation: a jitted function keeps the
backend it was traced with, even if ``MINGRU_SCAN`` or :func:`use_backend` changes later.
A new ``jax.jit`` wrapper of the *same* Python function is not enough: jax reuses that
function's trace for the same argument types. To switch, enter :func:`use_backend` inside the
jitted function (then each mode is its own function), jit a new function (a fresh closure),
or call ``jax.clear_caches()``.

:func:`use_backend` overrides the environment variable for a region of code (at trace time,
like the variable).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from mingru_jax._launch import REGISTRY, import_jax_triton
from mingru_kernels._seam import (
    MODES,
    WarnOnce,
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
_override: ContextVar[str | None] = ContextVar("mingru_jax_scan_override", default=None)


class MinGRUFallbackWarning(UserWarning):
    """Emitted (once per process per reason) when ``auto`` runs a GPU call eagerly."""


_warn_once = WarnOnce(MinGRUFallbackWarning, "mingru_jax: running eagerly instead of on Triton: ")
_warned = _warn_once.seen  # the reasons already warned about (tests reset it)

# Why the GPU kernels cannot take the call (``where``: the platform it runs on).
_OFF_GPU = ("no GPU backend in jax (the call runs on {where}; set TRITON_INTERPRET=1 for "
            "Triton's CPU interpreter)")


def _forced_mode() -> str | None:
    """The override in force (read at trace time, like ``MINGRU_SCAN``)."""
    return _override.get()


def scan_mode() -> str:
    """The backend mode in force now: the :func:`use_backend` override, else ``MINGRU_SCAN``.

    Example:
        >>> from mingru_jax.dispatch import scan_mode, use_backend
        >>> with use_backend("eager"):
        ...     scan_mode()
        'eager'
    """
    return mode_in_force(_forced_mode())


def use_backend(mode: str) -> contextlib.AbstractContextManager[None]:
    """Force a backend mode inside a ``with`` block, beating ``MINGRU_SCAN``.

    The override belongs to the running thread (and asyncio task). It takes effect for
    functions *traced* inside the block (see the module docstring). The
    mode is not part of ``jax.jit``'s cache key: a second ``jax.jit(f)`` of the same ``f``
    with the same argument shapes replays the first trace, whatever the mode. To compare
    backends, trace a fresh function under each (``jax.jit(lambda *a: f(*a))``).

    Example:
        >>> import jax.numpy as jnp, mingru_jax
        >>> with mingru_jax.use_backend("eager"):
        ...     P, Z = mingru_jax.linear_scan(jnp.full((1, 4, 2), 0.5), jnp.ones((1, 4, 2)))
    """
    return override_mode(_override, mode)


def _has_gpu_backend() -> bool:
    import jax

    try:
        return len(jax.devices("gpu")) > 0
    except RuntimeError:  # no GPU platform initialised in this jax
        return False


def available() -> bool | str:
    """``True`` when the Triton path can serve, else a human-readable reason.

    It can serve when jax has a GPU backend and both Triton and jax-triton import, or in
    interpreter mode (``TRITON_INTERPRET=1``) when Triton imports. This is the first
    function of ``mingru_jax`` that may import Triton or jax-triton.

    Example:
        >>> import mingru_jax
        >>> status = mingru_jax.available()   # True, or e.g. "no GPU backend in jax"
        >>> isinstance(status, (bool, str))
        True
    """
    gpu = _has_gpu_backend()
    if not gpu and not interpreter_mode():
        return "no GPU backend in jax"
    try:
        import numpy
        import triton
    except Exception as exc:  # ImportError or a broken install
        return f"triton not importable: {exc}"
    if not gpu:
        return interpreter_problem(triton.__version__, numpy.__version__) or True
    try:
        import_jax_triton()
    except Exception as exc:
        return f"jax_triton not importable: {exc}"
    return True


def _platform(args: tuple[Any, ...]) -> str:
    """``"gpu"`` or ``"cpu"`` (etc.) for the call (:func:`mingru_jax._platform.platform_of`:
    a concrete array's device, else the trace's mesh, the default device or backend)."""
    from mingru_jax._platform import platform_of

    return platform_of(args)


def select(op: str, *args: Any, **kwargs: Any):
    """The launcher module that will run ``op`` on these arguments, or ``None`` for eager."""
    platform = _platform(args)
    mode = scan_mode()
    if not wants_kernel(op, mode=mode, on_accelerator=platform == "gpu", where=platform,
                        off_accelerator=_OFF_GPU):
        return None
    return pick_launcher(op, args, kwargs, mode=mode, status=available(), registry=REGISTRY,
                         warn=_warn_once)


def call(op: str, eager: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the backend :func:`select` picks; ``eager`` is its eager twin.

    Called at trace time under :func:`jax.jit`, so the choice is frozen into the trace.
    """
    launcher = select(op, *args, **kwargs)
    if launcher is None:
        return eager(*args, **kwargs)
    return launcher.run(*args, **kwargs)
