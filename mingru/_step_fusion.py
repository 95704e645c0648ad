"""What a captured decode step does differently from a plain step, while a
:class:`StepFusion` is entered (``MinGRULM.generate`` enters one around its CUDA graph's
warm-up and capture; nothing runs Python at replay):

* the mixers' projections read weights joined once (:meth:`StepFusion.joined`), where
  :func:`mingru.mixers._common.project` otherwise concatenates them at every call: a copy of
  the weights per layer and token, captured into the graph;
* the blocks' residual adds and LayerNorms run as the fused Triton kernels at every size
  (``auto`` keeps PyTorch's norm below 2^24 elements for its smaller host time, which a replayed
  graph does not spend);
* float32 GEMMs of 16 to 128 rows (the projections, the MLPs and the head) run on the
  ``linear`` Triton kernels (:func:`mingru.mixers._common.fused_linear`), GELU included;
  their split reductions share one counter buffer per device (:meth:`StepFusion.counters`),
  which the kernels leave at zero, where a plain call zeroes a fresh one per GEMM.

The joined weights are copies: :meth:`StepFusion.refresh` brings them up to date, and the
caller runs it before each series of replays (weights may have changed in between).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar, Token
from types import TracebackType

import torch
from torch import nn

__all__ = ["StepFusion", "active", "join"]

# The innermost StepFusion entered in this context (thread, asyncio task): a decode in one
# thread never changes what another thread's forward runs.
_active: ContextVar[StepFusion | None] = ContextVar("mingru_step_fusion", default=None)


def active() -> StepFusion | None:
    """The :class:`StepFusion` entered now in this thread, or ``None`` (always ``None`` while
    ``torch.compile`` traces, which cannot read a context variable)."""
    if torch.compiler.is_compiling():
        return None
    return _active.get()


def join(layers: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The layers' weights (and biases, if the first has one) concatenated along the outputs."""
    weight = torch.cat([layer.weight for layer in layers])
    bias = None if layers[0].bias is None else torch.cat([layer.bias for layer in layers])
    return weight, bias


class StepFusion:
    """A context for capturing a decode step (see the module's docstring).

    Example:
        >>> import torch
        >>> from torch import nn
        >>> from mingru.mixers._common import project
        >>> a, b = nn.Linear(4, 3), nn.Linear(4, 2)
        >>> fusion, x = StepFusion(), torch.randn(2, 4)
        >>> with fusion, torch.no_grad():
        ...     y = project(x, a, b)  # joins the weights once, here
        ...     _ = a.weight.fill_(0.0)
        ...     stale = project(x, a, b)  # reads the joined copy
        ...     fusion.refresh()
        ...     fresh = project(x, a, b)
        >>> torch.equal(stale, y), torch.equal(fresh[:, :3], a.bias.expand(2, 3))
        (True, True)
    """

    def __init__(self) -> None:
        self._joined: dict[tuple[int, ...], tuple[tuple[nn.Linear, ...], torch.Tensor,
                                                  torch.Tensor | None]] = {}
        self._tokens: list[Token] = []
        self._counters: dict[torch.device, torch.Tensor] = {}
        self._outgrown: list[torch.Tensor] = []

    def __enter__(self) -> StepFusion:
        self._tokens.append(_active.set(self))
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        _active.reset(self._tokens.pop())

    def joined(self, layers: Sequence[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The joined weight and bias of ``layers``: made on first use, then the same tensors
        (a graph captured after the first use reads them where they are)."""
        key = tuple(id(layer) for layer in layers)
        entry = self._joined.get(key)
        if entry is None:
            # The layers stay referenced, so their ids keep naming them.
            with torch.no_grad():
                entry = (tuple(layers), *join(layers))
            self._joined[key] = entry
        return entry[1], entry[2]

    def counters(self, device: torch.device, size: int) -> torch.Tensor:
        """At least ``size`` int32 zeros on ``device``, the same buffer at every call while it is
        large enough. The ``linear`` kernels count their slices in it and leave it at zero, so
        the GEMMs of a step (run one after another on one stream) can share it."""
        buffer = self._counters.get(device)
        if buffer is None or buffer.numel() < size:
            # Made during the warm-up, which runs the captured shapes first. A buffer outgrown
            # later stays alive: a graph captured on it keeps its address.
            if buffer is not None:
                self._outgrown.append(buffer)
            buffer = torch.zeros(max(size, 1024), dtype=torch.int32, device=device)
            self._counters[device] = buffer
        return buffer

    def refresh(self) -> None:
        """Copy the layers' current weights into the joined tensors."""
        with torch.no_grad():
            for layers, weight, bias in self._joined.values():
                torch.cat([layer.weight for layer in layers], out=weight)
                if bias is not None:
                    torch.cat([layer.bias for layer in layers], out=bias)
