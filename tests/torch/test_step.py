"""The fused step: the ``step`` of ``MinGRU``, ``SignedMinGRU``, ``GivensMinGRU`` and
``RotationMinGRU`` runs the forward's fused cell at T = 1 (one kernel on a GPU for the gates and
the update), ``DeltaMinGRU``'s its step kernel (``delta_rule_step``: inputs, state update and
output in one kernel). On the kernel route they must give the eager step's states (and, for
``DeltaMinGRU``, whose output is not its state, its outputs): in fp32 under Triton's interpreter
on CPU (on the GPU with one), and on the GPU (``-m gpu``) at a wide state in fp32, and in bf16
and fp16 at least as close to a float64 step as the eager step in that dtype is."""

from __future__ import annotations

import copy

import pytest
import torch

import mingru
from mingru import DeltaMinGRU, GivensMinGRU, MinGRU, RotationMinGRU, SignedMinGRU
from tests.helpers import rel_err
from tests.kernels.cases import DEVICE

CASES = {
    "log": (MinGRU, {}),
    "log_h0": (MinGRU, dict(learnable_h0=True)),
    "signed": (SignedMinGRU, {}),
    "signed_coupled_h0": (SignedMinGRU, dict(coupled=True, learnable_h0=True)),
    "givens": (GivensMinGRU, dict(block_size=4, rounds=3)),
    "rotation": (RotationMinGRU, {}),
    "rotation_nosnap": (RotationMinGRU, dict(snap=None)),
    "delta": (DeltaMinGRU, dict(n_heads=2, nh=2, d_k=24, d_v=40)),
}
DECAYS = {"none": {}, "learnable": dict(decay="learnable", decay_rate=0.3, log1p_delta=True),
          "fixed": dict(decay="fixed", decay_rate=0.7)}


def _steps(module, x, delta_t, *, mode: str) -> torch.Tensor:
    """The states of ``x (B, T, D)`` stepped token by token under backend ``mode`` (a step that
    returns ``(y_t, h_t)``: both, side by side)."""
    h, states = None, []
    with torch.inference_mode(), mingru.use_backend(mode):
        for t in range(x.shape[1]):
            out = module.step(x[:, t], h, None if delta_t is None else delta_t[:, t])
            h = out[1] if isinstance(out, tuple) else out
            states.append(torch.cat(out, -1) if isinstance(out, tuple) else out)
    return torch.stack(states, 1)


def _case(case: str, decay: str, *, hidden: int, device: str, dtype: torch.dtype,
          batch: int, steps: int):
    cls, kwargs = CASES[case]
    torch.manual_seed(3)
    if cls is not MinGRU and cls is not SignedMinGRU:
        hidden += -hidden % 4  # whole blocks (of 2, or of 4)
    module = cls(7, hidden, **kwargs, **DECAYS[decay])
    with torch.no_grad():
        if getattr(module, "h0", None) is not None:
            module.h0.normal_()
    module = module.to(device, dtype)
    x = torch.randn(batch, steps, 7, device=device, dtype=dtype)
    delta_t = (torch.rand(batch, steps, device=device, dtype=dtype) * 3
               if decay != "none" else None)
    return module, x, delta_t


@pytest.mark.parametrize("decay", list(DECAYS))
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_step_equals_the_eager_step(case, decay):
    module, x, delta_t = _case(case, decay, hidden=5, device=DEVICE, dtype=torch.float32,
                               batch=3, steps=4)
    fused = _steps(module, x, delta_t, mode="triton")
    eager = _steps(module, x, delta_t, mode="eager")
    torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16],
                         ids=["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("decay", ["none", "learnable"])
@pytest.mark.parametrize("case", list(CASES))
def test_kernel_step_equals_the_eager_step_on_the_gpu(case, decay, dtype):
    module, x, delta_t = _case(case, decay, hidden=500, device="cuda", dtype=dtype,
                               batch=5, steps=9)
    fused = _steps(module, x, delta_t, mode="triton")
    eager = _steps(module, x, delta_t, mode="eager")
    if dtype == torch.float32:
        torch.testing.assert_close(fused, eager, rtol=1e-5, atol=1e-5)
        return
    # In half precision the eager step rounds every intermediate (a rotation's angle, its
    # cosine and sine) to the dtype, the kernel computes in float32: the two may differ by
    # the eager step's rounding. Both are held to a float64 step of the same (rounded)
    # weights and inputs, and the kernel must be at least about as close as the eager step.
    exact = _steps(copy.deepcopy(module).double(), x.double(), None if delta_t is None
                   else delta_t.double(), mode="eager")
    fused_error, eager_error = rel_err(fused, exact), rel_err(eager, exact)
    assert fused_error <= max(1.25 * eager_error, 4 * torch.finfo(dtype).eps), (
        f"fused step {fused_error:.3g} from float64, eager step {eager_error:.3g}")
