"""Weight conversion between a PyTorch module (:mod:`mingru`) and its Flax NNX twin.

Both frontends use the same attribute names (``linear_z``, ``blocks.0.mixer.linear_k.1``,
``decay.rho``, ``h0``, ...), so a parameter's path is the same on both sides except for the
layout of two layer types:

===========================  ======================================
PyTorch                      Flax NNX
===========================  ======================================
``nn.Linear.weight (o, i)``  ``nnx.Linear.kernel (i, o)`` (transposed)
``nn.Linear.bias``           ``nnx.Linear.bias``
``nn.LayerNorm.weight``      ``nnx.LayerNorm.scale``
``nn.LayerNorm.bias``        ``nnx.LayerNorm.bias``
``nn.Sequential[i]``         ``nnx.Sequential.layers[i]``
anything else (``h0``,       the same name
``decay.rho``)
===========================  ======================================

Every parameter on each side must be matched (none missing, none left over, equal shapes),
and the architecture settings that change the numbers (sizes, ``snap``, ``rounds``,
``block_size``, heads, decay mode, ...) must agree; otherwise a :class:`ValueError` says
where. Values are copied exactly (float32 ↔ float32 round-trips bit for bit); each side keeps
its own parameter dtype. This module imports ``torch`` (only when used).

Example:
    >>> import torch, jax.numpy as jnp, numpy as np
    >>> from flax import nnx
    >>> import mingru, mingru_jax
    >>> pt = mingru.MinGRUStack(3, 8, 2, mixer=["signed", "givens"],
    ...                         mixer_kwargs={"givens": {"block_size": 4}})
    >>> fx = mingru_jax.MinGRUStack(3, 8, 2, mixer=["signed", "givens"],
    ...                             mixer_kwargs={"givens": {"block_size": 4}}, rngs=nnx.Rngs(0))
    >>> fx = mingru_jax.torch_to_nnx(pt, fx)          # PyTorch -> Flax
    >>> x = np.random.default_rng(0).standard_normal((2, 5, 3)).astype(np.float32)
    >>> y_fx, _ = fx(jnp.asarray(x))
    >>> y_pt, _ = pt(torch.from_numpy(x))
    >>> bool(np.allclose(np.asarray(y_fx), y_pt.detach().numpy(), atol=1e-5))
    True
    >>> pt = mingru_jax.nnx_to_torch(fx, pt)          # Flax -> PyTorch
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["nnx_to_torch", "torch_to_nnx"]

# Constructor settings that change the numbers; compared wherever both modules have them.
_CONFIG_ATTRS = (
    "input_size",
    "hidden_size",
    "d_model",
    "n_layers",
    "coupled",
    "snap",
    "block_size",
    "rounds",
    "n_blocks",
    "n_heads",
    "nh",
    "d_k",
    "d_v",
    "mixer_name",
    "mode",
    "decay_rate",
    "log1p_delta",
    "channels",
)


def _torch_kind(module: Any) -> str:
    from torch import nn

    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.LayerNorm):
        return "layernorm"
    return "other"


def _dotted(path: tuple) -> str:
    return ".".join(map(str, path))


def _nnx_child(node: Any, part: str, path: tuple) -> tuple[Any, tuple]:
    """Step from an NNX node to the child that the torch path component ``part`` names."""
    if isinstance(node, nnx.Sequential):
        node, path = node.layers, (*path, "layers")
    if part.isdigit():
        index = int(part)
        try:
            return node[index], (*path, index)
        except (IndexError, TypeError, KeyError):
            raise ValueError(f"the Flax module has no element {_dotted((*path, index))}") from None
    if not hasattr(node, part):
        raise ValueError(f"the Flax module has no attribute {_dotted((*path, part))}")
    return getattr(node, part), (*path, part)


def _check_config(t_mod: Any, n_mod: Any, where: str) -> None:
    for attr in _CONFIG_ATTRS:
        if hasattr(t_mod, attr) and hasattr(n_mod, attr):
            a, b = getattr(t_mod, attr), getattr(n_mod, attr)
            if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
                a = None if a is None else tuple(a)
                b = None if b is None else tuple(b)
            if a != b:
                raise ValueError(
                    f"modules differ at {where or '<root>'}: {attr} is {a!r} in PyTorch "
                    f"but {b!r} in Flax"
                )


def _pairs(torch_module: Any, nnx_module: nnx.Module):
    """Yield ``(torch_param, nnx_variable, transpose, name)`` for every torch parameter,
    after checking names, types, settings and shapes; then check no NNX ``Param`` is left."""
    if type(torch_module).__name__ != type(nnx_module).__name__ and not (
        _torch_kind(torch_module) == "linear" and isinstance(nnx_module, nnx.Linear)
    ):
        raise ValueError(
            f"cannot convert between {type(torch_module).__name__} (PyTorch) and "
            f"{type(nnx_module).__name__} (Flax): they are not twins"
        )
    # Settings of every submodule both sides have.
    for name, t_mod in torch_module.named_modules():
        node, path = nnx_module, ()
        try:
            for part in name.split(".") if name else []:
                node, path = _nnx_child(node, part, path)
        except ValueError:
            continue  # parameter-free torch modules (Identity, Dropout, GELU) may be absent
        _check_config(t_mod, node, name)

    seen: set[tuple] = set()
    out = []
    for name, param in torch_module.named_parameters():
        *owner_path, leaf = name.split(".")
        t_owner = torch_module.get_submodule(".".join(owner_path))
        node, path = nnx_module, ()
        for part in owner_path:
            node, path = _nnx_child(node, part, path)
        kind = _torch_kind(t_owner)
        if kind == "linear":
            if not isinstance(node, nnx.Linear):
                raise ValueError(f"{name}: nn.Linear in PyTorch but {type(node).__name__} in Flax")
            target, transpose = {"weight": "kernel", "bias": "bias"}[leaf], leaf == "weight"
        elif kind == "layernorm":
            if not isinstance(node, nnx.LayerNorm):
                raise ValueError(
                    f"{name}: nn.LayerNorm in PyTorch but {type(node).__name__} in Flax"
                )
            target, transpose = {"weight": "scale", "bias": "bias"}[leaf], False
        else:
            target, transpose = leaf, False
        var = getattr(node, target, None)
        if not isinstance(var, nnx.Param):
            raise ValueError(
                f"{name}: the Flax module has no parameter {_dotted((*path, target))}"
            )
        want = tuple(param.shape[::-1]) if transpose else tuple(param.shape)
        if tuple(var.shape) != want:
            raise ValueError(
                f"{name}: shape {tuple(param.shape)} in PyTorch does not match "
                f"{tuple(var.shape)} in Flax (expected {want})"
            )
        seen.add((*path, target))
        out.append((param, var, transpose, name))

    flat = nnx.to_flat_state(nnx.state(nnx_module, nnx.Param))
    left = sorted(_dotted(p) for p, _ in flat if tuple(p) not in seen)
    if left:
        raise ValueError(f"Flax parameters without a PyTorch counterpart: {left}")
    return out


def _check_arguments(fn: str, torch_module: Any, nnx_module: Any) -> None:
    """``TypeError`` naming the expected types (swapped arguments included), and an
    ``ImportError`` naming the extra when PyTorch is missing."""
    try:
        import torch
    except ImportError as exc:
        raise ImportError(
            f"{fn} needs PyTorch for the torch side: pip install '.[torch]' (from a checkout "
            "of mingru-scans)"
        ) from exc
    order = ("torch_module, nnx_module" if fn == "torch_to_nnx"
             else "nnx_module, torch_module")
    swapped = isinstance(torch_module, nnx.Module) and isinstance(nnx_module, torch.nn.Module)
    hint = f" (the arguments look swapped: {fn} takes {order})" if swapped else ""
    checks = [
        ("torch_module", torch_module, torch.nn.Module, "torch.nn.Module"),
        ("nnx_module", nnx_module, nnx.Module, "flax.nnx.Module"),
    ]
    if fn == "nnx_to_torch":  # report the first argument first
        checks.reverse()
    for name, value, cls, cls_name in checks:
        if not isinstance(value, cls):
            raise TypeError(f"{fn}: {name} must be a {cls_name}; got {type(value).__name__}"
                            + hint)


def torch_to_nnx(torch_module: Any, nnx_module: nnx.Module) -> nnx.Module:
    """Copy every parameter of a :mod:`mingru` module into its :mod:`mingru_jax` twin.

    Args:
        torch_module: a ``torch.nn.Module`` from :mod:`mingru` (or any module whose parameter
            paths match the Flax module's).
        nnx_module: the Flax NNX twin, built with the same constructor arguments.

    Returns:
        ``nnx_module``, updated in place (values cast to its parameter dtypes).

    Raises:
        TypeError: when an argument is not a module of the expected framework (e.g. swapped).
        ValueError: when the modules are not twins (names, shapes or settings differ).

    Example:
        >>> import mingru, mingru_jax
        >>> from flax import nnx
        >>> fx = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
        >>> fx = mingru_jax.torch_to_nnx(mingru.MinGRU(4, 6), fx)
    """
    _check_arguments("torch_to_nnx", torch_module, nnx_module)
    import torch

    for param, var, transpose, _ in _pairs(torch_module, nnx_module):
        t = param.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()  # numpy has no bfloat16; the widening is exact
        value = t.numpy()
        if transpose:
            value = value.T
        var[...] = jnp.asarray(value, dtype=var.dtype)
    return nnx_module


def nnx_to_torch(nnx_module: nnx.Module, torch_module: Any) -> Any:
    """Copy every parameter of a :mod:`mingru_jax` module into its :mod:`mingru` twin.

    Args:
        nnx_module: the Flax NNX module.
        torch_module: the PyTorch twin, built with the same constructor arguments.

    Returns:
        ``torch_module``, updated in place (values cast to its parameter dtypes and kept on
        its device).

    Raises:
        TypeError: when an argument is not a module of the expected framework (e.g. swapped).
        ValueError: when the modules are not twins (names, shapes or settings differ).

    Example:
        >>> import mingru, mingru_jax
        >>> from flax import nnx
        >>> fx = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
        >>> pt = mingru_jax.nnx_to_torch(fx, mingru.MinGRU(4, 6))
    """
    _check_arguments("nnx_to_torch", torch_module, nnx_module)
    import torch

    with torch.no_grad():
        for param, var, transpose, _ in _pairs(torch_module, nnx_module):
            value = var[...]
            if value.dtype in (jnp.bfloat16, jnp.float16):
                value = value.astype(jnp.float32)  # exact widening; torch casts back below
            arr = np.asarray(jax.device_get(value))
            if transpose:
                arr = arr.T
            param.copy_(torch.from_numpy(np.array(arr)).to(param.dtype))
    return torch_module
