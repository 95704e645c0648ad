"""Framework-free rules of the mixer/block/stack API, shared by ``mingru`` and ``mingru_jax``.

The two frontends mirror each other on purpose (tensor code stays in each), but argument
checks, the mixer registry and the stack's per-layer resolution touch no tensors, so they live
here once. This module must import neither torch, jax nor triton: ``mingru_jax`` imports it
without pulling in PyTorch.

Example:
    >>> from mingru_kernels import _spec
    >>> _spec.check_givens(16, block_size=4, rounds=2)
    4
    >>> _spec.stack_layer_specs(["signed", "givens"], {"givens": {"decay": "fixed"}}, 2, "all")
    [('signed', {}), ('givens', {'decay': 'fixed'})]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, NamedTuple

from mingru_kernels._checks import shape_in

__all__ = [
    "DECAY_KWARGS",
    "DECAY_MODES",
    "KEY_NORM_EPS",
    "MAX_GAP",
    "MIXER_CLASSES",
    "TAKES_LEARNABLE_H0",
    "DeltaSizes",
    "block_mixer_kwargs",
    "check_block_args",
    "check_decay",
    "check_delta_rule_shapes",
    "check_delta",
    "check_flag",
    "check_givens",
    "check_mixer_expansion",
    "check_mixer_name",
    "check_rotation_hidden",
    "check_size",
    "check_snap",
    "check_stack_state",
    "inverse_softplus",
    "layer_gaps",
    "layer_specs",
    "mixer_registry",
    "positive_int",
    "snap_per_block",
    "stack_layer_specs",
]

# Mixer name -> class name; each frontend defines the class in ``<package>.mixers.<name>``.
MIXER_CLASSES: dict[str, str] = {
    "log": "MinGRU",
    "signed": "SignedMinGRU",
    "rotation": "RotationMinGRU",
    "givens": "GivensMinGRU",
    "delta": "DeltaMinGRU",
}
TAKES_LEARNABLE_H0 = frozenset({"log", "signed"})
DECAY_KWARGS = ("decay", "decay_rate", "log1p_delta")
DECAY_MODES = (None, "fixed", "learnable")
# Δt sanitizing caps +inf (and anything larger) at this gap.
MAX_GAP = 1e10
# Delta-rule keys are k / max(‖k‖₂, eps); one eps for both frontends so numbers carry across.
KEY_NORM_EPS = 1e-6


def mixer_registry(package: str) -> dict[str, tuple[str, str]]:
    """``name -> (module, class)`` for the frontend ``package`` (``"mingru"``/``"mingru_jax"``)."""
    return {name: (f"{package}.mixers.{name}", cls) for name, cls in MIXER_CLASSES.items()}


def check_mixer_name(name: object, what: str = "mixer") -> str:
    """``name`` must be a registered mixer name; returns it."""
    if not isinstance(name, str) or name not in MIXER_CLASSES:
        raise ValueError(
            f"{what} must be one of {', '.join(map(repr, MIXER_CLASSES))}; got {name!r}"
        )
    return name


def check_size(value: object, name: str) -> int:
    """``value`` must be a positive ``int`` (not a bool); returns it."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive int; got {value!r}")
    return value


def positive_int(value: object, name: str) -> int:
    """As :func:`check_size`, with the delta mixer's wording (``an int >= 1``)."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be an int >= 1; got {value!r}")
    return value


def check_flag(value: object, name: str) -> bool:
    """``value`` must be a ``bool`` (``1`` or ``"yes"`` are refused); returns it."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool; got {value!r}")
    return value


def inverse_softplus(y: float) -> float:
    """``ρ`` with ``softplus(ρ) = y`` (``y > 0``)."""
    return y + math.log(-math.expm1(-y))


def check_decay(decay: object, decay_rate: object) -> float:
    """Check the time-decay arguments; returns ``float(decay_rate)`` (a bool is not a rate)."""
    if decay not in DECAY_MODES:
        raise ValueError(f"decay must be None, 'fixed' or 'learnable'; got {decay!r}")
    ok = isinstance(decay_rate, (int, float)) and not isinstance(decay_rate, bool)
    if not (ok and math.isfinite(decay_rate) and decay_rate > 0):
        raise ValueError(f"decay_rate must be a finite number > 0; got {decay_rate!r}")
    return float(decay_rate)


# -- per-mixer constructor checks ---------------------------------------------------------


def check_rotation_hidden(hidden_size: int) -> int:
    """RotationMinGRU's 2×2 blocks need an even ``hidden_size``; returns the block count."""
    if hidden_size % 2:
        raise ValueError(f"hidden_size must be even for RotationMinGRU; got {hidden_size}")
    return hidden_size // 2


