"""Bad inputs a new user tried, each caught at its single validation place with an error that
names the argument: a NaN ``h_0`` for MinGRU, an input of another dtype than the module (one
rule in both frontends: ``x`` must have the parameters' dtype unless ``torch.autocast`` sets
the compute dtype), and swapped weight-conversion arguments."""

from __future__ import annotations

import pytest
import torch

import mingru

MIXERS = ["MinGRU", "SignedMinGRU", "RotationMinGRU", "GivensMinGRU", "DeltaMinGRU"]


@pytest.mark.parametrize("bad", [float("nan"), -0.25])
def test_mingru_rejects_nan_and_negative_states(bad):
    m = mingru.MinGRU(4, 6)
    h0 = torch.full((2, 1, 6), 0.5)
    h0[1, 0, 3] = bad
    with pytest.raises(ValueError, match="h_0 must be a non-negative MinGRU state"):
        m(torch.randn(2, 3, 4), h_0=h0)
    # step() checks shapes, never values: it must not wait for the device
    assert m.step(torch.randn(2, 4), h0[:, 0]).shape == (2, 6)


@pytest.mark.parametrize("name", MIXERS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_input_of_another_dtype_is_a_type_error_naming_x(name, dtype):
    m = getattr(mingru, name)(4, 8)
    with pytest.raises(TypeError, match=r"x has dtype .*float32"):
        m(torch.randn(2, 3, 4, dtype=dtype))
    with pytest.raises(TypeError, match=r"x_t has dtype .*float32"):
        m.step(torch.randn(2, 4, dtype=dtype))


def test_block_and_stack_apply_the_same_rule():
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        mingru.MinGRUBlock(8)(torch.randn(2, 3, 8, dtype=torch.float64))
    with pytest.raises(TypeError, match="x has dtype torch.float64"):
        mingru.MinGRUStack(4, 8, n_layers=1)(torch.randn(2, 3, 4, dtype=torch.float64))


def test_the_dtype_rule_reads_the_first_parameter_that_parameters_yields():
    """The rule's reference (``first_parameter``, the fast twin of ``next(m.parameters())``)
    is the very parameter ``parameters()`` yields first, for every mixer, the block, the
    stack, a module without parameters and a parametrised one."""
    from torch.nn.utils import parametrize

    from mingru.mixers._common import first_parameter

    modules = [getattr(mingru, name)(4, 8) for name in MIXERS]
    modules += [mingru.MinGRU(4, 6, learnable_h0=True, decay="learnable"),
                mingru.MinGRUBlock(8), mingru.MinGRUStack(4, 8, n_layers=2, mixer="delta"),
                torch.nn.Sequential(torch.nn.ReLU())]
    wrapped = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Linear(3, 3))
    parametrize.register_parametrization(wrapped[0], "weight", torch.nn.Identity())
    modules.append(wrapped)
    for m in modules:
        assert first_parameter(m) is next(m.parameters(), None), type(m).__name__


def test_autocast_sets_the_compute_dtype():
    m = mingru.MinGRUStack(4, 8, n_layers=1, mixer="signed")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = m(torch.randn(2, 3, 4).bfloat16())
    assert out.shape == (2, 3, 8)
    m64 = mingru.MinGRU(4, 6).double()  # a module cast to the input's dtype is fine
    assert m64(torch.randn(2, 3, 4, dtype=torch.float64)).dtype == torch.float64


def test_swapped_conversion_arguments_are_a_type_error():
    nnx = pytest.importorskip("flax.nnx")
    import mingru_jax

    pt = mingru.MinGRU(4, 6)
    fx = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match=r"torch_to_nnx: torch_module must be a torch\.nn\.Module.*swapped"):
        mingru_jax.torch_to_nnx(fx, pt)
    with pytest.raises(TypeError, match=r"nnx_to_torch: nnx_module must be a flax\.nnx\.Module.*swapped"):
        mingru_jax.nnx_to_torch(pt, fx)
    with pytest.raises(TypeError, match="nnx_module must be a flax.nnx.Module; got dict"):
        mingru_jax.torch_to_nnx(pt, {})
