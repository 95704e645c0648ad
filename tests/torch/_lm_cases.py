"""Tiny language models of every mixer, shared by the LM and generation tests."""

from __future__ import annotations

import torch

from mingru import MinGRULM

VOCAB, D_MODEL = 37, 16
# mixer -> the mixer_kwargs that make it valid (and fast) at d_model = 16.
MIXER_KWARGS: dict[str, dict] = {
    "log": {},
    "signed": {},
    "rotation": {},
    "givens": {"block_size": 4, "rounds": 2},
    "delta": {"n_heads": 2, "chunk_size": 4},
}
MIXERS = list(MIXER_KWARGS)
# (mixer, mixer_expansion): every mixer as it is, and the state-output mixers with a state
# 3·d_model wide ("delta" takes no expansion).
EXPANSIONS = [(name, 1) for name in MIXERS] + [(name, 3) for name in MIXERS if name != "delta"]


def make_model(mixer: str, *, n_layers: int = 2, seed: int = 0, **kwargs) -> MinGRULM:
    """A model of ``mixer`` with random weights (learned ``h0`` included, so a default that
    ignored it would show)."""
    torch.manual_seed(seed)
    model = MinGRULM(VOCAB, D_MODEL, n_layers, mixer=mixer, mixer_kwargs=MIXER_KWARGS[mixer],
                     **kwargs)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("h0"):
                param.normal_(0.0, 0.5)
    return model


def tokens(batch: int, steps: int, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, steps), generator=torch.Generator().manual_seed(seed))
