"""How values are typed across the manual axes of ``jax.shard_map`` (``check_vma=True``, the
default): each value is *varying* along the mesh axes where it may differ between devices, and
*invariant* along the others. JAX types its own primitives so; these helpers read the type and
widen it, for the sequence-parallel exchange (:mod:`mingru_jax._sharding`) and for the Triton
kernels' launches (:mod:`mingru_jax._launch._common`), which JAX types by their output shapes
only.

Example:
    >>> import jax, jax.numpy as jnp
    >>> varying_axes(jnp.ones(3))  # outside shard_map: no axis
    frozenset()
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["as_varying", "varying_axes"]


def varying_axes(*arrays: object) -> frozenset[str]:
    """The mesh axes along which any of ``arrays`` is typed varying (inside ``jax.shard_map``
    with ``check_vma=True``); empty elsewhere, and for what is not a jax array."""
    axes: frozenset[str] = frozenset()
    typeof = getattr(jax, "typeof", None)  # absent from jax versions without vma tracking
    for x in arrays:
        if typeof is not None and isinstance(x, jax.Array):
            aval = typeof(x)
            axis_type = getattr(aval, "manual_axis_type", None)
            axes |= frozenset(getattr(axis_type, "varying", None) or getattr(aval, "vma", None)
                              or ())
    return axes


def as_varying(x: Any, axes: frozenset[str]) -> Any:
    """``x`` typed varying along ``axes`` (its cotangent is summed over them, as for a value
    that JAX itself broadcasts into a varying computation); ``x`` itself when it already is,
    or is not a jax array.

    The Triton kernels' launches are typed by their output shapes only, so the launchers type
    their outputs varying along every axis any input varies along, and the arguments of their
    ``custom_vjp`` alike (:class:`mingru_jax._launch._common.custom_vjp`): the backward then
    returns cotangents typed like the arguments, as ``jax.custom_vjp`` requires."""
    if not axes or not isinstance(x, jax.Array):
        return x
    missing = tuple(sorted(axes - varying_axes(x)))
    return jax.lax.pcast(x, missing, to="varying") if missing else x
