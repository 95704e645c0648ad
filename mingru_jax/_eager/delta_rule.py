"""Eager delta rule (DeltaNet / DeltaProduct) in the chunked WY / UT-transform form.

The twin of :mod:`mingru._eager.delta_rule`. Op
``delta_rule(q, k, v, beta, log_gamma=None, h0=None, chunk_size=64, *, cu_seqlens=None)
-> (o, h_T)``:

* ``q (B, T, H, d_k)`` queries (not normalized);
* ``k (B, T, nh, H, d_k)`` keys (the mixer L2-normalizes them; the op does not require it);
* ``v (B, T, nh, H, d_v)`` values; ``beta (B, T, nh, H)`` step sizes in ``(0, 2)``;
* ``log_gamma (B, T, H)`` or ``None`` — per-token decay ``γ_t = exp(log_gamma)``;
* ``h0 (B, H, d_k, d_v)`` or ``None`` (zeros).

Per token ``t``: ``S ← γ_t S``; then for ``j = 0..nh-1``:
``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``; then ``o_t = Sᵀ q_t``. Returns
``o (B, T, H, d_v)`` and the final state ``(B, H, d_k, d_v)``, in the input dtype.

Packed sequences (``cu_seqlens (N+1,)`` int32 offsets, already checked; ``B = 1``): ``h0`` is
``(N, H, d_k, d_v)`` (or ``None``), the state restarts from ``h0[n]`` at the first token of
sequence ``n`` and ``h_T (N, H, d_k, d_v)`` holds each sequence's final state (an empty
sequence's is its ``h0[n]``, zeros without ``h0``). As in the PyTorch twin the tokens are
scattered into a chunk-aligned padded row (:func:`packed_layout`: every sequence starts at a
chunk boundary, the gaps are identity steps ``k = v = 0``, ``β = 0``, ``log γ = 0``) of
``mingru_kernels.launch.delta_rule.packed_chunks(T, N, C)`` chunks (static, from the shapes);
the chunk map of each sequence's first chunk is replaced by the constant map
``S ↦ M h0[n] + N`` before the scan over chunks, each sequence's final state is read after its
last chunk and ``o`` is gathered back to the packed positions.

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

from typing import NamedTuple

import jax
import jax.numpy as jnp

from mingru_jax._eager._combine import fp32_matmuls
from mingru_jax._eager.matrix_affine_scan import matrix_affine_scan_eager
from mingru_kernels._spec import positive_int
from mingru_kernels.launch.delta_rule import packed_chunks

__all__ = ["PackedLayout", "delta_rule_eager", "gather_packed", "packed_layout", "scatter_packed"]


def _pad_time(x: jax.Array, total: int) -> jax.Array:
    """Zero-pad axis 1 to ``total``; padded tokens then act as identity steps (β = 0, γ = 1)."""
    extra = total - x.shape[1]
    if extra == 0:
        return x
    return jnp.pad(x, [(0, 0), (0, extra)] + [(0, 0)] * (x.ndim - 2))


# ----------------------------------------------------------------------------- packed layout


class PackedLayout(NamedTuple):
    """Where the tokens of packed sequences go in a chunk-aligned padded row (on the device);
    the twin of :class:`mingru._eager.delta_rule.PackedLayout`.

    Attributes:
        pos: ``(T,)`` int32 padded position of each packed token.
        chunk_seq: ``(NC,)`` int32, the sequence chunk ``c`` starts, or −1.
        chunk_end: ``(NC,)`` int32, the sequence whose last chunk ``c`` is, or −1.
        last_chunk: ``(N,)`` int32 last chunk of each sequence (0 for an empty one).
        nonempty: ``(N,)`` bool.
        chunk: tokens per chunk ``C``.
        n_chunks: ``NC`` (static: :func:`mingru_kernels.launch.delta_rule.packed_chunks`).
    """

    pos: jax.Array
    chunk_seq: jax.Array
    chunk_end: jax.Array
    last_chunk: jax.Array
    nonempty: jax.Array
    chunk: int
    n_chunks: int

    @property
    def padded(self) -> int:
        """Tokens of the padded row, ``NC · C``."""
        return self.n_chunks * self.chunk


def packed_layout(cu_seqlens: jax.Array, steps: int, chunk: int) -> PackedLayout:
    """The chunk-aligned layout of checked offsets ``cu_seqlens (N+1,)`` for ``steps`` packed
    tokens and ``chunk`` tokens per chunk; jit-compatible (no host read of the offsets).
    Sequence ``n`` takes ``ceil(L_n / C)`` chunks, starting where the previous ones end."""
    cu = jnp.asarray(cu_seqlens).astype(jnp.int32)
    n_seq = cu.shape[0] - 1
    nc = packed_chunks(steps, n_seq, chunk)
    lens = cu[1:] - cu[:-1]
    n_of = (lens + chunk - 1) // chunk  # chunks per sequence
    end = jnp.cumsum(n_of)
    first = end - n_of
    t = jnp.arange(steps, dtype=jnp.int32)
    seq = jnp.searchsorted(cu[1:], t, side="right")  # skips empty sequences
    pos = (first[seq] * chunk + (t - cu[seq])).astype(jnp.int32)
    nonempty = lens > 0
    ids = jnp.arange(n_seq, dtype=jnp.int32)

    def table(at: jax.Array) -> jax.Array:
        # Empty sequences write to a spare slot past the end (dropped).
        slot = jnp.where(nonempty, at, nc)
        return jnp.full((nc + 1,), -1, jnp.int32).at[slot].set(ids)[:nc]

    last = jnp.maximum(end - 1, 0).astype(jnp.int32)
    return PackedLayout(pos, table(first), table(last), last_chunk=last, nonempty=nonempty,
                        chunk=chunk, n_chunks=nc)


def scatter_packed(x: jax.Array, layout: PackedLayout) -> jax.Array:
    """``x (1, T, …)`` into the padded row ``(1, NC·C, …)``, zeros between sequences."""
    out = jnp.zeros((layout.padded, *x.shape[2:]), x.dtype)
    return out.at[layout.pos].set(x[0], unique_indices=True)[None]


def gather_packed(x: jax.Array, layout: PackedLayout) -> jax.Array:
    """The packed tokens ``(1, T, …)`` of a padded row ``x (1, NC·C, …)``."""
    return x[:, layout.pos]


def packed_final_states(ends: jax.Array, layout: PackedLayout,
                        h0: jax.Array | None) -> jax.Array:
    """``(N, …)`` final states from the chunk end states ``ends (NC, …)``: each sequence's
    last chunk's, an empty sequence's initial state (zeros when ``h0`` is ``None``)."""
    last = ends[layout.last_chunk]
    before = jnp.zeros_like(last) if h0 is None else h0.astype(last.dtype)
    return jnp.where(layout.nonempty.reshape(-1, *([1] * (last.ndim - 1))), last, before)


# ----------------------------------------------------------------------------- chunked WY form


def _chunk_maps(q, k, v, *, beta, log_gamma, C):
    """Per-chunk ``q_eff, o_u (B, H, NC, C, ·)`` and maps ``M, N (B, H, NC, ·, ·)`` with
    ``o = q_eff S_0 + o_u`` and ``S_L = M S_0 + N`` for chunks of ``C`` tokens (the sequence
    zero-padded to whole chunks)."""
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype = q.dtype
    n_chunks = -(-T // C)
    Tp = n_chunks * C
    L = C * nh  # micro-steps per chunk

    # (B, H, n_chunks, L, ·) with micro-step index i = token * nh + j inside a chunk.
    def micro(x: jax.Array) -> jax.Array:
        x = _pad_time(x, Tp).reshape(B, n_chunks, L, H, -1)
        return x.transpose(0, 3, 1, 2, 4)

    kc = micro(k)
    vc = micro(v)
    bc = micro(beta[..., None])[..., 0]
    qc = _pad_time(q, Tp).reshape(B, n_chunks, C, H, dk).transpose(0, 3, 1, 2, 4)

    idx = jnp.arange(L)
    strict = idx[:, None] > idx[None, :]  # [i, j]: j < i
    causal = idx[:, None] >= idx[None, :]
    if log_gamma is None:
        # Every Γ is 1: an (L, L) mask, not a (B, H, NC, L, L) decay built from a zero
        # log γ, which XLA would constant-fold at a long compile.
        D = causal.astype(dtype)
        Gam = jnp.ones((L,), dtype)
    else:
        # γ applies on a token's first micro-step only: exact zeros elsewhere.
        lg = jnp.concatenate([log_gamma[:, :, None], jnp.zeros((B, T, nh - 1, H), dtype)],
                             axis=2)
        gc = micro(lg[..., None])[..., 0]
        # seg[i, j] = Σ_{j<l≤i} log γ_l: masked cumsum down the rows of column j (0 for
        # j ≥ i, so the exp below never overflows in the masked-out half).
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
    return q_eff, o_u, M, N


@fp32_matmuls
def delta_rule_eager(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    beta: jax.Array,
    log_gamma: jax.Array | None = None,
    h0: jax.Array | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: jax.Array | None = None,
    allow_tf32: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """The delta rule by the chunked WY form; see the module docstring for shapes and math
    (and for ``cu_seqlens``, the packed form: ``B = 1``, ``h0``/``h_T`` ``(N, H, d_k, d_v)``).
    ``allow_tf32`` is the kernels' option (TF32 products for float32 inputs); this reference
    takes it for the same signature and keeps its full-float32 products.

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
    if cu_seqlens is not None:
        return _packed(q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, chunk_size=chunk_size,
                       cu_seqlens=cu_seqlens)
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype = q.dtype
    if h0 is None:
        h0 = jnp.zeros((B, H, dk, dv), dtype)

    C = min(chunk_size, T)  # tokens per chunk; a chunk longer than T changes nothing
    q_eff, o_u, M, N = _chunk_maps(q, k, v, beta=beta, log_gamma=log_gamma, C=C)
    n_chunks = M.shape[2]

    # Chunk end states by an associative scan over the chunk maps (chunks on axis 1).
    P, Z = matrix_affine_scan_eager(jnp.swapaxes(M, 1, 2), jnp.swapaxes(N, 1, 2))
    ends = P @ h0[:, None] + Z  # (B, n_chunks, H, dk, dv)
    starts = jnp.concatenate([h0[:, None], ends[:, :-1]], axis=1)
    o = q_eff @ jnp.swapaxes(starts, 1, 2) + o_u  # (B, H, n_chunks, C, dv)
    o = o.transpose(0, 2, 3, 1, 4).reshape(B, n_chunks * C, H, dv)[:, :T]
    return o.astype(dtype), ends[:, -1].astype(dtype)


