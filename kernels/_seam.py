"""The dispatch rules both frontends share, framework-free (no torch, jax or triton import).

``mingru.dispatch`` and ``mingru_jax.dispatch`` differ only in how they tell where a call runs
(CUDA tensor vs jax platform), how they find a launcher, and how their override is stored;
the mode names, the environment variable and the auto/eager/triton decision live here once,
so the two seams cannot drift apart.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable
from typing import Any

MODES = ("auto", "eager", "triton")

Resolve = Callable[[str, tuple[Any, ...], dict[str, Any]], tuple[Any, str | None]]


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


def choose_launcher(
    op: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    mode: str,
    on_accelerator: bool,
    off_accelerator_reason: Callable[[], str],
    resolve: Resolve,
    warn_once: Callable[[str], None],
) -> Any:
    """The launcher that runs ``op`` under ``mode``, or ``None`` for eager.

    ``resolve(op, args, kwargs)`` returns ``(launcher, None)`` or ``(None, why)``.

    * ``eager``: always ``None``.
    * ``auto``: off-accelerator calls run eager silently; on the accelerator a kernel that
      cannot serve warns once per reason and runs eager, and a kernel whose
      ``prefer_over_eager`` says no (where eager is the faster path) runs eager silently.
    * ``triton``: the launcher, or ``RuntimeError`` saying why (off-accelerator calls are
      allowed only in interpreter mode).
    """
    if mode == "eager":
        return None
    if mode == "auto":
        if not on_accelerator:
            return None
        launcher, why = resolve(op, args, kwargs)
        if launcher is None:
            warn_once(why)
            return None
        prefer = getattr(launcher, "prefer_over_eager", None)
        if prefer is not None and not prefer(*args, **kwargs):
            return None
        return launcher
    if not on_accelerator and not interpreter_mode():
        raise RuntimeError(
            f"MINGRU_SCAN=triton: cannot run {op} on Triton: {off_accelerator_reason()}"
        )
    launcher, why = resolve(op, args, kwargs)
    if launcher is None:
        raise RuntimeError(f"MINGRU_SCAN=triton: cannot run {op} on Triton: {why}")
    return launcher
