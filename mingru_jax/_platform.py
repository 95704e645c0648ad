"""Where a JAX call runs: the platform the dispatch seam chooses a backend by and the launch
route (jax-triton on a GPU, Triton's interpreter on the host) is picked by.

One rule for both, so that the seam never hands a kernel to a route that cannot lower for the
platform the call runs on (jax-triton's kernel call has no CPU lowering: a CPU computation
traced with it fails to compile).
"""

from __future__ import annotations

from typing import Any

import jax

__all__ = ["platform_of"]

_GPU_NAMES = ("gpu", "cuda", "rocm")


def _normalised(name: str) -> str:
    return "gpu" if name in _GPU_NAMES else name


def platform_of(args: tuple[Any, ...] = ()) -> str:
    """``"gpu"``, ``"cpu"`` (etc.): where a call on ``args`` runs.

    The first committed array among ``args`` (placed by ``jax.device_put(x, device)``, or
    computed from one) tells by its device. Traced values carry no device, and uncommitted arrays follow the
    default device, so otherwise the call runs on the platform of, in this order: the mesh of
    the trace (inside ``jax.shard_map``, or set by ``jax.set_mesh``), the default device
    (``jax.default_device``, which jit keys its traces on), else jax's default backend. On a
    GPU machine, jit a CPU computation under ``jax.default_device(jax.devices("cpu")[0])`` (or
    over a CPU mesh) for its calls to run eager on the CPU.

    Example:
        >>> import jax, jax.numpy as jnp
        >>> with jax.default_device(jax.devices("cpu")[0]):
        ...     platform_of((jnp.ones(3),))
        'cpu'
    """
    for arg in args:
        if (isinstance(arg, jax.Array) and not isinstance(arg, jax.core.Tracer)
                and getattr(arg, "committed", True)):
            try:
                return _normalised(next(iter(arg.devices())).platform)
            except Exception:  # a deleted or abstract array: ask the context instead
                break
    get_mesh = getattr(jax.sharding, "get_abstract_mesh", None)  # absent from older jax
    device = getattr(get_mesh(), "abstract_device", None) if get_mesh is not None else None
    if device is not None:
        return _normalised(device.platform)
    default = getattr(jax.config, "jax_default_device", None)
    if default is not None:
        return _normalised(default if isinstance(default, str) else default.platform)
    return _normalised(jax.default_backend())