def _packed(q, k, v, *, beta, log_gamma, h0, chunk_size, cu_seqlens):
    """The packed form on the chunk-aligned layout (see the module docstring)."""
    _, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype = q.dtype
    lay = packed_layout(cu_seqlens, T, max(1, min(chunk_size, T)))
    q, k, v, beta = (scatter_packed(x, lay) for x in (q, k, v, beta))
    if log_gamma is not None:
        log_gamma = scatter_packed(log_gamma, lay)
    q_eff, o_u, M, N = _chunk_maps(q, k, v, beta=beta, log_gamma=log_gamma, C=lay.chunk)
    M, N = jnp.swapaxes(M[0], 0, 1), jnp.swapaxes(N[0], 0, 1)  # (NC, H, ·, ·)
    starts = (lay.chunk_seq >= 0)[:, None, None, None]
    if h0 is None:
        first = jnp.zeros((lay.n_chunks, H, dk, dv), dtype)
    else:
        first = h0.astype(dtype)[jnp.maximum(lay.chunk_seq, 0)]  # (NC, H, dk, dv)
    # A sequence's first chunk maps any carried state to M h0[n] + N: the scan restarts there.
    N = jnp.where(starts, M @ first + N, N)
    M = jnp.where(starts, jnp.zeros_like(M), M)
    _, ends = matrix_affine_scan_eager(M[None], N[None])  # from S = 0 (chunk 0 starts one)
    ends = ends[0]  # (NC, H, dk, dv)
    carried = jnp.concatenate([jnp.zeros_like(ends[:1]), ends[:-1]], axis=0)
    start_states = jnp.where(starts, first, carried)
    o = q_eff[0] @ jnp.swapaxes(start_states, 0, 1) + o_u[0]  # (H, NC, C, dv)
    o = o.transpose(1, 2, 0, 3).reshape(1, lay.padded, H, dv)
    h_T = packed_final_states(ends, lay, h0)
    return gather_packed(o, lay).astype(dtype), h_T.astype(dtype)
