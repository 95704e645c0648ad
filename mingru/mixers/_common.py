"""Pieces every mixer shares: the ``g`` activation, time decay, and argument checks.

Conventions (SPEC §5.1) that ``mingru_jax`` mirrors exactly so weights and numbers carry over:

* ``g(x) = x + 0.5`` for ``x ≥ 0``, ``σ(x)`` for ``x < 0``; ``log g`` takes the ``x ≥ 0``
  branch at 0 so its gradient there is finite.
* Δt sanitizing: NaN → 0, negative → 0, +inf → 1e10, then ``log1p`` if ``log1p_delta``.
* Decay ``γ_t = exp(−λ f(Δt_t))`` scales only the transition; ``λ = decay_rate`` (fixed) or
  ``softplus(ρ)`` per channel with ``ρ`` initialised so that ``softplus(ρ) = decay_rate``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from mingru import _step_fusion as step_fusion
from mingru import _validate
from mingru._eager.mingru_cell import g as g
from mingru._eager.mingru_cell import log_g as log_g
from mingru._packing import check_cu_seqlens
from mingru.dispatch import select
from mingru_kernels._checks import shape_in
from mingru_kernels._spec import DECAY_MODES as DECAY_MODES
from mingru_kernels._spec import MAX_GAP, check_decay, inverse_softplus


def project(x: torch.Tensor, *layers: nn.Linear) -> torch.Tensor:
    """``x`` through several ``nn.Linear`` layers as ONE GEMM: their outputs side by side.

    The weights are concatenated at call time (a copy of the weights, not of activations),
    so the parameters, ``state_dict`` keys and initialisation stay those of the separate
    layers, and a fused cell reads the result as one ``(B, T, n·D)`` tensor. Inside a
    :class:`mingru._step_fusion.StepFusion` (a decode step being captured) the concatenation
    is made once and kept.
    """
    fusion = step_fusion.active()
    if fusion is None or (torch.is_grad_enabled()
                          and any(layer.weight.requires_grad for layer in layers)):
        # (the joined copies carry no gradient)
        return F.linear(x, *step_fusion.join(layers))
    weight, bias = fusion.joined(layers)
    fused = fused_linear(x, weight, bias)
    return F.linear(x, weight, bias) if fused is None else fused


def fused_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None,
                 *, gelu: bool = False) -> torch.Tensor | None:
    """``F.linear(x, weight, bias)`` (then GELU when ``gelu``) on the Triton kernels, or
    ``None`` where they do not take it: they do only inside a
    :class:`mingru._step_fusion.StepFusion` (a decode step being captured), with nothing to
    differentiate, ``x`` in the weights' dtype and autocast off, where dispatch picks them
    (``auto``: float32 at 16 to 128 rows, where cuBLAS's float32 kernels leave most SMs idle).
    The caller then runs its own module, so module hooks still see the plain calls.

    Example:
        >>> import torch
        >>> fused_linear(torch.randn(3, 4), torch.randn(5, 4)) is None  # no StepFusion
        True
    """
    if (step_fusion.active() is None or x.dtype != weight.dtype
            or torch.is_autocast_enabled(x.device.type)
            or (torch.is_grad_enabled() and any(
                t is not None and t.requires_grad for t in (x, weight, bias)))):
        return None
    launcher = select("linear", x, weight, bias=bias, gelu=gelu)
    return None if launcher is None else launcher.run(x, weight, bias, gelu=gelu)


def sanitize_delta_t(delta_t: torch.Tensor, log1p_delta: bool) -> torch.Tensor:
    """NaN → 0, negative → 0, +inf → 1e10, then ``log1p`` if asked."""
    dt = torch.nan_to_num(delta_t, nan=0.0, posinf=MAX_GAP, neginf=0.0).clamp(0.0, MAX_GAP)
    return torch.log1p(dt) if log1p_delta else dt


class TimeDecay(nn.Module):
    """Per-token transition decay ``γ_t = exp(−λ f(Δt_t))``; inert when ``decay is None``.

    Args:
        decay: ``None``, ``"fixed"`` or ``"learnable"``.
        decay_rate: ``λ`` (fixed) or the initial ``softplus(ρ)`` (learnable); ``> 0``.
        log1p_delta: use ``f = log1p`` instead of the identity.
        channels: number of independent learnable rates (hidden units, blocks or heads).

    The learnable rate is initialised deterministically, so enabling decay never changes
    the random initialisation of the mixer's other parameters.
    """

    def __init__(
        self, decay: str | None, decay_rate: float, log1p_delta: bool, channels: int
    ) -> None:
        super().__init__()
        self.decay_rate = check_decay(decay, decay_rate)
        self.mode = decay
        self.log1p_delta = bool(log1p_delta)
        self.channels = channels
        if decay == "learnable":
            self.rho = nn.Parameter(torch.full((channels,), inverse_softplus(self.decay_rate)))
        else:
            self.register_parameter("rho", None)

    @property
    def enabled(self) -> bool:
        return self.mode is not None

    def rate(self) -> torch.Tensor | float:
        """``λ``: a float (fixed) or a ``(channels,)`` tensor (learnable)."""
        return F.softplus(self.rho) if self.rho is not None else self.decay_rate

    def log_gamma(
        self, delta_t: torch.Tensor | None, batch: int, steps: int | None, like: torch.Tensor
    ) -> torch.Tensor | None:
        """``log γ`` for a sequence (``steps`` = T) or one step (``steps=None``).

        Returns ``None`` when decay is off, else ``(B, T, C)`` / ``(B, C)`` with ``C`` =
        ``channels`` (learnable) or 1 (fixed), in ``like``'s dtype and device.
        """
        where = "forward" if steps is not None else "step"
        if not self.enabled:
            if delta_t is not None:
                raise ValueError(
                    f"delta_t was given to {where}() but this mixer has decay=None; "
                    "construct it with decay='fixed' or 'learnable'"
                )
            return None
        if delta_t is None:
            raise ValueError(
                f"this mixer has decay={self.mode!r}, so {where}() needs delta_t "
                f"({'(B, T) or (B, T, 1)' if steps is not None else '(B,) or (B, 1)'})"
            )
        if steps is not None:
            shapes = [(batch, steps), (batch, steps, 1)]
            shape_txt = f"(B, T) or (B, T, 1) = ({batch}, {steps})"
        else:
            shapes = [(batch,), (batch, 1)]
            shape_txt = f"(B,) or (B, 1) = ({batch},)"
        if not isinstance(delta_t, torch.Tensor):
            raise TypeError(f"delta_t must be a torch.Tensor of shape {shape_txt}")
        if not shape_in(delta_t, shapes):
            raise ValueError(f"delta_t must have shape {shape_txt}; got {tuple(delta_t.shape)}")
        # Sanitize in at least fp32: the 1e10 cap would overflow fp16.
        work = torch.promote_types(like.dtype, torch.float32)
        dt = delta_t.to(device=like.device, dtype=work)
        dt = dt.reshape(batch, steps, 1) if steps is not None else dt.reshape(batch, 1)
        rate = self.rate()
        rate = rate.to(work) if isinstance(rate, torch.Tensor) else rate
        return (-(sanitize_delta_t(dt, self.log1p_delta) * rate)).to(like.dtype)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, decay_rate={self.decay_rate}, log1p_delta={self.log1p_delta}"


def check_sequence(
    x: object, input_size: int, name: str = "x", *, module: nn.Module | None = None
) -> torch.Tensor:
    """``x`` must be a floating ``(B, T, input_size)`` tensor with ``T ≥ 1`` (and of
    ``module``'s dtype, see :func:`check_input_dtype`)."""
    _validate.float_tensor(x, name, 3, shape=f"(B, T, {input_size})")
    if x.shape[-1] != input_size or x.shape[1] < 1 or x.shape[0] < 1:
        raise ValueError(f"{name} must have shape (B, T, {input_size}) with B, T ≥ 1; got {tuple(x.shape)}")
    if module is not None:
        check_input_dtype(x, module, name)
    return x


def check_token(
    x: object, input_size: int, name: str = "x_t", *, module: nn.Module | None = None
) -> torch.Tensor:
    """``x_t`` must be a floating ``(B, input_size)`` tensor (of ``module``'s dtype)."""
    _validate.float_tensor(x, name, 2, shape=f"(B, {input_size})")
    if x.shape[-1] != input_size:
        raise ValueError(f"{name} must have shape (B, {input_size}); got {tuple(x.shape)}")
    if module is not None:
        check_input_dtype(x, module, name)
    return x


def check_input_dtype(x: torch.Tensor, module: nn.Module, name: str = "x") -> None:
    """The input-dtype rule of every mixer, block and stack (the same in ``mingru_jax``).

    ``x`` must have the dtype of the module's parameters, unless a compute dtype is set for the
    call: inside ``torch.autocast`` (for ``x``'s device type) autocast decides, as it does for
    ``nn.Linear``. A mismatch is a ``TypeError`` naming ``x`` and the module dtype, never a
    silent cast (which would change precision behind the user's back) and never torch's
    ``mat1 and mat2 must have the same dtype``.
    """
    ref = next(module.parameters(), None) if torch.compiler.is_compiling() else (
        first_parameter(module))
    if ref is None or x.dtype == ref.dtype:
        return
    if torch.is_autocast_enabled(x.device.type):
        return
    raise TypeError(
        f"{name} has dtype {x.dtype}, but {type(module).__name__}'s parameters are "
        f"{ref.dtype}: cast the input ({name}.to({ref.dtype})) or the module "
        f"(module.to({x.dtype})), or run under torch.autocast"
    )


def first_parameter(module: nn.Module) -> nn.Parameter | None:
    """``next(module.parameters(), None)`` without the generator machinery (far less host
    time, on the path of every call): the module's own parameters first, then its
    children's, depth first, in registration order, as ``parameters()`` yields them."""
    for p in module._parameters.values():
        if p is not None:
            return p
    for child in module._modules.values():
        if child is not None and (p := first_parameter(child)) is not None:
            return p
    return None


def check_state(
    h: object, batch: int, size: int, *, name: str, sequence: bool, like: torch.Tensor
) -> torch.Tensor:
    """A state: ``(B, 1, size)`` for ``forward`` (``sequence=True``) or ``(B, size)`` for ``step``."""
    shape = (batch, 1, size) if sequence else (batch, size)
    txt = f"(B, 1, {size})" if sequence else f"(B, {size})"
    _validate.float_tensor(h, name, len(shape), shape=txt)
    if tuple(h.shape) != shape:
        raise ValueError(f"{name} must have shape {txt} = {shape}; got {tuple(h.shape)}")
    if h.device != like.device:
        raise ValueError(f"{name} must be on {like.device}; got {h.device}")
    return h.to(like.dtype)


def packed_offsets(
    cu_seqlens: torch.Tensor | None, x: torch.Tensor, sharded: bool = False
) -> tuple[torch.Tensor | None, int]:
    """The checked offsets of a packed call on ``x (1, T, ·)`` (or ``None``) and the number of
    states the call carries: ``N`` sequences when packed, else the batch size ``B``.
    ``sharded``: ``x`` is one rank's slice of the packed row (the offsets are the row's)."""
    if cu_seqlens is None:
        return None, x.shape[0]
    cu = check_cu_seqlens(cu_seqlens, x.shape[0], x.shape[1], device=x.device, sharded=sharded)
    return cu, cu.shape[0] - 1
