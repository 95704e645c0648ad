"""The specialisation rule the jax-triton route compiles our kernels with: PyTorch's.

jax-triton's own compile (``jax_triton.triton_lib.get_or_create_triton_kernel``) specialises
launch arguments otherwise than ``JITFunction.run``, the route PyTorch takes:

* **Runtime integer arguments get no divisibility hint.** jax-triton marks every *array* as
  16-byte aligned but no scalar, so no int argument is ever compiled as divisible by 16.
  PyTorch's launcher marks every int argument that is a multiple of 16 and not in
  ``do_not_specialize``. Without it the ``row * D + col`` addresses of a ``(B, T, D)`` tile
  are not provably 16-byte aligned, and Triton emits 32-bit loads and stores instead of 128-bit
  ones (``ld.global.v4``) on the bandwidth-bound scans.
* **``do_not_specialize`` is ignored**; instead every scalar equal to 1 becomes a constexpr and
  jax-triton's lowering drops that parameter from the launch. That part is kept (the lowering
  depends on it): ``T == 1`` compiles its own variant, as PyTorch's ``== 1`` rule would for a
  specialised argument. A size that is 1 in the common case must therefore not reach an adapter
  as 1: the elementwise scans' adapters take ``n_chunks + 1``
  (:func:`mingru_jax._launch._elementwise.dims`).

:func:`scalar_tag` is that rule, pure Python. The compile that applies it replaces a private
function of jax-triton, so it lives in :mod:`mingru_jax._compat` (the hook
``"jax_triton_compile"``); this module keeps the rule and a recorder of what each trace
launches (:func:`recorded_variants`), so CPU tests can check that every ``T`` of a shape class
shares one compiled variant.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["note", "recorded_variants", "scalar_tag", "scalar_tags", "unspecialised",
           "variant_key"]

_recorders: list[set] = []


def unspecialised(kernel: Any) -> frozenset[str]:
    """The names in ``kernel``'s ``do_not_specialize`` (a JITFunction, or the interpreter's
    InterpretedFunction, which keeps the decorator's keywords)."""
    names = list(kernel.arg_names)
    raw = getattr(kernel, "do_not_specialize", None)
    if raw is None:
        raw = getattr(kernel, "kwargs", {}).get("do_not_specialize")
    return frozenset(names[x] if isinstance(x, int) else str(x) for x in raw or ())


def scalar_tag(kernel: Any, index: int, value: Any) -> str:
    """How the GPU route compiles runtime argument ``index`` of ``kernel`` with ``value``:
    ``"1"`` (a constexpr 1: jax-triton's lowering always drops such a parameter), ``"D"`` (an
    int divisible by 16, specialised as PyTorch's launcher does), ``""`` (plain)."""
    if value is None:
        return "None"
    if value == 1:
        return "1"
    if (isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0
            and kernel.arg_names[index] not in unspecialised(kernel)):
        return "D"
    return ""


def scalar_tags(kernel: Any, first: int, scalars: Sequence[Any]) -> tuple[str, ...]:
    """:func:`scalar_tag` of each of ``scalars``, the runtime arguments at ``first``, …"""
    return tuple(scalar_tag(kernel, first + i, v) for i, v in enumerate(scalars))


def variant_key(kernel: Any, inputs: Sequence[Any], outputs: Sequence[Any],
                *, scalars: Sequence[Any], meta: dict[str, Any]) -> tuple:
    """What one compiled variant of ``kernel`` is keyed on (device aside): its name, the
    array dtypes, the scalars' tags and the constexprs / options."""
    fn = getattr(kernel, "fn", kernel)
    return (f"{fn.__module__}.{fn.__qualname__}",
            tuple(str(x.dtype) for x in inputs), tuple(str(o.dtype) for o in outputs),
            scalar_tags(kernel, len(inputs), scalars),
            tuple(sorted((k, repr(v)) for k, v in meta.items())))


@contextlib.contextmanager
def recorded_variants() -> Iterator[set]:
    """Collect the :func:`variant_key` of every launch traced inside the block (both routes)."""
    seen: set = set()
    _recorders.append(seen)
    try:
        yield seen
    finally:
        _recorders.remove(seen)


def note(kernel: Any, inputs: Sequence[Any], outputs: Sequence[Any],
         *, scalars: Sequence[Any], meta: dict[str, Any]) -> None:
    """Record a launch with every active :func:`recorded_variants`."""
    if _recorders:
        key = variant_key(kernel, inputs, outputs, scalars=scalars, meta=meta)
        for seen in _recorders:
            seen.add(key)
