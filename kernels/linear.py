"""Triton kernels for a decode step's GEMMs (op ``linear``): ``y = x Wᵀ + b``, optionally
followed by GELU, for the few rows of a step (``x (M, K)``, ``W (N, K)``, ``M`` up to a few
dozen). Float32 products are split TF32 products on the tensor cores
(``tl.dot(..., input_precision="tf32x3")``: each operand split into a TF32 high part and a
TF32 remainder, three products summed), float32's accuracy to a few units in the last place.

Framework-free (``triton`` only); the launcher is ``mingru._launch.linear``, the launch
metadata :mod:`mingru_kernels.launch.linear`. Only the PyTorch frontend launches them, inside a
captured decode step (:class:`mingru._step_fusion.StepFusion`): there cuBLAS serves float32
GEMMs of 64 rows with SIMT kernels whose few tiles leave most SMs idle, where the arithmetic
would take a fraction of their time (see ``docs/explanation/tuning.md`` § Decode step).

``linear_fwd_kernel``: one program per ``(row block, column block, K slice)``; the slices
split the reduction over ``K`` so that a step's few rows still give every SM programs. With
one slice it adds the bias, applies GELU (``0.5·v·(1 + erf(v/√2))``, PyTorch's exact GELU)
and stores ``y`` in its dtype. With several, each stores its float32 partial product and
counts itself in at its tile's counter (``count_ptr``, int32, zero before the launch); the
program that arrives last adds the slices in their order (the same sum whatever order the
programs ran in), then the bias and GELU, and sets the counter back to zero. This saves a
second launch per GEMM, which in a decode step costs more than the sum, and lets a captured
step keep one counter buffer for all its GEMMs instead of zeroing one per GEMM.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _epilogue(acc, cols, col_ok, b_ptr, HAS_BIAS: tl.constexpr, GELU: tl.constexpr):
    if HAS_BIAS:
        acc = acc + tl.load(b_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    if GELU:
        acc = 0.5 * acc * (1.0 + tl.math.erf(acc * 0.7071067811865476))
    return acc


@triton.jit
def linear_fwd_kernel(x_ptr, w_ptr, b_ptr, y_ptr, part_ptr, count_ptr, M, N, K, k_per_split,
                      HAS_BIAS: tl.constexpr, GELU: tl.constexpr, SPLIT: tl.constexpr,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    pid_k = tl.program_id(2)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, BLOCK_K)
    row_ok, col_ok = rows < M, cols < N
    acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
    k_start = pid_k * k_per_split
    k_end = tl.minimum(k_start + k_per_split, K)
    for k0 in range(k_start, k_end, BLOCK_K):
        k = k0 + ks
        k_ok = k < k_end
        x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * K + k[None, :],
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0).to(tl.float32)
        w = tl.load(w_ptr + cols.to(tl.int64)[None, :] * K + k[:, None],
                    mask=col_ok[None, :] & k_ok[:, None], other=0.0).to(tl.float32)
        acc += tl.dot(x, w, input_precision="tf32x3")
    at = rows.to(tl.int64)[:, None] * N + cols[None, :]
    ok = row_ok[:, None] & col_ok[None, :]
    if SPLIT > 1:
        tl.store(part_ptr + pid_k.to(tl.int64) * M * N + at, acc, mask=ok)
        # Every thread's partial is stored before the one release that counts this slice in.
        tl.debug_barrier()
        tile = pid_m * tl.num_programs(1) + pid_n
        arrived = tl.atomic_add(count_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT - 1:
            acc = tl.zeros((BLOCK_M, BLOCK_N), tl.float32)
            for s in tl.static_range(SPLIT):
                acc += tl.load(part_ptr + s * M * N + at, mask=ok, other=0.0,
                               cache_modifier=".cg")
            acc = _epilogue(acc, cols, col_ok, b_ptr, HAS_BIAS, GELU)
            tl.store(y_ptr + at, acc.to(y_ptr.dtype.element_ty), mask=ok)
            # Every slice of this tile has counted in: the next launch finds zero.
            tl.atomic_xchg(count_ptr + tile, 0, sem="relaxed", scope="gpu")
    else:
        acc = _epilogue(acc, cols, col_ok, b_ptr, HAS_BIAS, GELU)
        tl.store(y_ptr + at, acc.to(y_ptr.dtype.element_ty), mask=ok)