def check_snap(snap: object) -> tuple[int, ...] | None:
    """``None`` or a non-empty sequence of ints ≥ 1, returned as a tuple."""
    if snap is None:
        return None
    bad = not isinstance(snap, Sequence) or isinstance(snap, str) or len(snap) == 0
    if not bad:
        bad = any(isinstance(K, bool) or not isinstance(K, int) or K < 1 for K in snap)
    if bad:
        raise ValueError(f"snap must be None or a non-empty sequence of ints ≥ 1; got {snap!r}")
    return tuple(snap)


def snap_per_block(snap: tuple[int, ...], n_blocks: int) -> list[int]:
    """``K_j = snap[j % len(snap)]`` for each of the ``n_blocks`` rotation blocks."""
    return [snap[j % len(snap)] for j in range(n_blocks)]


def check_givens(hidden_size: int, block_size: object, rounds: object) -> int:
    """Check GivensMinGRU's ``block_size`` (even, ≥ 2, divides ``hidden_size``) and ``rounds``
    (≥ 1); returns the block count ``hidden_size // block_size``."""
    if (
        isinstance(block_size, bool)
        or not isinstance(block_size, int)
        or block_size < 2
        or block_size % 2
        or hidden_size % block_size
    ):
        raise ValueError(
            f"block_size must be an even int ≥ 2 that divides hidden_size={hidden_size}; "
            f"got {block_size!r}"
        )
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"rounds must be an int ≥ 1; got {rounds!r}")
    return hidden_size // block_size


class DeltaSizes(NamedTuple):
    """DeltaMinGRU's checked sizes; ``state_size = n_heads · d_k · d_v``."""

    input_size: int
    hidden_size: int
    n_heads: int
    nh: int
    d_k: int
    d_v: int
    chunk_size: int

    @property
    def state_size(self) -> int:
        return self.n_heads * self.d_k * self.d_v


def check_delta(
    input_size: object,
    hidden_size: object,
    n_heads: object,
    nh: object,
    d_k: object,
    d_v: object,
    chunk_size: object,
) -> DeltaSizes:
    """Check DeltaMinGRU's sizes; ``d_k`` defaults to ``hidden_size / n_heads`` (which must
    divide then) and ``d_v`` to ``d_k``."""
    input_size = positive_int(input_size, "input_size")
    hidden_size = positive_int(hidden_size, "hidden_size")
    n_heads = positive_int(n_heads, "n_heads")
    nh = positive_int(nh, "nh")
    chunk_size = positive_int(chunk_size, "chunk_size")
    if d_k is None:
        if hidden_size % n_heads != 0:
            raise ValueError(
                f"n_heads ({n_heads}) must divide hidden_size ({hidden_size}) when d_k "
                "is not given; pass d_k (and optionally d_v) explicitly"
            )
        d_k = hidden_size // n_heads
    d_k = positive_int(d_k, "d_k")
    d_v = d_k if d_v is None else positive_int(d_v, "d_v")
    return DeltaSizes(input_size, hidden_size, n_heads, nh=nh, d_k=d_k, d_v=d_v,
                      chunk_size=chunk_size)


# -- the delta-rule op ---------------------------------------------------------------------


def _shape_error(name: str, x: Any, expected: str, *, op: str = "delta_rule") -> ValueError:
    return ValueError(f"{op}: {name} must have shape {expected}; got {tuple(x.shape)}")


def check_cell_shapes(k: Any, n_gates: int, initial_state: Any = None,
                      *, log_gamma: Any = None) -> int:
    """The state width ``D`` of a fused cell's pre-activations ``k (B, T, n_gates·D)``; raise
    ``ValueError`` naming the argument whose shape does not fit. Reads ``.shape`` only: both
    frontends' ``cells`` call it (after their dtype checks)."""
    shape = f"(B, T, {n_gates}·D)"
    if len(k.shape) != 3:
        raise _shape_error("k", k, shape, op="mingru_cell")
    B, T, S = tuple(k.shape)
    if T < 1 or B < 1:
        raise ValueError(f"k must have shape {shape} with at least one time step (dim 1) and "
                         f"B ≥ 1; got {tuple(k.shape)}")
    if S % n_gates or S == 0:
        raise ValueError(f"k must have shape {shape}: its last dim {S} is not a positive "
                         f"multiple of {n_gates} (the gates side by side)")
    D = S // n_gates
    if initial_state is not None and tuple(initial_state.shape) != (B, D):
        raise _shape_error("initial_state", initial_state, f"(B, D) = {(B, D)}", op="mingru_cell")
    if log_gamma is not None and not shape_in(log_gamma, ((B, T, D), (B, T, 1))):
        raise _shape_error("log_gamma", log_gamma, f"(B, T, D) = {(B, T, D)} or (B, T, 1)",
                           op="mingru_cell")
    return D


