"""The dispatch seam of the JAX frontend: decides, per traced call, eager or Triton.

The twin of :mod:`mingru.dispatch`. Every scan (and the fused rotation/Givens recurrence and
the delta rule) calls :func:`call` with its op name, its eager twin and its arguments. This
module is the only place that reads ``MINGRU_SCAN``, checks :func:`available` and imports a
launcher from ``mingru_jax._launch``; the decision rules themselves are :mod:`mingru_kernels._seam`,
shared with the PyTorch seam.

Modes (``MINGRU_SCAN``; unset or empty means ``auto``):

* ``auto``  — on a GPU backend, the jax-triton kernel runs when one is registered, supports
  the call and is not slower than eager there; anything else runs eager, and a fallback on
  the GPU warns once per process per reason. CPU calls run eager without importing Triton.
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
import contextvars
import importlib
from collections.abc import Callable, Iterator
from typing import Any

from mingru_jax._launch import LAUNCHERS, import_jax_triton
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

_override: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "mingru_jax_scan_override", default=None
)


class MinGRUFallbackWarning(UserWarning):
    """Emitted (once per process per reason) when ``auto`` runs a GPU call eagerly."""


_warn_once = WarnOnce(MinGRUFallbackWarning, "mingru_jax: running eagerly instead of on Triton: ")
_warned = _warn_once.seen  # the reasons already warned about (tests reset it)


def scan_mode() -> str:
    """The backend mode in force now: the :func:`use_backend` override, else ``MINGRU_SCAN``.

    Example:
        >>> from mingru_jax.dispatch import scan_mode, use_backend
        >>> with use_backend("eager"):
        ...     scan_mode()
        'eager'
    """
    forced = _override.get()
    return forced if forced is not None else env_mode()


@contextlib.contextmanager
def use_backend(mode: str) -> Iterator[None]:
    """Force a backend mode inside a ``with`` block, beating ``MINGRU_SCAN``.

    Takes effect for functions *traced* inside the block (see the module docstring). The
    mode is not part of ``jax.jit``'s cache key: a second ``jax.jit(f)`` of the same ``f``
    with the same argument shapes replays the first trace, whatever the mode. To compare
    backends, trace a fresh function under each (``jax.jit(lambda *a: f(*a))``).

    Example:
        >>> import jax.numpy as jnp, mingru_jax
        >>> with mingru_jax.use_backend("eager"):
        ...     P, Z = mingru_jax.linear_scan(jnp.full((1, 4, 2), 0.5), jnp.ones((1, 4, 2)))
    """
    token = _override.set(check_mode(mode, "use_backend(mode)"))
    try:
        yield
    finally:
        _override.reset(token)


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
        import triton  # noqa: F401
    except Exception as exc:  # ImportError or a broken install
        return f"triton not importable: {exc}"
    if gpu:
        try:
            import_jax_triton()
        except Exception as exc:
            return f"jax_triton not importable: {exc}"
    return True


def _platform(args: tuple[Any, ...]) -> str:
    """``"gpu"`` or ``"cpu"`` (etc.) for the call: a concrete array's device, else the default.

    Tracers carry no device at trace time, so traced calls use ``jax.default_backend()``.
    """
    import jax

    for arg in args:
        if isinstance(arg, jax.Array) and not isinstance(arg, jax.core.Tracer):
            try:
                platform = next(iter(arg.devices())).platform
            except Exception:  # deleted or abstract array
                break
            return "gpu" if platform in ("gpu", "cuda", "rocm") else platform
    backend = jax.default_backend()
    return "gpu" if backend in ("gpu", "cuda", "rocm") else backend


def _launcher_or_reason(op: str, args: tuple[Any, ...], kwargs: dict[str, Any]):
    """Return ``(launcher_module, None)`` if the kernel can run this call, else ``(None, why)``."""
    status = available()
    if status is not True:
        return None, status
    module_name = LAUNCHERS.get(op)
    if module_name is None:
        return None, f"no Triton kernel is registered for {op} in mingru_jax"
    launcher = importlib.import_module(module_name)
    why = launcher.unsupported_reason(*args, **kwargs)
    if why is not None:
        return None, f"{op}: {why}"
    return launcher, None


def select(op: str, *args: Any, **kwargs: Any):
    """The launcher module that will run ``op`` on these arguments, or ``None`` for eager."""
    platform = _platform(args)

    def off_gpu() -> str:
        return (
            f"no GPU backend in jax (the call runs on {platform}; set TRITON_INTERPRET=1 for "
            "Triton's CPU interpreter)"
        )

    return choose_launcher(
        op, args, kwargs, mode=scan_mode(), on_accelerator=platform == "gpu",
        off_accelerator_reason=off_gpu, resolve=_launcher_or_reason, warn_once=_warn_once,
    )


def call(op: str, eager: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the backend :func:`select` picks; ``eager`` is its eager twin.

    Called at trace time under :func:`jax.jit`, so the choice is frozen into the trace.
    """
    launcher = select(op, *args, **kwargs)
    if launcher is None:
        return eager(*args, **kwargs)
    return launcher.run(*args, **kwargs)
