"""Repeat Triton launches straight to the compiled kernel (the private hook
``"triton_launch"``, ``mingru._compat``): the key tells apart every argument Triton specialises
on, a repeat launch passes the compiled kernel the arguments Triton's own path would (keyword
arguments and defaults in signature order), the hook is decided per launch and falls back to
Triton's path outside its Triton range, and on the GPU a cached launch computes what a fresh one
does. Every launch test runs with the hook on (where it can run) and off."""

from __future__ import annotations

import types

import pytest
import torch

from mingru import _compat as compat
from mingru._compat import CachedKernels, CachedLaunch, PublicLaunch, launch_key
from mingru_kernels import _compat as hooks
from tests.private_hooks import MODES, hook_mode, isolated

HOOK = "triton_launch"


@pytest.fixture(params=MODES)
def mode(request):
    """Each launch test with the hook on (skipped where it cannot run) and off."""
    with isolated(), hook_mode(HOOK, request.param):
        yield request.param


def test_the_key_tells_apart_what_triton_specialises_on():
    x = torch.randn(64)
    flags = (False, False, False, False, True)  # the last parameter is a constexpr

    def key(values, device=0, options=()):
        return launch_key(device, values, constexprs=flags, options=options)

    base = key((x, 16, None, True, 32))
    assert key((torch.randn(64), 16, None, True, 32)) == base
    different = [
        key((x, 16, None, True, 32), device=1),  # another device
        key((x.double(), 16, None, True, 32)),  # dtype
        key((x[1:], 16, None, True, 32)),  # 4 bytes off 16-byte alignment
        key((x, 17, None, True, 32)),  # an int's value
        key((x, 1, None, True, 32)),  # Triton's == 1 specialisation
        key((x, 16, x, True, 32)),  # None against a pointer
        key((x, 16, None, False, 32)),  # a flag
        key((x, 16, None, True, 64)),  # a constexpr
        key((x, 16, None, True, 0.5)),  # a float constexpr, by value
        key((x, 16, None, True, 32), options=(("num_warps", 8),)),  # a launch option
    ]
    assert all(k != base for k in different)
    assert len(set(different)) == len(different)
    # Runtime floats are never specialised: their value is not part of the key.
    assert key((x, 16, 0.5, True, 32)) == key((x, 16, 2.5, True, 32))
    assert key((x, 16, None, True, 0.5)) != key((x, 16, None, True, 2.5))


def test_the_hook_is_declared_for_the_triton_versions_it_was_written_for():
    assert compat.TRITON_LAUNCH.range_text() == ">=3.4,<3.10"
    assert hooks._in_range(compat.TRITON_LAUNCH, "3.9.0")
    assert not hooks._in_range(compat.TRITON_LAUNCH, "3.3.1")  # no triton.knobs yet


class _FakeKernel:
    """A ``triton.jit`` stand-in: ``kernel[grid](...)`` records the call and returns a compiled
    kernel whose ``run`` records what a cached launch passes it."""

    arg_names = ["x", "n", "alpha", "BLOCK", "MODE", "FLAG"]

    def __init__(self):
        self.params = [types.SimpleNamespace(name=n, default=d, has_default=d is not None,
                                             is_constexpr=n.isupper())
                       for n, d in zip(self.arg_names, [None] * 5 + [False], strict=True)]
        self.jit_calls, self.runs = [], []
        self.compiled = types.SimpleNamespace(
            run=lambda *a: self.runs.append(a), function="fn", packed_metadata="meta",
            launch_metadata=lambda grid, stream, *args: ("md", grid, stream))

    def __getitem__(self, grid):
        def call(*args, **kwargs):
            self.jit_calls.append((grid, args, kwargs))
            return self.compiled
        return call


