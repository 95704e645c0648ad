"""Eager log-space scan (Heinsen 2023) for ``h_t = a_t h_{t-1} + b_t`` with ``a, b > 0``.

Inputs are ``log a`` ``(B, T, D)`` and ``log_values`` ``(B, T+1, D)`` (slot 0 = ``log h_0``).

Forward, chunked for stability: inside chunks of ``CHUNK`` steps, Heinsen's closed form
``log Z_t = A_t + logcumsumexp(log b - A)_t`` (``A`` = cumulative ``log a``); its cancellation
error grows with ``|A|``, so ``A`` is only ever summed over one chunk. The chunk carries are
combined by the odd–even scan over ``(log a, log b)`` pairs, which never forms a
whole-sequence cumulative sum, so ``T ≥ 10⁵`` in fp32 keeps full accuracy even where the
products themselves underflow.

Backward: in linear space the adjoint ``g_t = dh_t + a_{t+1} g_{t+1}`` is a reversed linear
scan; ``d log b_t = g_t b_t`` and ``d log a_t = g_t a_t h_{t-1}`` (``= d log h_0`` at t = 1).
Only the inputs and ``log h`` are saved.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

from mingru._eager._odd_even import diagonal, log_pair, odd_even_scan, reverse_scan, shift_next

CHUNK = 32


def _log_scan_forward(log_a: torch.Tensor, log_b: torch.Tensor, log_h0: torch.Tensor) -> torch.Tensor:
    """``log h`` ``(B, T, D)`` for the recurrence started at ``log_h0`` ``(B, 1, D)``."""
    B, T, D = log_a.shape
    C = min(CHUNK, T)
    pad = (-T) % C
    if pad:  # a = 1, b = 0 after the end: leaves every real step unchanged
        log_a = F.pad(log_a, (0, 0, 0, pad), value=0.0)
        log_b = F.pad(log_b, (0, 0, 0, pad), value=float("-inf"))
    N = (T + pad) // C
    la = log_a.reshape(B, N, C, D)
    lb = log_b.reshape(B, N, C, D)
    A = la.cumsum(dim=2)
    L = A + torch.logcumsumexp(lb - A, dim=2)  # zero-start solution inside each chunk
    # Chunk summaries (log of the chunk's total product, log of its zero-start end state),
    # scanned across chunks with h_0 prepended as a constant map.
    ca = torch.cat([torch.zeros_like(log_h0), A[:, :, -1]], dim=1)
    cb = torch.cat([log_h0, L[:, :, -1]], dim=1)
    _, ends = odd_even_scan(ca, cb, log_pair)
    carry_in = ends[:, :-1].unsqueeze(2)  # (B, N, 1, D): log h at each chunk's start
    log_h = torch.logaddexp(A + carry_in, L)
    return log_h.reshape(B, N * C, D)[:, :T]


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
