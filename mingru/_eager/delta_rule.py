"""Eager delta rule (DeltaNet / DeltaProduct) in the chunked WY / UT-transform form.

Op ``delta_rule(q, k, v, beta, log_gamma=None, h0=None, chunk_size=64, *, cu_seqlens=None)
-> (o, h_T)``:

* ``q (B, T, H, d_k)`` queries (not normalized);
* ``k (B, T, nh, H, d_k)`` keys (the mixer L2-normalizes them; the op does not require it);
* ``v (B, T, nh, H, d_v)`` values; ``beta (B, T, nh, H)`` step sizes in ``(0, 2)``;
* ``log_gamma (B, T, H)`` or ``None`` — per-token decay ``γ_t = exp(log_gamma)``;
* ``h0 (B, H, d_k, d_v)`` or ``None`` (zeros).

Per token ``t``: ``S ← γ_t S``; then for ``j = 0..nh-1``:
``S ← (I − β_j k_j k_jᵀ) S + β_j k_j v_jᵀ``; then ``o_t = Sᵀ q_t``. Returns
``o (B, T, H, d_v)`` and the final state ``(B, H, d_k, d_v)``, in the input dtype.

Packed sequences (``cu_seqlens (N+1,)`` int64 offsets, already checked; ``B = 1``): ``h0`` is
``(N, H, d_k, d_v)`` (or ``None``), the state restarts from ``h0[n]`` at the first token of
sequence ``n`` and ``h_T (N, H, d_k, d_v)`` holds each sequence's final state (an empty
sequence's is its ``h0[n]``, zeros without ``h0``). Layout (:func:`packed_layout`): the tokens
are scattered into a padded row where every sequence starts at a chunk boundary, the gaps
being identity steps (``k = v = 0``, ``β = 0``, ``log γ = 0``), so no chunk straddles two
sequences; the chunk pass then only resets the start state of each sequence's first chunk and
reads each sequence's final state after its last chunk. The padded row has
``mingru_kernels.launch.delta_rule.packed_chunks(T, N, C)`` chunks (a bound from the shapes:
no host sync); ``o`` is gathered back to the packed positions. The Triton launcher uses the
same layout with its own chunk.

Method (Yang et al. 2024, arXiv:2406.06484; DeltaProduct: Siems et al. 2025,
arXiv:2502.10297). The ``nh`` micro-steps make ``T·nh`` rank-1 updates, ``γ`` only on each
token's first one. Inside a chunk of ``L`` micro-steps with start state ``S_0``,
``S_i = Γ_i S_0 + Σ_{j≤i} D_ij k_j w_jᵀ`` where ``D_ij = Γ_i/Γ_j`` and ``W`` solves the unit
lower-triangular system ``(I + A) W = diag(β)(V − diag(Γ) K S_0)``,
``A_ij = β_i D_ij k_iᵀ k_j`` (``j < i``). Splitting ``W = U − W_k S_0`` makes every chunk's
``A``, triangular solve, ``U`` and ``W_k`` independent of ``S_0``, so they are computed for all
chunks at once; only the ``d_k × d_k`` affine map ``S_0 ↦ S_L`` is applied chunk after chunk.

Numerics: ``D_ij`` is never a ratio of cumulative products nor ``exp`` of a difference of
chunk-wide cumulative sums (a gap of ``Δt = 1e10`` would make that ``inf/inf`` or cancel);
it is ``exp`` of the segment sum ``Σ_{j<l≤i} log γ_l`` built by a masked cumulative sum. The
masking uses ``torch.where`` because ``log γ`` may be huge and negative (``0 · −inf`` is NaN).
With ``log_gamma=None`` the same arithmetic runs on exact zeros, so ``γ = 1`` reproduces it
bit for bit. Half-precision inputs run the triangular solve in float32 (PyTorch has no
half-precision triangular solve); everything else stays in the input dtype. Differentiable
by autograd.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from mingru_kernels._spec import positive_int
from mingru_kernels.launch.delta_rule import packed_chunks

__all__ = ["PackedLayout", "delta_rule_eager", "gather_packed", "packed_layout", "scatter_packed"]


def _pad_time(x: torch.Tensor, total: int) -> torch.Tensor:
    """Zero-pad dim 1 to ``total``; padded tokens then act as identity steps (β = 0, γ = 1)."""
    extra = total - x.shape[1]
    if extra == 0:
        return x
    pad = [0, 0] * (x.ndim - 2) + [0, extra]
    return F.pad(x, pad)


# --- packed sequences: the chunk-aligned layout --------------------------------------------


class PackedLayout(NamedTuple):
    """Where the tokens of packed sequences go in a chunk-aligned padded row (on the device).

    Attributes:
        pos: ``(T,)`` int64 padded position of each packed token.
        chunk_seq: ``(NC,)`` int32, the sequence chunk ``c`` starts, or −1.
        chunk_end: ``(NC,)`` int32, the sequence whose last chunk ``c`` is, or −1.
        last_chunk: ``(N,)`` int64 last chunk of each sequence (0 for an empty one).
        nonempty: ``(N,)`` bool.
        chunk: tokens per chunk ``C``.
        n_chunks: ``NC`` (static: :func:`mingru_kernels.launch.delta_rule.packed_chunks`).
    """

    pos: torch.Tensor
    chunk_seq: torch.Tensor
    chunk_end: torch.Tensor
    last_chunk: torch.Tensor
    nonempty: torch.Tensor
    chunk: int
    n_chunks: int

    @property
    def padded(self) -> int:
        """Tokens of the padded row, ``NC · C``."""
        return self.n_chunks * self.chunk


def packed_layout(cu_seqlens: torch.Tensor, steps: int, chunk: int) -> PackedLayout:
    """The chunk-aligned layout of checked offsets ``cu_seqlens (N+1,)`` for ``steps`` packed
    tokens and ``chunk`` tokens per chunk; built on the device, no host sync. Sequence ``n``
    takes ``ceil(L_n / C)`` chunks, starting where the previous sequences' chunks end."""
    cu = cu_seqlens.to(torch.int64)
    n_seq = cu.shape[0] - 1
    nc = packed_chunks(steps, n_seq, chunk)
    lens = cu[1:] - cu[:-1]
    n_of = (lens + chunk - 1) // chunk  # chunks per sequence
    end = n_of.cumsum(0)
    first = end - n_of
    t = torch.arange(steps, device=cu.device)
    seq = torch.searchsorted(cu[1:], t, right=True)  # skips empty sequences
    pos = first[seq] * chunk + (t - cu[seq])
    nonempty = lens > 0
    ids = torch.arange(n_seq, device=cu.device, dtype=torch.int32)

    def table(at: torch.Tensor) -> torch.Tensor:
        # Empty sequences write to a spare slot past the end (dropped).
        slot = torch.where(nonempty, at, torch.full_like(at, nc))
        out = torch.full((nc + 1,), -1, dtype=torch.int32, device=cu.device)
        return out.scatter(0, slot, ids)[:nc]

    last = (end - 1).clamp_min(0)
    return PackedLayout(pos, table(first), table(last), last_chunk=last, nonempty=nonempty,
                        chunk=chunk, n_chunks=nc)


