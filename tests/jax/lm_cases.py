"""The language-model cases the JAX and cross-framework LM tests share (framework-free): tiny
valid sizes, one case per mixer, two layers so the per-layer state lists are exercised."""

from __future__ import annotations

from typing import Any

VOCAB, D_MODEL, N_LAYERS, MLP = 37, 8, 2, 2
MIXERS = ("log", "signed", "rotation", "givens", "delta")
# learnable_h0 is taken by "log" and "signed" only (the others always learn h0).
LM_KWARGS: dict[str, dict[str, Any]] = {
    "log": dict(learnable_h0=True),
    "signed": dict(learnable_h0=True, mixer_kwargs={"coupled": True}),
    "rotation": dict(mixer_kwargs={"snap": (2, 3)}),
    "givens": dict(mixer_kwargs={"block_size": 4, "rounds": 2}),
    "delta": dict(mixer_kwargs={"n_heads": 2, "nh": 2, "chunk_size": 4}),
}


# Cases with the mixer state widened to mixer_expansion · d_model: name -> (mixer, expansion).
EXPANDED: dict[str, tuple[str, int]] = {"log-x3": ("log", 3), "givens-x3": ("givens", 3)}


def lm_args(case: str, **extra: Any) -> tuple[tuple[int, int, int], dict[str, Any]]:
    """``(args, kwargs)`` of ``MinGRULM`` for ``case``, a mixer name or a name of
    :data:`EXPANDED` (either frontend)."""
    mixer, expansion = EXPANDED.get(case, (case, 1))
    kwargs = {"mixer": mixer, "mlp_expansion": MLP, "mixer_expansion": expansion,
              **LM_KWARGS[mixer], **extra}
    return (VOCAB, D_MODEL, N_LAYERS), kwargs
