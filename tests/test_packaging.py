"""Packaging rules of the restructuring: neither framework is a hard dependency, and a missing
one is an ImportError that names the extra to install (checked in subprocesses where the
framework is made unimportable, so the test runs with or without it installed)."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _import_without(module: str, *missing: str) -> subprocess.CompletedProcess:
    block = "; ".join(f"sys.modules[{name!r}] = None" for name in missing)
    code = f"import sys; {block}; import {module}"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize(("module", "missing", "extra"), [
    ("mingru", ("torch",), "'.[torch]'"),
    ("mingru_jax", ("jax",), "'.[jax]'"),
    ("mingru_jax", ("flax",), "'.[jax]'"),
])
def test_a_missing_framework_names_its_extra(module, missing, extra):
    result = _import_without(module, *missing)
    assert result.returncode != 0
    assert "ImportError" in result.stderr and extra in result.stderr, result.stderr[-500:]


def test_the_kernels_and_the_cli_import_without_either_framework():
    code = ("import sys; sys.modules['torch'] = None; sys.modules['jax'] = None; "
            "import mingru_kernels.launch.switches, mingru_kernels._spec, mingru_cli.cli; "
            "print('ok')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stderr[-500:]
