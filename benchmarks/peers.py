"""The peers: other libraries' kernels on the same recurrence, a few lines each.

* ``fla`` — ``chunk_hgrn`` (``h_t = exp(g_t) h_{t−1} + x_t``) for the diagonal recurrence and
  MinGRU's cell; ``chunk_delta_rule`` / ``chunk_gated_delta_product`` for the delta rule;
* ``accelerated-scan`` — ``accelerated_scan.scalar.scan`` in its ``(B, D, T)`` layout, for the
  diagonal recurrence and the signed cell;
* ``minGRU-pytorch`` — its log-space (Heinsen) scan for ``parallel_scan_log`` and the MinGRU
  cell, and its ``minGRU`` module for the MinGRU mixer.

Op inputs are put in the peer's layout outside the timing (the op's own work is timed); a cell
peer forms the gates in PyTorch from the same projection ``k`` and runs the peer's scan, and a
mixer peer runs that cell on the library mixer's own projection (same weights, one GEMM).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from mingru_benchmarks.registry import Skip

__all__ = ["check", "delta_peer", "mixer_peer", "op_peer"]

MODULES = {"fla": "fla.ops", "accelerated-scan": "accelerated_scan.scalar",
           "minGRU-pytorch": "minGRU_pytorch.minGRU"}
NEEDS_CUDA = ("fla", "accelerated-scan")  # Triton kernels with no interpreter path
Tensors = list[torch.Tensor]


def check(peer: str, device: str) -> Any:
    """The peer's module, or :class:`Skip` saying why it cannot run here."""
    if peer in NEEDS_CUDA and device != "cuda":
        raise Skip("needs CUDA")
    try:
        return importlib.import_module(MODULES[peer])
    except Exception as exc:
        raise Skip(f"{MODULES[peer]} not importable: {type(exc).__name__}: {exc}") from None


def _hgrn(x: torch.Tensor, log_a: torch.Tensor) -> torch.Tensor:
    from fla.ops.hgrn import chunk_hgrn

    return chunk_hgrn(x.contiguous(), log_a.contiguous())[0]


def _accel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # (B, T, D) in and out
    from accelerated_scan.scalar import scan

    return scan(a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous()).transpose(1, 2)


def _heinsen(log_a: torch.Tensor, log_b: torch.Tensor) -> torch.Tensor:
    from minGRU_pytorch.minGRU import heinsen_associative_scan_log

    return heinsen_associative_scan_log(log_a, log_b)


def _g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, x + 0.5, torch.sigmoid(x))


def _log_g(x: torch.Tensor) -> torch.Tensor:
    return torch.where(x >= 0, (F.relu(x) + 0.5).log(), -F.softplus(-x))


CELLS: dict[tuple[str, str], Callable[[torch.Tensor], torch.Tensor]] = {
    ("fla", "mingru_cell"): lambda k: (lambda kz, kh: _hgrn(torch.sigmoid(kz) * _g(kh),
                                                            -F.softplus(kz)))(*k.chunk(2, -1)),
    ("minGRU-pytorch", "mingru_cell"): lambda k: (lambda kz, kh: _heinsen(
        -F.softplus(kz), -F.softplus(-kz) + _log_g(kh)))(*k.chunk(2, -1)),
    ("accelerated-scan", "signed_mingru_cell"): lambda k: (lambda kz, ks, kh: _accel(
        torch.tanh(ks), torch.sigmoid(kz) * kh))(*k.chunk(3, -1)),
}


def op_peer(peer: str, op: str, xs: Tensors, device: str) -> tuple[Callable[..., Any], Tensors]:
    """``(fn, inputs)``: ``peer`` computing ``op`` on the library's inputs ``xs``."""
    check(peer, device)
    if (peer, op) in CELLS:
        return CELLS[peer, op], xs
    if op == "linear_recurrence" and peer == "accelerated-scan":
        from accelerated_scan.scalar import scan

        return scan, [x.transpose(1, 2).contiguous() for x in xs]
    if op == "linear_recurrence" and peer == "fla":
        a, b = xs
        return _hgrn, [b.contiguous(), a.log().contiguous()]
    if op == "parallel_scan_log" and peer == "minGRU-pytorch":  # h_0 folded in as step 0
        log_a, log_b = xs
        return (lambda la, lb: _heinsen(la, lb)[:, 1:]), [F.pad(log_a, (0, 0, 1, 0)), log_b]
    raise Skip(f"{peer} has no {op}")


def _project(x: torch.Tensor, *layers: torch.nn.Linear) -> torch.Tensor:
    bias = None if layers[0].bias is None else torch.cat([lay.bias for lay in layers])
    return F.linear(x, torch.cat([lay.weight for lay in layers]), bias)


def mixer_peer(peer: str, name: str, mixer: torch.nn.Module, device: str) -> torch.nn.Module | Callable:
    """``peer``'s version of the mixer ``name`` (input = hidden), given the library's ``mixer``."""
    module = check(peer, device)
    if (peer, name) == ("minGRU-pytorch", "MinGRU"):
        torch.manual_seed(0)
        return module.minGRU(mixer.hidden_size).to(device)
    if (peer, name) == ("fla", "MinGRU"):
        return lambda x: CELLS[peer, "mingru_cell"](_project(x, mixer.linear_z, mixer.linear_h))
    if (peer, name) == ("accelerated-scan", "SignedMinGRU"):
        return lambda x: CELLS[peer, "signed_mingru_cell"](
            _project(x, mixer.linear_z, mixer.linear_s, mixer.linear_h))
    raise Skip(f"{peer} has no {name}")


def delta_peer(xs: Tensors, nh: int, decay: bool, device: str) -> tuple[Callable[..., Any], Tensors]:
    """fla on the delta rule's inputs ``q, k, v, β[, log γ]`` (scale 1): ``chunk_delta_rule``
    for one micro-step without decay, else its DeltaProduct (``num_householder = nh``, the
    micro-steps of a token consecutive in time, ``log γ`` as its gate)."""
    check("fla", device)
    q, k, v, beta, *lg = xs
    B, T, _, H, _ = k.shape
    if nh == 1 and not decay:
        from fla.ops.delta_rule import chunk_delta_rule

        return (lambda *a: chunk_delta_rule(*a, scale=1.0)[0]), [
            x.contiguous() for x in (q, k[:, :, 0], v[:, :, 0], beta[:, :, 0])]
    from fla.ops.gated_delta_product import chunk_gated_delta_product

    g = lg[0] if lg else q.new_zeros(B, T, H)
    flat = (q, k.reshape(B, T * nh, H, -1), v.reshape(B, T * nh, H, -1), g.float(),
            beta.reshape(B, T * nh, H))
    return (lambda q_, k_, v_, g_, b_: chunk_gated_delta_product(
        q_, k_, v_, g_, b_, num_householder=nh, scale=1.0)[0]), [x.contiguous() for x in flat]
