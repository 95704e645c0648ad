"""Every use of a dependency's private internals, behind one switch: the hook registry.

Two hooks reach past a dependency's public API for speed; each lives in its package's
``_compat`` module and asks this one whether it may run:

* ``"triton_launch"`` (:mod:`mingru._compat`): repeat PyTorch launches go straight to Triton's
  compiled kernel, skipping ``JITFunction.run``'s per-call argument binding;
* ``"jax_triton_compile"`` (:mod:`mingru_jax._compat`): jax-triton's lowering compiles our
  kernels with PyTorch's specialisation, through ``triton.compile``.

Each hook is declared with the version range of its dependency it was written for
(:class:`Hook`: first version inclusive, last bound exclusive). At first use the installed
version is checked: inside the range the hook runs; outside it (or when the private attribute
it needs is missing, :func:`fall_back`) the public path runs for the rest of the process, and one
``RuntimeWarning`` per hook names the hook, the version found and the range. Results never
depend on a hook, only speed does.

``MINGRU_PRIVATE_HOOKS=0`` in the environment turns every hook off for the whole process (read
once, at the first question about any hook). For paired measurements in one process,
:func:`hooks_disabled` turns hooks off for every launch or lowering made inside the block, in
every thread (the autograd engine runs backward launches on its own thread); jax-triton compiles
at lowering time, so a function traced before entering keeps the route it was traced with: time
a fresh ``jax.jit`` on each side. Pure Python: imports no framework and no triton.

Example:
    >>> from mingru_kernels import _compat
    >>> _compat.HOOK_NAMES
    ('triton_launch', 'jax_triton_compile')
    >>> with _compat.hooks_disabled("triton_launch"):
    ...     _compat.hook_active("triton_launch")
    False
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import platform
import re
import sys
import threading
import warnings
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["HOOK_NAMES", "SWITCH", "Hook", "fall_back", "hook_active",
           "hook_available", "hooks_disabled", "installed_version", "parse_version", "register"]

SWITCH = "MINGRU_PRIVATE_HOOKS"
"""The environment variable that turns every hook off when it is ``"0"``."""

HOOK_NAMES = ("triton_launch", "jax_triton_compile")
"""Every hook of the three packages (a name outside this list is a typo)."""

Version = tuple[int, ...]


@dataclass(frozen=True)
class Hook:
    """One use of private internals: ``dependency`` (a distribution name, or ``"python"`` for
    the CPython interpreter) at versions ``minimum <= v < below``; ``public_path`` says what runs
    instead (for the warning)."""

    name: str
    dependency: str
    minimum: Version
    below: Version
    public_path: str

    def range_text(self) -> str:
        """The range as ``>=3.4,<3.10``."""
        return f">={_dotted(self.minimum)},<{_dotted(self.below)}"


_hooks: dict[str, Hook] = {}
_available: dict[str, bool] = {}  # per process: switch, version range, private attributes
_active: dict[str, bool] = {}  # available and not disabled now (a resolved hook's entry)
_disabled: dict[str, int] = {}  # name, or "*" for every hook -> nesting depth
_warned: set[str] = set()
_lock = threading.RLock()


def _dotted(version: Version) -> str:
    return ".".join(map(str, version))


def _check_name(name: str) -> None:
    if name not in HOOK_NAMES:
        raise ValueError(f"unknown private hook {name!r}; the hooks are {', '.join(HOOK_NAMES)}")


def register(hook: Hook) -> Hook:
    """Declare ``hook`` (its package's ``_compat`` does, at import); returns it."""
    _check_name(hook.name)
    with _lock:
        _hooks[hook.name] = hook
    return hook


def parse_version(text: str) -> Version:
    """The leading release numbers of a version string: ``"3.9.0+cu130"`` -> ``(3, 9, 0)``."""
    match = re.match(r"\s*v?(\d+(?:\.\d+)*)", text)
    if match is None:
        raise ValueError(f"not a version: {text!r}")
    return tuple(int(part) for part in match.group(1).split("."))


def installed_version(dependency: str) -> str | None:
    """The installed version of ``dependency`` (``None`` when absent): the imported module's
    ``__version__`` when it has one (a dependency may come under another distribution name),
    else the distribution's metadata. ``"python"`` is the CPython interpreter (``None`` under
    another implementation)."""
    if dependency == "python":
        return platform.python_version() if sys.implementation.name == "cpython" else None
    version = getattr(sys.modules.get(dependency.replace("-", "_")), "__version__", None)
    if isinstance(version, str):
        return version
    try:
        return importlib.metadata.version(dependency)
    except importlib.metadata.PackageNotFoundError:
        return None


def _in_range(hook: Hook, found: str | None) -> bool:
    if found is None:
        return False
    try:
        version = parse_version(found)
    except ValueError:
        return False
    return hook.minimum <= version < hook.below


def _warn(hook: Hook, why: str) -> None:
    with _lock:
        if hook.name in _warned:
            return
        _warned.add(hook.name)
    found = installed_version(hook.dependency) or "none"
    warnings.warn(
        f"mingru private hook {hook.name!r} is off: {why} ({hook.dependency} {found} found; "
        f"the hook was written for {hook.range_text()}); {hook.public_path} runs instead "
        f"(same results, slower)", RuntimeWarning, stacklevel=4)


_switch: list[bool] = []  # MINGRU_PRIVATE_HOOKS == "0", read at the first hook question


def _switched_off() -> bool:
    if not _switch:
        _switch.append(os.environ.get(SWITCH, "") == "0")
    return _switch[0]


def _resolve(name: str) -> bool:
    """Decide ``name``'s availability once per process (warning if out of range) and its
    activity now. A hook whose package's ``_compat`` is not imported yet is not running:
    ``False``, decided later."""
    _check_name(name)
    with _lock:
        if name not in _available:
            hook = _hooks.get(name)
            if hook is None:
                return False
            if _switched_off():
                _available[name] = False
            elif _in_range(hook, installed_version(hook.dependency)):
                _available[name] = True
            else:
                _available[name] = False
                _warn(hook, "this version is outside the range")
        _active[name] = _available[name] and not (_disabled.get(name) or _disabled.get("*"))
        return _active[name]


def hook_available(name: str) -> bool:
    """Whether hook ``name`` can run in this process: ``MINGRU_PRIVATE_HOOKS`` is not ``0``, the
    dependency's version is inside the hook's range, and no private attribute it needs was
    found missing. Decided at the first ask (which may warn); :func:`hooks_disabled` aside."""
    if name not in _available:
        _resolve(name)
    return _available.get(name, False)


def hook_active(name: str) -> bool:
    """Whether hook ``name`` runs now: :func:`hook_available` and not inside
    :func:`hooks_disabled` for it. A dictionary lookup once decided (cheap enough per launch)."""
    try:
        return _active[name]
    except KeyError:
        return _resolve(name)


def fall_back(name: str, why: str) -> None:
    """Turn hook ``name`` off for the rest of the process (a private attribute it needs is
    missing, or its dependency behaves otherwise than it was written for): one warning."""
    _check_name(name)
    with _lock:
        _available[name] = False
        _active[name] = False
        hook = _hooks.get(name)
    if hook is not None:
        _warn(hook, why)


@contextlib.contextmanager
def hooks_disabled(*names: str) -> Iterator[None]:
    """Turn the hooks ``names`` (all of them when none is given) off inside the block, for
    every launch or lowering made there, in every thread; nests."""
    keys = names or ("*",)
    for name in names:
        _check_name(name)
    with _lock:
        for key in keys:
            _disabled[key] = _disabled.get(key, 0) + 1
        _refresh()
    try:
        yield
    finally:
        with _lock:
            for key in keys:
                _disabled[key] -= 1
                if not _disabled[key]:
                    del _disabled[key]
            _refresh()


def _refresh() -> None:
    for name in list(_active):
        _active[name] = _available[name] and not (_disabled.get(name) or _disabled.get("*"))
