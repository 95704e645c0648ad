"""Fixtures of the CLI tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def backward_thread_modes(monkeypatch) -> list[bool]:
    """Every mode passed to ``torch.autograd.set_multithreading_enabled`` while the test runs
    (``False``: the backward on the calling thread), in call order."""
    import torch  # here, not at import: the CLI's own tests must not need torch to be collected

    real, modes = torch.autograd.set_multithreading_enabled, []

    def recording(mode):
        modes.append(mode)
        return real(mode)

    monkeypatch.setattr(torch.autograd, "set_multithreading_enabled", recording)
    return modes
