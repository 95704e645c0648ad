"""The dispatch seam, each case in a fresh interpreter so import side effects are visible."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import mingru
from mingru import dispatch
from mingru_kernels._seam import interpreter_problem


def run_py(code: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {k: v for k, v in os.environ.items() if k not in ("MINGRU_SCAN", "TRITON_INTERPRET")}
    full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True, text=True, env=full_env, timeout=120,
    )


SCAN_CALL = """
import torch, mingru
P, Z = mingru.linear_scan(torch.rand(2, 5, 3), torch.rand(2, 5, 3))
"""


def test_import_never_imports_triton():
    r = run_py("""
        import sys, mingru, mingru.scans, mingru.dispatch
        assert 'triton' not in sys.modules, 'import mingru pulled in triton'
        print('ok')
    """)
    assert r.returncode == 0, r.stderr
    assert "ok" in r.stdout


@pytest.mark.parametrize("mode", ["eager", "auto", ""])
def test_eager_and_cpu_auto_never_import_triton(mode):
    r = run_py(SCAN_CALL + "import sys\nassert 'triton' not in sys.modules\n", MINGRU_SCAN=mode)
    assert r.returncode == 0, r.stderr


def test_invalid_mode_is_a_value_error():
    r = run_py(SCAN_CALL, MINGRU_SCAN="Triton")
    assert r.returncode != 0
    assert "ValueError" in r.stderr and "'auto', 'eager', 'triton'" in r.stderr


def test_triton_mode_on_cpu_raises_runtime_error_with_reason():
    r = run_py(SCAN_CALL, MINGRU_SCAN="triton")
    assert r.returncode != 0
    assert "RuntimeError" in r.stderr and "MINGRU_SCAN=triton" in r.stderr


AVAILABLE_WITHOUT_CUDA = """
import torch
torch.cuda.is_available = lambda: False  # no CUDA, whatever this machine has
import mingru
from mingru import dispatch
dispatch._status.clear()  # nothing cached from before the patch
assert mingru.available is dispatch.available
print(repr(mingru.available()))
"""


def test_available_reports_reason_without_cuda():
    """Without CUDA, ``available()`` is exactly the reason string; in interpreter mode the
    Triton path serves on CPU, so it is ``True`` whenever triton imports (and its interpreter
    can run the kernels with this NumPy)."""
    r = run_py(AVAILABLE_WITHOUT_CUDA, CUDA_VISIBLE_DEVICES="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == repr("CUDA not available")

    r = run_py(AVAILABLE_WITHOUT_CUDA, CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1")
    assert r.returncode == 0, r.stderr
    if importlib.util.find_spec("triton") is not None:
        import numpy
        import triton

        problem = interpreter_problem(triton.__version__, numpy.__version__)
        assert r.stdout.strip() == ("True" if problem is None else repr(problem))
    else:
        assert r.stdout.strip().startswith("'triton not importable: ")


def test_mode_is_read_at_call_time(monkeypatch):
    monkeypatch.setenv("MINGRU_SCAN", "eager")
    assert dispatch.scan_mode() == "eager"
    monkeypatch.setenv("MINGRU_SCAN", "bogus")
    with pytest.raises(ValueError, match="MINGRU_SCAN must be one of"):
        dispatch.scan_mode()
    monkeypatch.delenv("MINGRU_SCAN")
    assert dispatch.scan_mode() == "auto"


def test_use_backend_overrides_env(monkeypatch):
    monkeypatch.setenv("MINGRU_SCAN", "triton")
    with mingru.use_backend("eager"):
        assert dispatch.scan_mode() == "eager"
        mingru.linear_scan(torch.rand(1, 3, 2), torch.rand(1, 3, 2))  # would raise under triton on CPU
    assert dispatch.scan_mode() == "triton"
    with pytest.raises(ValueError, match="use_backend"):
        with mingru.use_backend("fast"):
            pass


def test_fallback_warning_is_emitted_once_per_reason(monkeypatch):
    """On CUDA inputs a kernel that cannot serve warns once, then stays quiet."""
    dispatch._warned.clear()
    monkeypatch.setattr(dispatch, "available", lambda: "triton not importable: test")

    class FakeCuda:
        is_cuda = True
        device = "cuda:0"

    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert dispatch.select("linear_scan", FakeCuda()) is None
        dispatch.select("parallel_scan_log", FakeCuda())
    fallback = [w for w in caught if issubclass(w.category, mingru.MinGRUFallbackWarning)]
    assert len(fallback) == 1
    assert "triton not importable: test" in str(fallback[0].message)


def test_fallback_warning_once_in_fresh_process():
    r = run_py("""
        import warnings, mingru
        from mingru import dispatch
        dispatch.available = lambda: 'CUDA not available'
        class FakeCuda:
            is_cuda = True
            device = 'cuda:0'
        warnings.simplefilter('always')
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always')
            for _ in range(5):
                dispatch.select('linear_scan', FakeCuda())
        print(sum(issubclass(x.category, mingru.MinGRUFallbackWarning) for x in w))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "1"


def test_the_poison_switch_follows_every_change_of_the_environment(monkeypatch):
    """The launchers read ``MINGRU_POISON_OUTPUTS`` and ``TRITON_INTERPRET`` at every
    allocation: set, changed and removed, through ``monkeypatch`` and directly."""
    from mingru_kernels.launch import switches

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    monkeypatch.delenv("MINGRU_POISON_OUTPUTS", raising=False)
    assert not switches.poison_outputs()
    monkeypatch.setenv("MINGRU_POISON_OUTPUTS", "1")
    assert switches.poison_outputs()
    monkeypatch.setenv("MINGRU_POISON_OUTPUTS", "0")
    assert not switches.poison_outputs()
    os.environ["TRITON_INTERPRET"] = "1"
    assert switches.poison_outputs()
    del os.environ["TRITON_INTERPRET"]
    assert not switches.poison_outputs()


def test_an_interpreter_that_cannot_run_the_kernels_says_which_versions(monkeypatch):
    """Triton < 3.7's interpreter with NumPy ≥ 2.4 fails inside every kernel with a loop: the
    seam names the versions and the way out instead."""
    triton = pytest.importorskip("triton")
    numpy = pytest.importorskip("numpy")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    reason = dispatch._probe(True)
    assert "Triton 3.6.0" in reason and "NumPy 2.4.1" in reason
    assert "install triton>=3.7 or numpy<2.4" in reason
    monkeypatch.setattr(numpy, "__version__", "2.3.5")
    assert dispatch._probe(True) is True
    monkeypatch.setattr(triton, "__version__", "3.7.0")
    monkeypatch.setattr(numpy, "__version__", "2.4.1")
    assert dispatch._probe(True) is True
