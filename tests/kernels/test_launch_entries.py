"""The launchers' two ways in agree: eager calls go through an ``autograd.Function`` (cheap on
the host) and ``torch.compile`` traces the ``torch.library`` custom op; both run the same
forward and backward implementations, so outputs and gradients must be identical, bit for bit.
On CPU the kernels run through Triton's interpreter (tests/conftest.py), with NaN-poisoned
outputs (tests/kernels/conftest.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import mingru  # noqa: F401  (registers the dispatch seam)
from mingru._launch import LAUNCHERS
from tests.kernels.cases import DEVICE


def _t(*shape, positive=False):
    x = torch.randn(*shape, dtype=torch.float64).float().to(DEVICE)
    return x.abs() + 0.1 if positive else x


def _cases():
    B, T = 2, 7
    k = F.normalize(_t(B, T, 2, 2, 16), dim=-1)
    return {
        "linear_scan": ((torch.tanh(_t(B, T, 5)), _t(B, T, 5)), "linear_scan_fwd"),
        "linear_recurrence": ((torch.tanh(_t(B, T, 5)), _t(B, T, 5), _t(B, 5), None),
                              "linear_recurrence_fwd"),
        "parallel_scan_log": ((-_t(B, T, 5, positive=True), _t(B, T + 1, 5)),
                              "parallel_scan_log_fwd"),
        "matrix_affine_scan": ((0.5 * _t(B, T, 3, 2, 2), _t(B, T, 3, 2, 1)),
                               "matrix_affine_scan_fwd"),
        "givens_recurrence": ((0.3 * _t(B, T, 2, 2, 2), _t(B, T, 2, 4), _t(B, 2, 4),
                               torch.tanh(_t(B, T, 2, 4)), -_t(B, T, 2, positive=True)),
                              "givens_recurrence_fwd"),
        "delta_rule": ((_t(B, T, 2, 16), k, _t(B, T, 2, 2, 16),
                        torch.sigmoid(_t(B, T, 2, 2)), -_t(B, T, 2, positive=True),
                        _t(B, 2, 16, 16), 0), "delta_rule_fwd"),
        "mingru_cell": ((_t(B, T, 3 * 5), _t(B, 5), -_t(B, T, 1, positive=True), True, True, None),
                        "mingru_cell_fwd"),
        "layer_norm": ((_t(B, T, 12), _t(12), _t(12), 1e-5, torch.float32), "layer_norm_fwd"),
        "delta_inputs": ((_t(B, T, 2 * 4 + 2 * 2 * (4 + 3 + 1)), 2, 2, 4, 3, 1e-6),
                         "delta_inputs_fwd"),
        # D = 8 in blocks of 4, 3 rounds: k = [12 angles | k_z | k_h]
        "givens_cell": ((_t(B, T, 8 * 3 // 2 + 2 * 8), _t(B, 8), -_t(B, T, 2, positive=True),
                         4, 3), "givens_cell_fwd"),
        # n = 3 rotation blocks: k = [3 angles | 3 scale pre-activations | k_z | k_h]
        "rotation_cell": ((_t(B, T, 6 * 3), _t(B, 6), -_t(B, T, 3, positive=True),
                           torch.tensor([2.0, 3.0, 6.0], device=DEVICE)), "rotation_cell_fwd"),
    }


# Tensor arguments that are constants of the op (no gradient): (op, position).
_CONSTANTS = {("rotation_cell", 3)}  # the snap table K_j


def _leaves(args, op=""):
    return tuple(a.clone().requires_grad_((op, i) not in _CONSTANTS)
                 if isinstance(a, torch.Tensor) else a for i, a in enumerate(args))


def _loss(out):
    outs = out if isinstance(out, tuple) else (out,)
    outs = outs[:2]  # delta_rule: (o, h_T, scratch...) — scratch is not differentiable
    # (delta_inputs: q and k, so the unused v, beta gradients take the kernel's zero branch)
    # (layer_norm's second output, the rows' statistics, is not differentiable either)
    return sum((o.double() * torch.linspace(-1, 1, o.numel(), dtype=torch.float64,
                                            device=o.device).view(o.shape)).sum() for o in outs)


# Inference-only ops (no backward, no autograd.Function): their test compares the two ways in.
_INFERENCE_ONLY = {"delta_rule_step", "linear"}  # tests/kernels/test_{delta_rule_step,linear}.py


@pytest.mark.interpreter
@pytest.mark.parametrize("op", [op for op in LAUNCHERS if op not in _INFERENCE_ONLY])
def test_eager_function_matches_custom_op(op):
    args, op_name = _cases()[op]
    launcher = LAUNCHERS[op]()
    eager_entry = launcher._entry  # what run() calls outside torch.compile
    custom_op = getattr(torch.ops.mingru, op_name)
    results = []
    for fn in (eager_entry, custom_op):
        xs = _leaves(args, op)
        out = fn(*xs)
        _loss(out).backward()
        outs = out if isinstance(out, tuple) else (out,)
        grads = [x.grad for x in xs if isinstance(x, torch.Tensor) and x.requires_grad]
        assert all(g is not None for g in grads), op
        results.append((outs, grads))
    (o1, g1), (o2, g2) = results
    for x, y in zip((*o1, *g1), (*o2, *g2), strict=True):
        assert torch.equal(x, y), op
    assert not torch.isnan(torch.cat([g.flatten() for g in g1])).any()
