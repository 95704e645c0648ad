"""Repeat Triton launches straight to the compiled kernel (``mingru._launch._cached_launch``):
the key tells apart every argument Triton specialises on, a repeat launch passes the compiled
kernel the arguments Triton's own path would (keyword arguments and defaults in signature
order), and on the GPU a cached launch computes what a fresh one does."""

from __future__ import annotations

import types

import pytest
import torch

from mingru._launch._cached_launch import CachedKernels, CachedLaunch, launch_key


def test_the_key_tells_apart_what_triton_specialises_on():
    x = torch.randn(64)
    base = launch_key(0, (x, 16, None, True), {"BLOCK": 32})
    assert launch_key(0, (torch.randn(64), 16, None, True), {"BLOCK": 32}) == base
    different = [
        launch_key(1, (x, 16, None, True), {"BLOCK": 32}),  # another device
        launch_key(0, (x.double(), 16, None, True), {"BLOCK": 32}),  # dtype
        launch_key(0, (x[1:], 16, None, True), {"BLOCK": 32}),  # 4 bytes off 16-byte alignment
        launch_key(0, (x, 17, None, True), {"BLOCK": 32}),  # an int's value
        launch_key(0, (x, 1, None, True), {"BLOCK": 32}),  # Triton's == 1 specialisation
        launch_key(0, (x, 16, x, True), {"BLOCK": 32}),  # None against a pointer
        launch_key(0, (x, 16, None, False), {"BLOCK": 32}),  # a flag
        launch_key(0, (x, 16, None, True), {"BLOCK": 64}),  # a constexpr
        launch_key(0, (x, 16, None, True), {"BLOCK": 32, "num_warps": 8}),  # a launch option
    ]
    assert all(key != base for key in different)
    assert len(set(different)) == len(different)
    # Floats are never specialised: their value is not part of the key.
    assert launch_key(0, (x, 0.5), {}) == launch_key(0, (x, 2.5), {})


class _FakeKernel:
    """A ``triton.jit`` stand-in: ``kernel[grid](...)`` records the call and returns a compiled
    kernel whose ``run`` records what a cached launch passes it."""

    arg_names = ["x", "n", "alpha", "BLOCK", "MODE", "FLAG"]

    def __init__(self):
        self.params = [types.SimpleNamespace(name=n, default=d, has_default=d is not None)
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


def test_a_repeat_launch_goes_to_the_compiled_kernel_with_the_bound_arguments():
    kernel = _FakeKernel()
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 77)
    x = torch.randn(8)
    launch[(3,)](x, 8, 0.5, MODE=2, BLOCK=16)  # keywords out of signature order
    assert len(kernel.jit_calls) == 1 and not kernel.runs
    launch[(5, 2)](x, 8, 1.5, MODE=2, BLOCK=16)  # same key: no binding, straight to run
    assert len(kernel.jit_calls) == 1 and len(kernel.runs) == 1
    grid_x, grid_y, grid_z, stream, function, metadata, launch_md, _, _, *args = kernel.runs[0]
    assert (grid_x, grid_y, grid_z, stream, function, metadata) == (5, 2, 1, 77, "fn", "meta")
    assert launch_md == ("md", (5, 2), 77)
    # Positional arguments, then BLOCK, MODE and FLAG's default, in signature order.
    assert args[0] is x and args[1:] == [8, 1.5, 16, 2, False]
    launch[(3,)](x, 9, 0.5, MODE=2, BLOCK=16)  # a new int value: Triton's path again
    launch[(3,)](x[1:], 8, 0.5, MODE=2, BLOCK=16)  # a misaligned pointer: Triton's path again
    assert len(kernel.jit_calls) == 3 and len(kernel.runs) == 1


def test_an_unhashable_argument_takes_tritons_path():
    kernel = _FakeKernel()
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 0)
    for _ in range(2):
        launch[(1,)](torch.randn(8), [8, 9], 0.5, BLOCK=16, MODE=0)
    assert len(kernel.jit_calls) == 2 and not kernel.runs and not launch._cache


def test_an_unknown_compiled_kernel_is_never_cached():
    kernel = _FakeKernel()
    kernel.compiled = types.SimpleNamespace(run=lambda *a: None)  # no launch metadata
    launch = CachedLaunch(kernel, device=lambda: 0, stream=lambda device: 0)
    x = torch.randn(8)
    for _ in range(3):
        launch[(1,)](x, 8, 0.5, BLOCK=16, MODE=0)
    assert len(kernel.jit_calls) == 3


def test_only_jit_kernels_are_wrapped():
    module = types.SimpleNamespace(CONSTANT=3, kernel=_FakeKernel())
    wrapped = CachedKernels(module)
    assert wrapped.CONSTANT == 3
    assert wrapped.kernel is module.kernel  # not a triton.jit function (nor an interpreted one)


@pytest.mark.gpu
def test_cached_launches_compute_what_fresh_ones_do():
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
        launch[(triton.cdiv(n, 128),)](x, y, out, n, alpha, BLOCK=128, **kwargs)
        torch.testing.assert_close(out, x * alpha + y * scale)
    assert len(launch._cache) == 4  # (1000, aligned), (1000, offset), 63, SCALE=3