def test_a_repeat_launch_goes_to_the_compiled_kernel_with_the_bound_arguments(mode):
    kernel = _FakeKernel()
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 77)
    x = torch.randn(8)
    launch[(3,)](x, 8, 0.5, MODE=2, BLOCK=16)  # keywords out of signature order
    assert len(kernel.jit_calls) == 1 and not kernel.runs
    launch[(5, 2)](x, 8, 1.5, MODE=2, BLOCK=16)  # same key: no binding, straight to run
    if mode == "off":  # Triton's own path for every launch
        assert len(kernel.jit_calls) == 2 and not kernel.runs and not launch._cache
        assert kernel.jit_calls[1] == ((5, 2), (x, 8, 1.5),
                                       {"MODE": 2, "BLOCK": 16, "enable_fp_fusion": True})
        return
    assert len(kernel.jit_calls) == 1 and len(kernel.runs) == 1
    grid_x, grid_y, grid_z, stream, function, metadata, launch_md, _, _, *args = kernel.runs[0]
    assert (grid_x, grid_y, grid_z, stream, function, metadata) == (5, 2, 1, 77, "fn", "meta")
    assert launch_md == ("md", (5, 2), 77)
    # Positional arguments, then BLOCK, MODE and FLAG's default, in signature order.
    assert args[0] is x and args[1:] == [8, 1.5, 16, 2, False]
    launch[(3,)](x, 9, 0.5, MODE=2, BLOCK=16)  # a new int value: Triton's path again
    launch[(3,)](x[1:], 8, 0.5, MODE=2, BLOCK=16)  # a misaligned pointer: Triton's path again
    assert len(kernel.jit_calls) == 3 and len(kernel.runs) == 1


def test_keyword_arguments_bind_in_signature_order(mode):
    kernel = _FakeKernel()
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 5)
    x, y = torch.randn(8), torch.randn(8)
    launch[(1,)](x=x, n=8, alpha=0.5, BLOCK=16, MODE=1)
    launch[(1,)](alpha=1.5, MODE=1, BLOCK=16, n=8, x=y)  # another order, another tensor
    launch[(1,)](x, alpha=2.5, n=8, BLOCK=16, MODE=1, num_warps=4)  # a launch option: new key
    launch[(1,)](x, alpha=2.5, n=8, BLOCK=16, MODE=1, num_warps=4)
    if mode == "off":
        assert len(kernel.jit_calls) == 4 and not kernel.runs
        return
    assert len(kernel.jit_calls) == 2 and len(kernel.runs) == 2
    for run, (tensor, alpha) in zip(kernel.runs, [(y, 1.5), (x, 2.5)], strict=True):
        args = run[9:]
        # The tensor of this launch (not the first one's), then n, alpha, BLOCK, MODE, FLAG.
        assert args[0] is tensor and list(args[1:]) == [8, alpha, 16, 1, False]
    launch[(1,)](x=x, n=8, alpha=0.5, BLOCK=16)  # MODE missing: Triton's path says so
    assert len(kernel.jit_calls) == 3


def test_every_launch_states_fp_fusion_unless_its_caller_does(mode):
    """Triton 3.9 warns when ``enable_fp_fusion`` is unset and 3.10 turns it off: the kernels'
    launches state it, on the hook's path and on Triton's own."""
    for make in (lambda k: CachedLaunch(k, device=lambda: 0, stream=lambda device: 0),
                 PublicLaunch):
        kernel = _FakeKernel()
        launch = make(kernel)
        x = torch.randn(8)
        launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
        launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0, enable_fp_fusion=False)
        assert [call[2]["enable_fp_fusion"] for call in kernel.jit_calls] == [True, False]


def test_the_hook_is_decided_per_launch():
    with isolated(), hook_mode(HOOK, "on"):
        kernel = _FakeKernel()
        launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 0)
        x = torch.randn(8)
        launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
        with hooks.hooks_disabled(HOOK):  # the same CachedLaunch: Triton's path inside
            launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
            assert len(kernel.jit_calls) == 2 and not kernel.runs
        with hooks.hooks_disabled():  # every hook
            launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
            assert len(kernel.jit_calls) == 3 and not kernel.runs
        launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)  # the cache again after the block
        assert len(kernel.jit_calls) == 3 and len(kernel.runs) == 1


def test_an_unhashable_argument_takes_tritons_path(mode):
    kernel = _FakeKernel()
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 0)
    for _ in range(2):
        launch[(1,)](torch.randn(8), [8, 9], 0.5, BLOCK=16, MODE=0)
    assert len(kernel.jit_calls) == 2 and not kernel.runs and not launch._cache


def test_an_unknown_compiled_kernel_turns_the_hook_off_with_one_warning(mode):
    kernel = _FakeKernel()
    kernel.compiled = types.SimpleNamespace(run=lambda *a: None)  # no launch metadata
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 0)
    x = torch.randn(8)
    hooks._warned.discard(HOOK)
    with pytest.warns(RuntimeWarning, match="triton_launch") if mode == "on" else \
            _no_warning():
        for _ in range(3):
            launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
    assert len(kernel.jit_calls) == 3 and not launch._cache
    if mode == "on":
        assert not hooks.hook_available(HOOK)  # for the rest of the process (here: the test)