def check_delta_rule_shapes(q: Any, k: Any, v: Any, *, beta: Any, log_gamma: Any = None,
                            h0: Any = None) -> None:
    """Raise ``ValueError`` naming the argument whose shape does not fit ``k (B, T, nh, H,
    d_k)``. Reads ``.shape`` only: both frontends' ``scans._delta_rule`` call it."""
    if len(k.shape) != 5:
        raise _shape_error("k", k, "(B, T, nh, H, d_k)")
    B, T, nh, H, dk = tuple(k.shape)
    if tuple(q.shape) != (B, T, H, dk):
        raise _shape_error("q", q, f"(B, T, H, d_k) = {(B, T, H, dk)}")
    if len(v.shape) != 5 or tuple(v.shape[:4]) != (B, T, nh, H):
        raise _shape_error("v", v, f"(B, T, nh, H, d_v) with (B, T, nh, H) = {(B, T, nh, H)}")
    dv = v.shape[4]
    if tuple(beta.shape) != (B, T, nh, H):
        raise _shape_error("beta", beta, f"(B, T, nh, H) = {(B, T, nh, H)}")
    if log_gamma is not None and tuple(log_gamma.shape) != (B, T, H):
        raise _shape_error("log_gamma", log_gamma, f"(B, T, H) = {(B, T, H)}")
    if h0 is not None and tuple(h0.shape) != (B, H, dk, dv):
        raise _shape_error("h0", h0, f"(B, H, d_k, d_v) = {(B, H, dk, dv)}")


# -- block and stack ----------------------------------------------------------------------


def check_block_args(mlp_expansion: object, dropout: object) -> None:
    """A block's ``mlp_expansion`` (int ≥ 0) and ``dropout`` (in ``[0, 1)``)."""
    if isinstance(mlp_expansion, bool) or not isinstance(mlp_expansion, int) or mlp_expansion < 0:
        raise ValueError(f"mlp_expansion must be an int ≥ 0; got {mlp_expansion!r}")
    if not isinstance(dropout, (int, float)) or not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be a number in [0, 1); got {dropout!r}")


def check_mixer_expansion(mixer_expansion: object, mixers: str | Sequence[str]) -> int:
    """A block's ``mixer_expansion`` (an int ≥ 1; a bool is refused) for the mixer names
    ``mixers`` (one name, or every layer's); returns it.

    With ``e = mixer_expansion > 1`` the block builds its mixer as ``mixer(d_model, e·d_model)``
    and projects its output back with ``out_proj = Linear(e·d_model, d_model)``. For the
    state-output mixers (``"log"``, ``"signed"``, ``"rotation"``, ``"givens"``) that widens the
    state to ``e·d_model`` (``"rotation"`` needs it even, ``"givens"`` a ``block_size`` that
    divides it: their own checks name ``hidden_size``). ``"delta"`` is refused: its state is
    ``n_heads·d_k·d_v``, not its output, and it projects its output itself, so a second
    projection would add parameters without widening the state (``d_k``, ``d_v`` and
    ``n_heads`` in ``mixer_kwargs`` do that)."""
    if (isinstance(mixer_expansion, bool) or not isinstance(mixer_expansion, int)
            or mixer_expansion < 1):
        raise ValueError(f"mixer_expansion must be an int ≥ 1; got {mixer_expansion!r}")
    names = [mixers] if isinstance(mixers, str) else list(mixers)
    if mixer_expansion > 1 and "delta" in names:
        raise ValueError(
            f"mixer_expansion={mixer_expansion} does not apply to the 'delta' mixer: its state "
            "is n_heads·d_k·d_v and it projects its output back to d_model itself; widen its "
            "state with mixer_kwargs d_k, d_v or n_heads and keep mixer_expansion=1"
        )
    return mixer_expansion


def block_mixer_kwargs(
    mixer: object,
    mixer_kwargs: object,
    learnable_h0: bool,
    *,
    reserved: Sequence[str],
    own_args: str,
) -> tuple[str, dict[str, Any]]:
    """``(mixer name, mixer kwargs)`` of a block.

    ``reserved`` are the keys the block sets itself (they may not appear in ``mixer_kwargs``);
    ``own_args`` names, for the error message, those the block takes as its own arguments.
    ``learnable_h0`` is added for the mixers that take it.
    """
    name = check_mixer_name(mixer)
    if not isinstance(mixer_kwargs, (dict, type(None))):
        raise ValueError(f"mixer_kwargs must be a dict or None; got {type(mixer_kwargs).__name__}")
    kwargs = dict(mixer_kwargs or {})
    clash = [key for key in reserved if key in kwargs]
    if clash:
        raise ValueError(
            f"mixer_kwargs must not contain {clash}: the block sets input_size to "
            f"d_model and hidden_size to mixer_expansion·d_model and takes {own_args}"
        )
    if name in TAKES_LEARNABLE_H0:
        kwargs["learnable_h0"] = learnable_h0
    return name, kwargs


