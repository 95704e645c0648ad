"""One kernel op, two ways in: a ``torch.library`` custom op for ``torch.compile`` and a
``torch.autograd.Function`` over the same implementation for eager calls.

Why two. ``torch.compile(fullgraph=True)`` needs the custom op (an opaque graph node with a fake
implementation). In eager PyTorch, though, a ``torch.library.custom_op`` with autograd costs
far more host time per call than the kernels take at small shapes, most of it in the
custom-op dispatch. The eager path therefore calls the implementation through an
``autograd.Function``; both paths run the same ``forward``, ``setup_context`` and backward
formula, so they cannot disagree.

Each launcher writes its backward formula as ``formula(ctx, *grads, bwd=<bwd custom op>)``:
the custom op's autograd registration (made by :func:`dual_entry`) calls it with the default
(the op, traced under compile), and the eager ``Function`` passes the backward implementation
directly.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["dual_entry"]


def dual_entry(
    name: str,
    op: Callable[..., Any],
    forward: Callable[..., Any],
    *,
    setup_context: Callable[[Any, tuple[Any, ...], Any], None],
    formula: Callable[..., Any],
    bwd_impl: Callable[..., Any],
) -> Callable[..., Any]:
    """``call(*args)``: the custom ``op`` while ``torch.compile`` traces, else an
    ``autograd.Function`` running ``forward`` and ``formula(ctx, *grads, bwd=bwd_impl)`` —
    or ``forward`` itself when no argument needs a gradient.

    ``forward`` is the op's implementation (positional arguments only). ``setup_context`` and
    ``formula`` are registered here with ``op.register_autograd`` too, so the two entries
    share them by construction.
    """
    op.register_autograd(formula, setup_context=setup_context)

    def fn_forward(ctx: Any, *args: Any) -> Any:
        out = forward(*args)
        setup_context(ctx, args, out)
        return out

    def fn_backward(ctx: Any, *grads: Any) -> Any:
        return formula(ctx, *grads, bwd=bwd_impl)

    fn = type(name, (torch.autograd.Function,), {
        "forward": staticmethod(fn_forward),
        "backward": staticmethod(fn_backward),
    })

    def call(*args: Any) -> Any:
        if torch.compiler.is_compiling():
            return op(*args)
        if torch.is_grad_enabled() and any(
                isinstance(arg, torch.Tensor) and arg.requires_grad for arg in args):
            return fn.apply(*args)
        # Nothing to differentiate (no_grad, inference, constant inputs): the Function's
        # graph bookkeeping would be pure host time.
        return forward(*args)

    call.__name__ = name
    call.__doc__ = f"{name}: the custom op under torch.compile, an autograd.Function in eager mode."
    return call
