"""mingru_kernels._spec and mingru_kernels._seam: the framework-free checks, registry and
dispatch rules shared by both frontends."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from mingru_kernels import _spec


def test_import_is_framework_free():
    code = (
        "import sys, mingru_kernels._spec, mingru_kernels._seam, mingru_kernels.launch.switches\n"
        "bad = [m for m in ('torch', 'jax', 'flax', 'triton') if m in sys.modules]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert out.stdout.strip() == "", f"mingru_kernels._spec imported {out.stdout.strip()}"


def test_both_frontends_share_the_registry():
    from mingru import block as torch_block

    names = list(_spec.MIXER_CLASSES)
    assert list(torch_block.MIXERS) == names
    assert all(mod == f"mingru.mixers.{n}" for n, (mod, _) in torch_block.MIXERS.items())
    assert _spec.mixer_registry("mingru_jax")["givens"] == ("mingru_jax.mixers.givens",
                                                            "GivensMinGRU")
    assert _spec.TAKES_LEARNABLE_H0 < set(names)


@pytest.mark.parametrize("bad", ["lstm", 3, None])
def test_check_mixer_name(bad):
    with pytest.raises(ValueError, match=r"mixer\[1\] must be one of 'log'"):
        _spec.check_mixer_name(bad, "mixer[1]")
    assert _spec.check_mixer_name("delta") == "delta"


@pytest.mark.parametrize("bad", [0, -2, True, 2.0, "3"])
def test_sizes_reject_non_positive_ints(bad):
    with pytest.raises(ValueError, match="n must be a positive int"):
        _spec.check_size(bad, "n")
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        _spec.positive_int(bad, "n")


def test_givens_and_rotation_checks():
    assert _spec.check_givens(12, 4, 1) == 3
    for block_size in (3, 0, 8, True):  # odd, too small, does not divide 12, a bool
        with pytest.raises(ValueError, match="block_size must be an even int"):
            _spec.check_givens(12, block_size, 2)
    with pytest.raises(ValueError, match="rounds must be an int ≥ 1"):
        _spec.check_givens(12, 4, 0)
    assert _spec.check_rotation_hidden(6) == 3
    with pytest.raises(ValueError, match="hidden_size must be even"):
        _spec.check_rotation_hidden(7)


def test_snap():
    assert _spec.check_snap(None) is None
    assert _spec.check_snap([2, 5]) == (2, 5)
    assert _spec.snap_per_block((2, 3, 4), 5) == [2, 3, 4, 2, 3]
    for bad in ((), "23", (2, 0), (2, True), 3):
        with pytest.raises(ValueError, match="snap must be None or a non-empty"):
            _spec.check_snap(bad)


def test_delta_sizes():
    s = _spec.check_delta(5, 12, 3, 2, None, None, 7)
    assert (s.d_k, s.d_v, s.state_size) == (4, 4, 3 * 4 * 4)
    s = _spec.check_delta(5, 12, 5, 1, 2, 3, 1)
    assert (s.n_heads, s.d_k, s.d_v, s.state_size) == (5, 2, 3, 30)
    with pytest.raises(ValueError, match=r"n_heads \(5\) must divide hidden_size \(12\)"):
        _spec.check_delta(5, 12, 5, 1, None, None, 1)
    with pytest.raises(ValueError, match="chunk_size must be an int >= 1"):
        _spec.check_delta(5, 12, 3, 1, None, None, 0)


def test_decay_checks():
    assert _spec.check_decay("fixed", 2) == 2.0
    with pytest.raises(ValueError, match="decay must be None, 'fixed' or 'learnable'"):
        _spec.check_decay("exp", 1.0)
    for bad in (0.0, -1.0, math.inf, math.nan, "1"):
        with pytest.raises(ValueError, match="decay_rate must be a finite number > 0"):
            _spec.check_decay(None, bad)
    with pytest.raises(ValueError, match="decay_rate"):
        _spec.check_decay(None, True)
    for y in (1e-3, 0.7, 5.0):
        rho = _spec.inverse_softplus(y)
        assert math.isclose(math.log1p(math.exp(rho)), y, rel_tol=1e-12)


def test_stack_layer_specs():
    kw = {"decay": "fixed", "decay_rate": 0.5, "log1p_delta": True, "coupled": True}
    specs = _spec.stack_layer_specs("signed", kw, 3, "last")
    assert [name for name, _ in specs] == ["signed"] * 3
    assert specs[0][1] == specs[1][1] == {"coupled": True}
    assert specs[2][1] == kw
    specs[2][1]["coupled"] = False  # each layer gets its own dict
    assert kw["coupled"] is True
    specs = _spec.stack_layer_specs(["log", "givens"], {"givens": {"block_size": 4}}, 2, "all")
    assert specs == [("log", {}), ("givens", {"block_size": 4})]
    with pytest.raises(ValueError, match="decay_layers must be 'all' or 'last'"):
        _spec.stack_layer_specs("log", None, 2, "first")
    with pytest.raises(ValueError, match="keyed by mixer name"):
        _spec.stack_layer_specs(["log", "log"], {"givens": {}}, 2, "all")
    with pytest.raises(ValueError, match="list of n_layers=3 names"):
        _spec.stack_layer_specs(["log", "log"], None, 3, "all")


def test_block_mixer_kwargs_and_stack_helpers():
    name, kw = _spec.block_mixer_kwargs("log", {"decay": "fixed"}, True,
                                        reserved=("hidden_size",), own_args="x")
    assert (name, kw) == ("log", {"decay": "fixed", "learnable_h0": True})
    _, kw = _spec.block_mixer_kwargs("givens", None, True, reserved=(), own_args="x")
    assert kw == {}
    with pytest.raises(ValueError, match=r"must not contain \['hidden_size'\].*takes own"):
        _spec.block_mixer_kwargs("log", {"hidden_size": 3}, False,
                                 reserved=("hidden_size",), own_args="own")
    with pytest.raises(ValueError, match="mlp_expansion must be an int ≥ 0"):
        _spec.check_block_args(-1, 0.0)
    with pytest.raises(ValueError, match=r"dropout must be a number in \[0, 1\)"):
        _spec.check_block_args(2, 1.0)
    assert _spec.check_mixer_expansion(6, "log") == 6
    assert _spec.check_mixer_expansion(1, ["log", "delta"]) == 1
    for bad in (0, True, 2.0, "2"):
        with pytest.raises(ValueError, match="mixer_expansion must be an int ≥ 1"):
            _spec.check_mixer_expansion(bad, "log")
    with pytest.raises(ValueError, match="mixer_expansion=2 does not apply to the 'delta'"):
        _spec.check_mixer_expansion(2, ["signed", "delta"])
    assert _spec.check_stack_state(None, 2) == [None, None]
    with pytest.raises(ValueError, match="n_layers=2 per-layer states"):
        _spec.check_stack_state([None], 2)
    assert _spec.layer_gaps("dt", [False, True]) == [None, "dt"]
    with pytest.raises(ValueError, match="no layer has decay"):
        _spec.layer_gaps("dt", [False, False])


def test_both_dispatch_seams_share_one_rule_set():
    """The mode names, the decision, the registry and the override exist once, in
    mingru_kernels._seam; each frontend registers its launchers and holds its override."""
    import contextvars

    import mingru.dispatch as torch_dispatch
    import mingru_jax.dispatch as jax_dispatch
    from mingru import _launch as torch_launch
    from mingru_jax import _launch as jax_launch
    from mingru_kernels import _seam

    assert torch_dispatch.MODES is jax_dispatch.MODES is _seam.MODES
    assert torch_dispatch.pick_launcher is jax_dispatch.pick_launcher is _seam.pick_launcher
    assert torch_dispatch.wants_kernel is jax_dispatch.wants_kernel is _seam.wants_kernel
    for dispatch, launch in ((torch_dispatch, torch_launch), (jax_dispatch, jax_launch)):
        assert isinstance(dispatch._override, contextvars.ContextVar)
        assert isinstance(launch.REGISTRY, _seam.Registry)
        assert launch.REGISTRY.launchers is launch.LAUNCHERS
        assert all(callable(load) for load in launch.LAUNCHERS.values())
    assert set(jax_launch.LAUNCHERS) <= set(torch_launch.LAUNCHERS)


class _Fast:
    @staticmethod
    def unsupported_reason(*args):
        return None

    @staticmethod
    def prefer_over_eager(*args):
        return args[0] > 1


class _Refuses:
    @staticmethod
    def unsupported_reason(*args):
        return "k=3 is not a supported block size"


def test_wants_kernel_rules(monkeypatch):
    from mingru_kernels import _seam

    def wants(mode, on_acc):
        return _seam.wants_kernel("op", mode=mode, on_accelerator=on_acc, where="cpu",
                                  off_accelerator="inputs are on {where}")

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert not wants("eager", True) and not wants("auto", False)
    assert wants("auto", True) and wants("triton", True)
    with pytest.raises(RuntimeError, match="MINGRU_SCAN=triton: cannot run op on Triton: inputs are on cpu"):
        wants("triton", False)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert wants("triton", False)


def test_pick_launcher_asks_the_registry():
    from mingru_kernels import _seam

    warned: list[str] = []
    loads: list[str] = []

    def loader(module):
        def load():
            loads.append(module.__name__)
            return module
        return load

    registry = _seam.Registry("pkg", {"fast": loader(_Fast), "refuses": loader(_Refuses)})

    def pick(op, mode, first=2, status=True):
        return _seam.pick_launcher(op, (first,), {}, mode=mode, status=status, registry=registry,
                                   warn=warned.append)

    assert pick("fast", "auto") is _Fast and loads == ["_Fast"]
    assert pick("fast", "auto", first=1) is None and not warned  # eager is faster: silently
    assert pick("fast", "triton", first=1) is _Fast  # triton mode never asks prefer_over_eager
    assert pick("missing", "auto") is None
    assert pick("refuses", "auto") is None
    assert pick("fast", "auto", status="CUDA not available") is None
    assert warned == ["no Triton kernel is registered for missing in pkg",
                      "refuses: k=3 is not a supported block size", "CUDA not available"]
    with pytest.raises(RuntimeError, match="cannot run refuses on Triton: refuses: k=3"):
        pick("refuses", "triton")
    with pytest.raises(RuntimeError, match="cannot run fast on Triton: triton not importable"):
        pick("fast", "triton", status="triton not importable: test")


def test_override_mode_is_a_context_variable():
    """use_backend's body: the checked mode inside the block, the previous value after it, and
    a new thread starts from no override."""
    import contextvars
    import threading

    from mingru_kernels import _seam

    override = contextvars.ContextVar("test_override", default=None)
    with _seam.override_mode(override, "eager"):
        assert _seam.mode_in_force(override.get()) == "eager"
        seen = []
        thread = threading.Thread(target=lambda: seen.append(override.get()))
        thread.start()
        thread.join()
        assert seen == [None]
        with _seam.override_mode(override, "triton"):
            assert override.get() == "triton"
        assert override.get() == "eager"
    assert override.get() is None
    with pytest.raises(ValueError, match="use_backend"), _seam.override_mode(override, "fast"):
        pass