class _no_warning:
    def __enter__(self):
        import warnings

        self._catch = warnings.catch_warnings(record=True)
        self.record = self._catch.__enter__()
        warnings.simplefilter("always")
        return self.record

    def __exit__(self, *exc):
        self._catch.__exit__(*exc)
        assert not [w for w in self.record if issubclass(w.category, RuntimeWarning)]


def test_only_jit_kernels_are_wrapped():
    module = types.SimpleNamespace(CONSTANT=3, kernel=_FakeKernel())
    wrapped = CachedKernels(module)
    assert wrapped.CONSTANT == 3
    assert wrapped.kernel is module.kernel  # not a triton.jit function (nor an interpreted one)


def _jit_function():
    from triton.runtime.jit import JITFunction

    def copy(x_ptr, n):
        pass

    return JITFunction(copy)


def test_jit_kernels_are_wrapped_where_the_hook_can_run(monkeypatch):
    module = types.SimpleNamespace(kernel=_jit_function())
    # (Triton's driver, which a real CachedLaunch asks for the stream, needs a GPU.)
    monkeypatch.setattr(compat, "CachedLaunch", lambda kernel: ("cached", kernel))
    with isolated(), hook_mode(HOOK, "on"):
        assert CachedKernels(module).kernel == ("cached", module.kernel)


def test_a_triton_outside_the_range_keeps_its_own_launch_path(monkeypatch):
    import triton

    module = types.SimpleNamespace(kernel=_jit_function())
    with isolated():  # a Triton older than the range: the kernel itself, one warning
        hooks._available.pop(HOOK, None)
        hooks._active.pop(HOOK, None)
        hooks._warned.discard(HOOK)
        hooks._switch[:] = [False]
        monkeypatch.setattr(triton, "__version__", "3.3.1")
        with pytest.warns(RuntimeWarning) as record:
            for _ in range(2):
                launch = CachedKernels(module).kernel
                assert isinstance(launch, PublicLaunch) and launch.kernel is module.kernel
        [warning] = [w for w in record if HOOK in str(w.message)]
        assert "triton 3.3.1" in str(warning.message) and ">=3.4,<3.10" in str(warning.message)


def test_the_switch_keeps_tritons_own_launch_path():
    module = types.SimpleNamespace(kernel=_jit_function())
    with isolated():  # MINGRU_PRIVATE_HOOKS=0: the kernel itself, silently
        hooks._available.pop(HOOK, None)
        hooks._active.pop(HOOK, None)
        hooks._switch[:] = [True]
        with _no_warning():
            launch = CachedKernels(module).kernel
            assert isinstance(launch, PublicLaunch) and launch.kernel is module.kernel


@pytest.mark.gpu
def test_cached_launches_compute_what_fresh_ones_do(mode):
    import triton
    import triton.language as tl

    @triton.jit
    def axpy(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr, SCALE: tl.constexpr = 2):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask)
        y = tl.load(y_ptr + offs, mask=mask)
        tl.store(out_ptr + offs, x * alpha + y * SCALE, mask=mask)

    launch = CachedLaunch(axpy)
    g = torch.Generator(device="cuda").manual_seed(0)
    for n, offset, alpha, scale in [(1000, 0, 0.5, 2), (1000, 0, -1.5, 2), (1000, 1, 0.5, 2),
                                    (63, 0, 2.0, 2), (1000, 0, 0.5, 3), (1000, 0, 3.0, 2)]:
        x = torch.randn(n + offset, device="cuda", generator=g)[offset:]
        y = torch.randn(n + offset, device="cuda", generator=g)[offset:]
        out = torch.full_like(x, float("nan"))
        kwargs = {} if scale == 2 else {"SCALE": scale}
        launch[(triton.cdiv(n, 128),)](x_ptr=x, y_ptr=y, out_ptr=out, n=n, alpha=alpha,
                                       BLOCK=128, **kwargs)
        torch.testing.assert_close(out, x * alpha + y * scale)
    # (1000, aligned), (1000, offset), 63, SCALE=3; nothing with the hook off
    assert len(launch._cache) == (4 if mode == "on" else 0)
