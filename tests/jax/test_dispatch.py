"""The mingru_jax dispatch seam: lazy imports, modes, trace-time selection, the launcher
protocol and the once-per-reason fallback warning."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

import mingru_jax  # noqa: E402
from mingru_jax import dispatch  # noqa: E402
from mingru_jax._launch import LAUNCHERS  # noqa: E402

_SUBPROCESS = textwrap.dedent(
    """
    import os, sys
    import mingru_jax
    heavy = {"triton", "jax_triton", "flax", "torch"}
    assert not heavy & set(sys.modules), heavy & set(sys.modules)

    import jax.numpy as jnp
    a = jnp.full((1, 3, 2), 0.5)
    for mode in ("", "auto", "eager"):
        os.environ["MINGRU_SCAN"] = mode
        P, Z = mingru_jax.linear_scan(a, a)
        assert abs(float(Z[0, -1, 0]) - 0.875) < 1e-6
    assert "triton" not in sys.modules and "jax_triton" not in sys.modules

    assert mingru_jax.available() == "no GPU backend in jax", mingru_jax.available()
    assert "triton" not in sys.modules

    def refused(mode, error, reason):
        os.environ["MINGRU_SCAN"] = mode
        try:
            mingru_jax.linear_scan(a, a)
        except error as exc:
            assert reason in str(exc), exc
        else:
            raise AssertionError(f"MINGRU_SCAN={mode} accepted")

    refused("triton", RuntimeError, "no GPU backend in jax")  # on CPU, without the interpreter
    refused("Eager", ValueError, "'auto', 'eager', 'triton'")  # not a mode
    assert "triton" not in sys.modules and "jax_triton" not in sys.modules
    print("OK")
    """
)


def test_lazy_imports_and_modes_in_a_clean_process():
    env = {k: v for k, v in os.environ.items() if k not in ("TRITON_INTERPRET", "MINGRU_SCAN")}
    env["JAX_PLATFORMS"] = "cpu"
    res = subprocess.run(
        [sys.executable, "-c", _SUBPROCESS], env=env, capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 0, res.stderr[-3000:]
    assert res.stdout.strip().endswith("OK")


def test_exports_are_complete():
    assert set(mingru_jax.__all__) == set(mingru_jax._EXPORTS) | {"__version__"}
    for name in mingru_jax._EXPORTS:
        assert getattr(mingru_jax, name) is not None


def test_use_backend_overrides_env_and_rejects_bad_modes(monkeypatch):
    monkeypatch.setenv("MINGRU_SCAN", "triton")
    with mingru_jax.use_backend("eager"):
        assert mingru_jax.scan_mode() == "eager"
    assert mingru_jax.scan_mode() == "triton"
    with pytest.raises(ValueError, match="use_backend"):
        with mingru_jax.use_backend("cuda"):
            pass


def _fake_launcher(monkeypatch, reason=None, prefer=True):
    calls = []
    mod = types.ModuleType("fake_jax_launcher")
    mod.unsupported_reason = lambda a, b: reason
    mod.prefer_over_eager = lambda a, b: prefer

    def run(a, b):
        calls.append(a.shape)
        return a * 0 + 7.0, b * 0 + 7.0

    mod.run = run
    monkeypatch.setitem(LAUNCHERS, "linear_scan", lambda: mod)
    return calls


def test_triton_mode_routes_to_the_launcher_or_says_why(monkeypatch):
    pytest.importorskip("triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU calls may use the kernels here
    a = jnp.full((1, 3, 2), 0.5)
    monkeypatch.delitem(LAUNCHERS, "linear_scan", raising=False)  # as if none existed
    with mingru_jax.use_backend("triton"):
        with pytest.raises(RuntimeError, match="no Triton kernel is registered for linear_scan"):
            mingru_jax.linear_scan(a, a)
        calls = _fake_launcher(monkeypatch)
        P, Z = mingru_jax.linear_scan(a, a)
        assert calls == [(1, 3, 2)] and float(Z[0, 0, 0]) == 7.0
        _fake_launcher(monkeypatch, reason="k=3 is not a supported block size")
        with pytest.raises(RuntimeError, match="k=3 is not a supported block size"):
            mingru_jax.linear_scan(a, a)


def test_auto_on_gpu_falls_back_with_one_warning_per_reason(monkeypatch):
    monkeypatch.setattr(dispatch, "_platform", lambda args: "gpu")
    monkeypatch.setattr(dispatch, "available", lambda: True)
    monkeypatch.setattr(dispatch._warn_once, "seen", set())
    monkeypatch.delitem(LAUNCHERS, "linear_scan", raising=False)  # as if none existed
    a = jnp.full((1, 3, 2), 0.5)
    with mingru_jax.use_backend("auto"):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(3):
                _, Z = mingru_jax.linear_scan(a, a)
        fallbacks = [w for w in seen if issubclass(w.category, mingru_jax.MinGRUFallbackWarning)]
        assert len(fallbacks) == 1 and "no Triton kernel is registered" in str(fallbacks[0].message)
        assert abs(float(Z[0, -1, 0]) - 0.875) < 1e-6  # the eager result, never a wrong one
        # A launcher measured slower than eager on this shape: auto keeps eager, silently.
        calls = _fake_launcher(monkeypatch, prefer=False)
        _, Z = mingru_jax.linear_scan(a, a)
        assert calls == [] and abs(float(Z[0, -1, 0]) - 0.875) < 1e-6
        calls = _fake_launcher(monkeypatch, prefer=True)
        _, Z = mingru_jax.linear_scan(a, a)
        assert calls == [(1, 3, 2)]


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="needs triton mode to fail: a CPU-only jax without the interpreter")
def test_jitted_function_keeps_the_backend_it_was_traced_with(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    a = jnp.asarray(np.linspace(0.1, 0.9, 6, dtype=np.float32).reshape(1, 3, 2))
    f = jax.jit(lambda x: mingru_jax.linear_scan(x, x)[1])
    with mingru_jax.use_backend("eager"):
        want = f(a)
    with mingru_jax.use_backend("triton"):
        np.testing.assert_array_equal(f(a), want)  # cached trace: still eager
        with pytest.raises(RuntimeError, match="MINGRU_SCAN=triton"):
            jax.jit(lambda x: mingru_jax.linear_scan(x, x)[1])(a)  # a fresh trace


def test_jax_triton_import_leaves_triton_cache_dir_alone(tmp_path, monkeypatch):
    """jax-triton 0.3 blanks TRITON_CACHE_DIR on import, which breaks PyTorch's Triton kernels
    in the same process; the lazy import must restore it (a stand-in module reproduces that)."""
    (tmp_path / "jax_triton.py").write_text(
        "import os\nos.environ['TRITON_CACHE_DIR'] = ''\nMARK = 'stand-in'\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "jax_triton", raising=False)
    monkeypatch.delenv("TRITON_CACHE_DIR", raising=False)
    assert dispatch.import_jax_triton().MARK == "stand-in"
    assert "TRITON_CACHE_DIR" not in os.environ

    monkeypatch.delitem(sys.modules, "jax_triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    dispatch.import_jax_triton()
    assert os.environ["TRITON_CACHE_DIR"] == str(tmp_path / "cache")


def test_auto_runs_host_computations_eager_on_a_gpu_machine(monkeypatch):
    """On a GPU machine (jax's default backend ``gpu``, faked here), ``auto`` picks the kernels
    by where the call runs, not by the default backend: a traced call under
    ``jax.default_device(cpu)``, inside ``shard_map`` over a CPU mesh or under a CPU mesh set
    by ``jax.set_mesh``, a call on uncommitted arrays under ``jax.default_device(cpu)`` and one
    on arrays committed to the CPU, all run eager (jax-triton's kernel
    call cannot lower for the CPU); a traced call with none of these takes the kernel."""
    from jax.sharding import Mesh
    from jax.sharding import PartitionSpec as P

    try:
        cpu = jax.devices("cpu")
    except RuntimeError:
        pytest.skip("JAX_PLATFORMS leaves the CPU out")
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(dispatch, "available", lambda: True)
    calls = _fake_launcher(monkeypatch)
    a = jnp.full((1, 4, 2), 0.5)

    def z_last(x):
        return mingru_jax.linear_scan(x, x)[1][0, -1, 0]

    def kernel_ran(run) -> bool:
        calls.clear()
        with mingru_jax.use_backend("auto"):
            z = float(run())
        assert z == (7.0 if calls else 0.9375), z  # the launcher's, or the eager result
        return bool(calls)

    assert kernel_ran(lambda: jax.jit(z_last)(a))  # the default backend: the kernel
    with jax.default_device(cpu[0]):
        assert not kernel_ran(lambda: jax.jit(lambda x: z_last(x))(a))
        assert not kernel_ran(lambda: z_last(a))  # uncommitted: it follows the default device
    mesh = Mesh(cpu[:1], ("seq",))
    sharded = jax.shard_map(lambda x: mingru_jax.linear_scan(x, x)[1], mesh=mesh,
                            in_specs=P(), out_specs=P())
    assert not kernel_ran(lambda: jax.jit(sharded)(a)[0, -1, 0])
    with jax.set_mesh(mesh):
        assert not kernel_ran(lambda: jax.jit(lambda x: z_last(x))(a))
    assert not kernel_ran(lambda: z_last(jax.device_put(a, cpu[0])))  # concrete CPU arrays


def test_an_interpreter_that_cannot_run_the_kernels_says_which_versions(monkeypatch):
    """Triton < 3.7's interpreter with NumPy ≥ 2.4 fails inside every kernel with a loop: the
    seam names the versions and the way out instead (the PyTorch seam's twin)."""
    triton = pytest.importorskip("triton")
    monkeypatch.setattr(dispatch, "_has_gpu_backend", lambda: False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(triton, "__version__", "3.6.0")
    monkeypatch.setattr(np, "__version__", "2.4.1")
    reason = dispatch.available()
    assert "Triton 3.6.0" in reason and "install triton>=3.7 or numpy<2.4" in reason
    monkeypatch.setattr(np, "__version__", "2.3.5")
    assert dispatch.available() is True
