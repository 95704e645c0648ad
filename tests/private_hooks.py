"""Test helpers for the private hooks (``mingru_kernels._compat``), framework-free.

* :func:`isolated` — the registry's per-process state (availability, warnings, the switch) as
  it was before the block, whatever the block decided or warned;
* :func:`hook_mode` — run the block with hook ``name`` on or off: ``"on"`` skips the test where
  the hook cannot run in this process (``MINGRU_PRIVATE_HOOKS=0``, a dependency outside the
  range), ``"off"`` runs it inside ``hooks_disabled(name)``, so the public path stays tested.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from mingru_kernels import _compat

MODES = ("on", "off")


@contextlib.contextmanager
def isolated() -> Iterator[None]:
    """Restore the registry's state (in place: hooks hold references to its dicts) on exit."""
    saved = [(state, state.copy()) for state in
             (_compat._available, _compat._active, _compat._disabled, _compat._warned,
              _compat._switch)]
    try:
        yield
    finally:
        for state, copy in saved:
            state.clear()
            if isinstance(state, list):
                state.extend(copy)
            else:
                state.update(copy)


@contextlib.contextmanager
def hook_mode(name: str, mode: str) -> Iterator[None]:
    """Hook ``name`` on (skip when it cannot run here) or off, inside the block."""
    if mode == "on":
        if not _compat.hook_available(name):
            pytest.skip(f"private hook {name!r} cannot run in this process")
        yield
        return
    with _compat.hooks_disabled(name):
        yield