def layer_specs(
    mixer: str | Sequence[str], mixer_kwargs: dict[str, Any] | None, n_layers: int
) -> list[tuple[str, dict[str, Any]]]:
    """``(name, kwargs)`` per layer from the two accepted forms of ``mixer``/``mixer_kwargs``."""
    if mixer_kwargs is not None and not isinstance(mixer_kwargs, dict):
        raise ValueError(f"mixer_kwargs must be a dict or None; got {type(mixer_kwargs).__name__}")
    kwargs = dict(mixer_kwargs or {})
    if isinstance(mixer, str):
        return [(check_mixer_name(mixer), dict(kwargs)) for _ in range(n_layers)]
    if not isinstance(mixer, Sequence) or len(mixer) != n_layers:
        raise ValueError(
            f"mixer must be a mixer name or a list of n_layers={n_layers} names; got {mixer!r}"
        )
    names = [check_mixer_name(name, f"mixer[{i}]") for i, name in enumerate(mixer)]
    for key, value in kwargs.items():
        if key not in names:
            raise ValueError(
                f"with a list of mixers, mixer_kwargs is keyed by mixer name (one of "
                f"{sorted(set(names))}); got key {key!r}"
            )
        if not isinstance(value, dict):
            raise ValueError(f"mixer_kwargs[{key!r}] must be a dict of that mixer's arguments")
    return [(name, dict(kwargs.get(name, {}))) for name in names]


def stack_layer_specs(
    mixer: str | Sequence[str],
    mixer_kwargs: dict[str, Any] | None,
    n_layers: int,
    decay_layers: str,
) -> list[tuple[str, dict[str, Any]]]:
    """:func:`layer_specs` with ``decay_layers`` applied: ``"all"`` keeps the decay arguments
    on every layer, ``"last"`` strips them from all but the last layer."""
    if decay_layers not in ("all", "last"):
        raise ValueError(f"decay_layers must be 'all' or 'last'; got {decay_layers!r}")
    specs = layer_specs(mixer, mixer_kwargs, n_layers)
    if decay_layers == "last":
        for _, kwargs in specs[:-1]:
            for key in DECAY_KWARGS:
                kwargs.pop(key, None)
    return specs


def check_stack_state(state: object, n_layers: int) -> list[Any]:
    """A stack state: ``None`` (→ ``[None] * n_layers``) or a list of ``n_layers`` entries."""
    if state is None:
        return [None] * n_layers
    if not isinstance(state, Sequence) or len(state) != n_layers:
        raise ValueError(f"state must be None or a list of n_layers={n_layers} per-layer states")
    return list(state)


def layer_gaps(delta_t: Any, decayed: Sequence[bool]) -> list[Any]:
    """``delta_t`` for each layer with decay, ``None`` for the others."""
    if delta_t is not None and not any(decayed):
        raise ValueError(
            "delta_t was given but no layer has decay; pass mixer_kwargs={'decay': ...}"
        )
    return [delta_t if on else None for on in decayed]


def check_cu_seqlens_values(offsets: Sequence[int], steps: int,
                            name: str = "cu_seqlens") -> None:
    """Packed-sequence offsets ``(N+1,)`` (FlashAttention convention) must start at 0, never
    decrease and end at ``T = steps``; raise ``ValueError`` naming ``name`` otherwise. Both
    frontends call it with the offsets as Python ints (when they are concrete)."""
    offsets = [int(o) for o in offsets]
    if offsets[0] != 0:
        raise ValueError(f"{name} must start at 0; got {name}[0] = {offsets[0]}")
    if offsets[-1] != steps:
        raise ValueError(f"{name} must end at T = {steps} (the packed length); got "
                         f"{name}[-1] = {offsets[-1]}")
    for i, (lo, hi) in enumerate(zip(offsets, offsets[1:], strict=False)):
        if hi < lo:
            raise ValueError(f"{name} must be non-decreasing; got {name}[{i}] = {lo} > "
                             f"{name}[{i + 1}] = {hi}")


def check_packed_state(state: Any, n_seq: int, trailing: tuple[int, ...], *, name: str) -> None:
    """A packed call's per-sequence state must be ``(N, *trailing)``; reads ``.shape`` only."""
    expected = (n_seq, *trailing)
    if state is not None and tuple(state.shape) != expected:
        txt = ", ".join(["N", *map(str, trailing)])
        raise ValueError(f"{name} must have shape ({txt}) = {expected} with cu_seqlens (one "
                         f"entry per sequence); got {tuple(state.shape)}")