def scatter_packed(x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """``x (1, T, …)`` into the padded row ``(1, NC·C, …)``, zeros between sequences
    (differentiable)."""
    out = x.new_zeros((layout.padded, *x.shape[2:]))
    return out.index_copy(0, layout.pos, x[0]).unsqueeze(0)


def gather_packed(x: torch.Tensor, layout: PackedLayout) -> torch.Tensor:
    """The packed tokens ``(1, T, …)`` of a padded row ``x (1, NC·C, …)``."""
    return x[:, layout.pos]


def packed_final_states(ends: torch.Tensor, layout: PackedLayout,
                        h0: torch.Tensor | None) -> torch.Tensor:
    """``(N, …)`` final states from the chunk end states ``ends (NC, …)``: each sequence's
    last chunk's, an empty sequence's initial state (zeros when ``h0`` is ``None``)."""
    last = ends[layout.last_chunk]
    before = torch.zeros_like(last) if h0 is None else h0.to(last.dtype)
    return torch.where(layout.nonempty.reshape(-1, *([1] * (last.ndim - 1))), last, before)


# --- the chunked WY form -------------------------------------------------------------------


def _chunk_maps(q, k, v, *, beta, log_gamma, C):
    """Per-chunk ``q_eff, o_u (B, H, NC, C, ·)`` and maps ``M, N (B, H, NC, ·, ·)`` with
    ``o = q_eff S_0 + o_u`` and ``S_L = M S_0 + N`` for chunks of ``C`` tokens (the sequence
    zero-padded to whole chunks)."""
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype, device = q.dtype, q.device
    if log_gamma is None:
        log_gamma = torch.zeros(B, T, H, dtype=dtype, device=device)
    n_chunks = -(-T // C)
    Tp = n_chunks * C
    L = C * nh  # micro-steps per chunk

    # γ applies on a token's first micro-step only: exact zeros elsewhere.
    lg = torch.cat([log_gamma.unsqueeze(2), log_gamma.new_zeros(B, T, nh - 1, H)], dim=2)

    # (B, H, n_chunks, L, ·) with micro-step index i = token * nh + j inside a chunk.
    def micro(x: torch.Tensor) -> torch.Tensor:
        x = _pad_time(x, Tp).reshape(B, n_chunks, L, H, -1)
        return x.permute(0, 3, 1, 2, 4)

    kc = micro(k)
    vc = micro(v)
    bc = micro(beta.unsqueeze(-1)).squeeze(-1)
    gc = micro(lg.unsqueeze(-1)).squeeze(-1)
    qc = _pad_time(q, Tp).reshape(B, n_chunks, C, H, dk).permute(0, 3, 1, 2, 4)

    idx = torch.arange(L, device=device)
    strict = idx[:, None] > idx[None, :]  # [i, j]: j < i
    causal = idx[:, None] >= idx[None, :]
    # seg[i, j] = Σ_{j<l≤i} log γ_l: masked cumsum down the rows of column j.
    masked = torch.where(strict, gc.unsqueeze(-1), gc.new_zeros(()))
    seg = masked.cumsum(dim=-2)
    D = torch.where(causal, seg.exp(), seg.new_zeros(()))  # Γ_i / Γ_j for j ≤ i
    Gam = gc.cumsum(dim=-1).exp()  # Γ_i from the chunk start, inclusive

    kk = kc @ kc.transpose(-1, -2)
    A = torch.where(strict, bc.unsqueeze(-1) * D * kk, kk.new_zeros(()))
    rhs = torch.cat([bc.unsqueeze(-1) * vc, (bc * Gam).unsqueeze(-1) * kc], dim=-1)
    eye = torch.eye(L, dtype=dtype, device=device)
    solve_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    sol = torch.linalg.solve_triangular(
        (A + eye).to(solve_dtype), rhs.to(solve_dtype), upper=False, unitriangular=True
    ).to(dtype)
    U, Wk = sol[..., :dv], sol[..., dv:]  # W = U − Wk S_0

    # Outputs only after each token's last micro-step.
    D_out = D[..., nh - 1 :: nh, :]  # (…, C, L)
    P_qk = D_out * (qc @ kc.transpose(-1, -2))
    q_eff = Gam[..., nh - 1 :: nh].unsqueeze(-1) * qc - P_qk @ Wk  # o = q_eff S_0 + o_u
    o_u = P_qk @ U

    # Chunk map S_L = M S_0 + N with M = Γ_L I − Kᵀ diag(D_L) Wk, N = Kᵀ diag(D_L) U.
    kd = (D[..., L - 1, :].unsqueeze(-1) * kc).transpose(-1, -2)
    eye_k = torch.eye(dk, dtype=dtype, device=device)
    M = Gam[..., L - 1, None, None] * eye_k - kd @ Wk
    N = kd @ U
    return q_eff, o_u, M, N


def delta_rule_eager(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    beta: torch.Tensor,
    log_gamma: torch.Tensor | None = None,
    h0: torch.Tensor | None = None,
    chunk_size: int = 64,
    *,
    cu_seqlens: torch.Tensor | None = None,
    allow_tf32: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The delta rule by the chunked WY form; see the module docstring for shapes and math
    (and for ``cu_seqlens``, the packed form: ``B = 1``, ``h0``/``h_T`` ``(N, H, d_k, d_v)``).
    ``allow_tf32`` is the kernels' option (TF32 products for float32 inputs); this reference
    takes it for the same signature and leaves PyTorch's matmul precision as it is.

    Example:
        >>> import torch, torch.nn.functional as F
        >>> B, T, nh, H, dk, dv = 2, 9, 2, 3, 4, 5
        >>> q = torch.randn(B, T, H, dk)
        >>> k = F.normalize(torch.randn(B, T, nh, H, dk), dim=-1)
        >>> v, beta = torch.randn(B, T, nh, H, dv), 2 * torch.rand(B, T, nh, H)
        >>> o, hT = delta_rule_eager(q, k, v, beta, chunk_size=4)
        >>> o.shape, hT.shape
        (torch.Size([2, 9, 3, 5]), torch.Size([2, 3, 4, 5]))
    """
    positive_int(chunk_size, "chunk_size")
    if cu_seqlens is not None:
        return _packed(q, k, v, beta=beta, log_gamma=log_gamma, h0=h0, chunk_size=chunk_size,
                       cu_seqlens=cu_seqlens)
    B, T, nh, H, dk = k.shape
    dv = v.shape[-1]
    dtype = q.dtype
    if h0 is None:
        h0 = torch.zeros(B, H, dk, dv, dtype=dtype, device=q.device)

    C = min(chunk_size, T)  # tokens per chunk; a chunk longer than T changes nothing
    q_eff, o_u, M, N = _chunk_maps(q, k, v, beta=beta, log_gamma=log_gamma, C=C)
    n_chunks = M.shape[2]
    S = h0.to(dtype)
    outs = []
    for c in range(n_chunks):
        outs.append(q_eff[:, :, c] @ S + o_u[:, :, c])
        S = M[:, :, c] @ S + N[:, :, c]
    o = torch.stack(outs, dim=2)  # (B, H, n_chunks, C, dv)
    o = o.permute(0, 2, 3, 1, 4).reshape(B, n_chunks * C, H, dv)[:, :T]
    return o, S


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
    starts = lay.chunk_seq >= 0  # (NC,)
    if h0 is None:
        first = q.new_zeros(lay.n_chunks, H, dk, dv)
    else:
        first = h0.to(dtype)[lay.chunk_seq.clamp_min(0).long()]  # (NC, H, dk, dv)
    S = first[0]
    outs, ends = [], []
    for c in range(lay.n_chunks):
        S = torch.where(starts[c], first[c], S)  # a sequence starts here: its own h0
        outs.append(q_eff[0, :, c] @ S + o_u[0, :, c])
        S = M[0, :, c] @ S + N[0, :, c]
        ends.append(S)
    o = torch.stack(outs, dim=1)  # (H, NC, C, dv)
    o = o.permute(1, 2, 0, 3).reshape(1, lay.padded, H, dv)
    h_T = packed_final_states(torch.stack(ends), lay, h0)
    return gather_packed(o, lay), h_T
