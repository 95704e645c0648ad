"""The private-hook registry (``mingru_kernels._compat``), framework-free: version ranges, the
one-time fallback warning, the process switch ``MINGRU_PRIVATE_HOOKS=0`` and ``hooks_disabled``,
on a stand-in hook declared for the test (the real hooks need a GPU to run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import pytest

from mingru_kernels import _compat
from tests.private_hooks import isolated


@pytest.fixture
def stand_in(monkeypatch):
    """A hook on the CPython interpreter's version, declared for one test only."""
    monkeypatch.setattr(_compat, "HOOK_NAMES", (*_compat.HOOK_NAMES, "stand_in"))
    hook = _compat.register(_compat.Hook(name="stand_in", dependency="python", minimum=(3, 10),
                                         below=(3, 99), public_path="the public path"))
    try:
        with isolated():
            yield hook
    finally:
        _compat._hooks.pop("stand_in", None)


def test_versions_parse_to_their_release_numbers():
    assert _compat.parse_version("3.9.0") == (3, 9, 0)
    assert _compat.parse_version("3.4.0+git1234abcd") == (3, 4, 0)
    assert _compat.parse_version("0.3.1.dev20250101") == (0, 3, 1)
    assert _compat.parse_version("2.13.0+cu130") == (2, 13, 0)
    with pytest.raises(ValueError, match="not a version"):
        _compat.parse_version("nightly")


@pytest.mark.parametrize(("found", "inside"), [
    ("3.4.0", True), ("3.9.9", True), ("3.9.0+cu130", True), ("3.10.0", False),
    ("3.3.1", False), ("4.0", False), (None, False), ("garbage", False)])
def test_the_range_includes_its_minimum_and_excludes_its_bound(found, inside):
    hook = _compat.Hook(name="triton_launch", dependency="triton", minimum=(3, 4),
                        below=(3, 10), public_path="Triton's own launch path")
    assert _compat._in_range(hook, found) is inside
    assert hook.range_text() == ">=3.4,<3.10"


def test_every_hook_declares_a_known_name_and_a_range():
    for hook in _compat._hooks.values():
        assert hook.name in _compat.HOOK_NAMES
        assert hook.minimum < hook.below
    with pytest.raises(ValueError, match="unknown private hook"):
        _compat.hook_active("no_such_hook")
    with pytest.raises(ValueError, match="unknown private hook"), \
            _compat.hooks_disabled("triton_lanuch"):
        pass


def test_a_version_outside_the_range_falls_back_with_one_warning(monkeypatch, stand_in):
    _compat._switch[:] = [False]
    monkeypatch.setattr(_compat.platform, "python_version", lambda: "3.9.18")
    with pytest.warns(RuntimeWarning) as record:
        assert not _compat.hook_available("stand_in")
        assert not _compat.hook_active("stand_in")
        assert not _compat.hook_available("stand_in")  # decided once: one warning
    [warning] = [w for w in record if "stand_in" in str(w.message)]
    text = str(warning.message)
    assert "python 3.9.18" in text and ">=3.10,<3.99" in text and "the public path" in text


def test_a_missing_private_attribute_falls_back_with_one_warning(stand_in):
    _compat._switch[:] = [False]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        _compat.fall_back("stand_in", "the private attribute is missing")
        _compat.fall_back("stand_in", "the private attribute is missing")
    assert len(record) == 1 and "the private attribute is missing" in str(record[0].message)
    assert not _compat.hook_available("stand_in")
    with _compat.hooks_disabled():  # leaving the block does not turn it back on
        pass
    assert not _compat.hook_active("stand_in")


def test_hooks_disabled_nests_and_names_or_takes_every_hook(stand_in):
    _compat._switch[:] = [False]
    assert _compat.hook_active("stand_in")
    with _compat.hooks_disabled("stand_in"):
        assert not _compat.hook_active("stand_in")
        with _compat.hooks_disabled():
            assert not _compat.hook_active("stand_in")
        assert not _compat.hook_active("stand_in")
    assert _compat.hook_active("stand_in")
    with _compat.hooks_disabled("jax_triton_compile"):
        assert _compat.hook_active("stand_in")


def test_a_hook_of_a_package_not_imported_is_not_running():
    with isolated():
        hooks = dict(_compat._hooks)
        _compat._hooks.pop("jax_triton_compile", None)
        _compat._available.pop("jax_triton_compile", None)
        _compat._active.pop("jax_triton_compile", None)
        try:
            assert not _compat.hook_active("jax_triton_compile")
            assert "jax_triton_compile" not in _compat._available  # decided later
        finally:
            _compat._hooks.update(hooks)


_SWITCH_CHECK = textwrap.dedent(
    """
    import importlib, os, warnings
    warnings.simplefilter("error", RuntimeWarning)  # the switch turns hooks off silently
    from mingru_kernels import _compat
    for frontend in ("mingru._compat", "mingru_jax._compat"):  # declare their hooks
        try:
            importlib.import_module(frontend)
        except ImportError:  # a framework not installed
            pass
    from mingru_kernels.launch import switches
    os.environ["MINGRU_POISON_OUTPUTS"] = "1"
    assert switches.poison_outputs()
    for name in _compat.HOOK_NAMES:
        assert not _compat.hook_active(name) and not _compat.hook_available(name), name
    print("OK")
    """
)


def test_the_switch_turns_every_hook_off_for_the_process():
    env = {**os.environ, _compat.SWITCH: "0"}
    res = subprocess.run([sys.executable, "-c", _SWITCH_CHECK], env=env, capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, res.stderr[-2000:]
    assert res.stdout.strip() == "OK"
