"""Eager delta rule (DeltaNet / DeltaProduct) in the chunked WY / UT-transform form.

The twin of :mod:`mingru._eager.delta_rule`. Op
``delta_rule(q, k, v, beta, log_gamma=None, h0=None, chunk_size=64) -> (o, h_T)``:

* ``q (B, T, H, d_k)`` queries (not normalized);
* ``k (B, T, nh, H, d_k)`` keys (the mixer L2-normalizes them; the op does not require it);
* ``v (B, T, nh, H, d_v)`` values; ``beta (B, T, nh, H)`` step sizes in ``(0, 2)``;
* ``log_gamma (B, T, H)`` or ``None`` — per-token decay ``γ_t = exp(log_gamma)``;
* ``h0 (B, H, d_k, d_v)`` or ``None`` (zeros).

Per token ``t``: ``S ← γ_t S``; then for ``j = 0..nh-1``:
``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``; then ``o_t = Sᵀ q_t``. Returns
``o (B, T, H, d_v)`` and the final state ``(B, H, d_k, d_v)``, in the input dtype.

Method (Yang et al. 2024, arXiv:2406.06484; DeltaProduct: Siems et al. 2025,
arXiv:2502.10297). The ``nh`` micro-steps make ``T·nh`` rank-1 updates, ``γ`` only on each
token's first one. Inside a chunk of ``L`` micro-steps with start state ``S_0`` the updates
are ``S_i = Γ_i S_0 + Σ_{j≤i} D_ij k_j w_jᵀ`` (``D_ij = Γ_i/Γ_j``), where ``W`` solves the
unit lower-triangular system ``(I + A) W = diag(β)(V − diag(Γ) K S_0)`` with
``A_ij = β_i D_ij k_iᵀ k_j`` (``j < i``). Splitting ``W = U − W_k S_0`` makes ``A``, the
solve, ``U`` and ``W_k`` independent of ``S_0``: they are computed for all chunks at once.
Each chunk is then the affine map ``S_0 ↦ M S_0 + N`` on the state, and the chunk start
states come from one more associative scan over those maps.

Numerics: ``D_ij`` is ``exp`` of the segment sum ``Σ_{j<l≤i} log γ_l`` built by a masked
cumulative sum, never a ratio of cumulative products (a gap of ``Δt = 1e10`` would make that
``inf/inf`` or cancel). Half-precision inputs run the triangular solve in float32.
Gradients by JAX's autodiff.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mingru_jax._eager._combine import fp32_matmuls
from mingru_jax._eager.matrix_affine_scan import matrix_affine_scan_eager
from mingru_kernels._spec import positive_int

__all__ = ["delta_rule_eager"]


def _pad_time(x: jax.Array, total: int) -> jax.Array:
    """Zero-pad axis 1 to ``total``; padded tokens then act as identity steps (β = 0, γ = 1)."""
    extra = total - x.shape[1]
    if extra == 0:
        return x
    return jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2))


@fp32_matmuls
def delta_rule_eager(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    beta: jax.Array,
    log_gamma: jax.Array | None = None,
    h0: jax.Array | None = None,
    chunk_size: int = 64,
) -> tuple[jax.Array, jax.Array]:
    """The delta rule by the chunked WY form; see the module docstring for shapes and math.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> B, T, nh, H, dk, dv = 2, 9, 2, 3, 4, 5
        >>> ks = jax.random.split(jax.random.key(0), 4)
        >>> q = jax.random.normal(ks[0], (B, T, H, dk))
        >>> k = jax.random.normal(ks[1], (B, T, nh, H, dk))
        >>> k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
        >>> v = jax.random.normal(ks[2], (B, T, nh, H, dv))
        >>> beta = 2 * jax.random.uniform(ks[3], (B, T, nh, H))
        >>> o, hT = delta_rule_eager(q, k, v, beta, chunk_size=4)
        >>> o.shape, hT.shape
        ((2, 9, 3, 5), (2, 3, 4, 5))
    """
    positive_int(chunk_size, "chunk_size")
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype = q.dtype
    if log_gamma is None:
        log_gamma = jnp.zeros((B, T, H), dtype)
    if h0 is None:
        h0 = jnp.zeros((B, H, dk, dv), dtype)

    C = min(chunk_size, T)  # tokens per chunk; a chunk longer than T changes nothing
    n_chunks = -(-T // C)
    Tp = n_chunks * C
    L = C * nh  # micro-steps per chunk

    # γ applies on a token's first micro-step only: exact zeros elsewhere.
    lg = jnp.concatenate([log_gamma[:, :, None], jnp.zeros((B, T, nh - 1, H), dtype)], axis=2)

    # (B, H, n_chunks, L, ·) with micro-step index i = token * nh + j inside a chunk.
    def micro(x: jax.Array) -> jax.Array:
        x = _pad_time(x, Tp).reshape(B, n_chunks, L, H, -1)
        return x.transpose(0, 3, 1, 2, 4)

    kc = micro(k)
    vc = micro(v)
    bc = micro(beta[..., None])[..., 0]
    gc = micro(lg[..., None])[..., 0]
    qc = _pad_time(q, Tp).reshape(B, n_chunks, C, H, dk).transpose(0, 3, 1, 2, 4)

    idx = jnp.arange(L)
    strict = idx[:, None] > idx[None, :]  # [i, j]: j < i
    causal = idx[:, None] >= idx[None, :]
    # seg[i, j] = Σ_{j<l≤i} log γ_l: masked cumsum down the rows of column j (0 for j ≥ i,
    # so the exp below never overflows in the masked-out half).
    seg = jnp.cumsum(jnp.where(strict, gc[..., :, None], 0.0), axis=-2)
    D = jnp.where(causal, jnp.exp(seg), 0.0).astype(dtype)  # Γ_i / Γ_j for j ≤ i
    Gam = jnp.exp(jnp.cumsum(gc, axis=-1))  # Γ_i from the chunk start, inclusive

    kk = kc @ jnp.swapaxes(kc, -1, -2)
    A = jnp.where(strict, bc[..., None] * D * kk, 0.0).astype(dtype)
    rhs = jnp.concatenate([bc[..., None] * vc, (bc * Gam)[..., None] * kc], axis=-1)
    solve_dtype = jnp.float32 if jnp.dtype(dtype).itemsize < 4 else dtype
    eye = jnp.eye(L, dtype=solve_dtype)
    sol = jax.lax.linalg.triangular_solve(
        (A.astype(solve_dtype) + eye),
        rhs.astype(solve_dtype),
        left_side=True,
        lower=True,
        unit_diagonal=True,
    ).astype(dtype)
    U, Wk = sol[..., :dv], sol[..., dv:]  # W = U − W_k S_0

    # Outputs only after each token's last micro-step.
    P_qk = D[..., nh - 1 :: nh, :] * (qc @ jnp.swapaxes(kc, -1, -2))  # (…, C, L)
    q_eff = Gam[..., nh - 1 :: nh, None] * qc - P_qk @ Wk  # o = q_eff S_0 + o_u
    o_u = P_qk @ U

    # Chunk map S_L = M S_0 + N with M = Γ_L I − Kᵀ diag(D_L) W_k, N = Kᵀ diag(D_L) U.
    kd = jnp.swapaxes(D[..., L - 1, :, None] * kc, -1, -2)
    M = Gam[..., L - 1, None, None] * jnp.eye(dk, dtype=dtype) - kd @ Wk
    N = kd @ U

    # Chunk end states by an associative scan over the chunk maps (chunks on axis 1).
    P, Z = matrix_affine_scan_eager(jnp.swapaxes(M, 1, 2), jnp.swapaxes(N, 1, 2))
    ends = P @ h0[:, None] + Z  # (B, n_chunks, H, dk, dv)
    starts = jnp.concatenate([h0[:, None], ends[:, :-1]], axis=1)
    o = q_eff @ jnp.swapaxes(starts, 1, 2) + o_u  # (B, H, n_chunks, C, dv)
    o = o.transpose(0, 2, 3, 1, 4).reshape(B, Tp, H, dv)[:, :T]
    return o.astype(dtype), ends[:, -1].astype(dtype)
