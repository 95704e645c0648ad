"""Eager log-space scan (Heinsen 2023) for ``h_t = a_t h_{t-1} + b_t`` with ``a, b > 0``.

Inputs are ``log a`` ``(B, T, D)`` and ``log_values`` ``(B, T+1, D)`` (slot 0 = ``log h_0``).

Forward: the odd–even scan over ``(log a, log b)`` pairs with the combine
``(A₁, L₁) ∘ (A₂, L₂) = (A₁ + A₂, logaddexp(A₂ + L₁, L₂))``. Heinsen's closed form
``log Z_t = A_t + logcumsumexp(log b − A)_t`` adds and subtracts the whole-sequence sum
``A_t = Σ log a`` and so loses ``|A_t|·ε`` absolutely (≈1e-3 at T = 20 000 in fp32); the pair
combine only ever adds ``A`` of a span to a log-state whose contribution it then weights, so
``T ≥ 10⁵`` in fp32 keeps full accuracy where the products themselves underflow. It is also
faster on CPU than torch's ``logcumsumexp``.

Backward: in linear space the adjoint ``g_t = dh_t + a_{t+1} g_{t+1}`` is a reversed linear
scan; ``d log b_t = g_t b_t`` and ``d log a_t = g_t a_t h_{t-1}`` (``= d log h_0`` at t = 1).
Only the inputs and ``log h`` are saved.
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from mingru._eager._odd_even import diagonal, log_pair, odd_even_scan, reverse_scan, shift_next


def _log_scan_forward(log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor) -> torch.Tensor:
    """``log h`` ``(B, T, D)`` for the recurrence started at ``log_h0`` ``(B, 1, D)``."""
    A, L = odd_even_scan(log_a, log_b, log_pair)  # zero-start maps, never a running sum of T
    return torch.logaddexp(A + log_h0, L)


class _LogScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_coeffs: torch.Tensor, log_values: torch.Tensor):
        log_h = _log_scan_forward(log_coeffs, log_values[:, 1:], log_values[:, :1])
        ctx.save_for_backward(log_coeffs, log_values, log_h)
        return log_h.exp()

    @staticmethod
    @once_differentiable
    def backward(ctx, dh):
        log_a, log_values, log_h = ctx.saved_tensors
        g = reverse_scan(shift_next(log_a.exp(), 0.0), dh, diagonal)
        log_h_prev = torch.cat([log_values[:, :1], log_h[:, :-1]], dim=1)
        d_log_a = g * (log_a + log_h_prev).exp()
        d_log_b = g * log_values[:, 1:].exp()
        return d_log_a, torch.cat([d_log_a[:, :1], d_log_b], dim=1)


def parallel_scan_log_eager(log_coeffs: torch.Tensor, log_values: torch.Tensor) -> torch.Tensor:
    """``h (B, T, D)`` for ``log_coeffs (B, T, D)`` and ``log_values (B, T+1, D)``."""
    return _LogScan.apply(log_coeffs, log_values)
