"""Weight conversion between a PyTorch module (:mod:`mingru`) and its Flax NNX twin.

Both frontends use the same attribute names (``linear_z``, ``blocks.0.mixer.linear_k.1``,
``decay.rho``, ``h0``, ...), so a parameter's path is the same on both sides except for the
names and layout inside the framework's own layers:

===========================  ======================================
PyTorch                      Flax NNX
===========================  ======================================
``nn.Linear.weight (o, i)``  ``nnx.Linear.kernel (i, o)`` (transposed)
``nn.Linear.bias``           ``nnx.Linear.bias``
``nn.LayerNorm.weight``      ``nnx.LayerNorm.scale``
``nn.LayerNorm.bias``        ``nnx.LayerNorm.bias``
``nn.Embedding.weight``      ``nnx.Embed.embedding``
``nn.Sequential[i]``         ``nnx.Sequential.layers[i]``
anything else (``h0``,       the same name
``decay.rho``)
===========================  ======================================

Every parameter on each side must be matched (none missing, none left over, equal shapes),
and the architecture settings that change the numbers (sizes, ``snap``, ``rounds``,
``block_size``, heads, decay mode, ...) must agree; otherwise a :class:`ValueError` says
where. Values are copied exactly (float32 ↔ float32 round-trips bit for bit); each side keeps
its own parameter dtype.

The rules live in one place, :func:`torch_names`; :func:`to_state_dict` and
:func:`from_state_dict` map an NNX module to and from a flat ``{PyTorch name: np.ndarray}``
dict (no torch needed: the checkpoints of :class:`mingru_jax.MinGRULM` use them), and
:func:`torch_to_nnx` / :func:`nnx_to_torch` go through them. Only those two import ``torch``.

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

from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

__all__ = ["from_state_dict", "nnx_to_torch", "to_state_dict", "torch_names", "torch_to_nnx"]

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
    "mixer_expansion",
    "mode",
    "decay_rate",
    "log1p_delta",
    "channels",
)


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


def torch_names(nnx_module: nnx.Module) -> dict[str, tuple[nnx.Param, bool]]:
    """Every ``nnx.Param`` of ``nnx_module`` under its PyTorch ``state_dict`` name:
    ``{name: (variable, transpose)}``, ``transpose`` when PyTorch stores it transposed (the
    naming rules of the table above, the only copy of them)."""
    out: dict[str, tuple[nnx.Param, bool]] = {}
    for path, var in nnx.to_flat_state(nnx.state(nnx_module, nnx.Param)):
        node, parts = nnx_module, []
        for part in path[:-1]:
            if part == "layers" and isinstance(node, nnx.Sequential):
                node = node.layers  # nn.Sequential indexes its children directly
            else:
                node = node[part] if isinstance(part, int) else getattr(node, part)
                parts.append(str(part))
        leaf, transpose = path[-1], False
        if isinstance(node, nnx.Linear):
            leaf, transpose = {"kernel": "weight"}.get(leaf, leaf), leaf == "kernel"
        elif isinstance(node, nnx.LayerNorm):
            leaf = {"scale": "weight"}.get(leaf, leaf)
        elif isinstance(node, nnx.Embed):
            leaf = {"embedding": "weight"}.get(leaf, leaf)
        out[".".join([*parts, str(leaf)])] = (var, transpose)
    return out


def _match(names: dict[str, tuple[nnx.Param, bool]], shapes: dict[str, tuple[int, ...]],
           source: str) -> None:
    """``ValueError`` unless ``shapes`` (PyTorch names and layout, from ``source``) has
    exactly the parameters of ``names`` (:func:`torch_names`), with matching shapes."""
    unexpected = sorted(set(shapes) - set(names))
    if unexpected:
        raise ValueError(f"{source} parameters without a Flax counterpart (unexpected keys): "
                         f"{unexpected}")
    missing = sorted(set(names) - set(shapes))
    if missing:
        raise ValueError(f"Flax parameters without a {source} counterpart (missing keys): "
                         f"{missing}")
    for name, shape in shapes.items():
        var, transpose = names[name]
        want = tuple(shape[::-1]) if transpose else tuple(shape)
        if tuple(var.shape) != want:
            raise ValueError(
                f"{name}: shape {tuple(shape)} in {source} does not match "
                f"{tuple(var.shape)} in Flax (expected {want})"
            )


def to_state_dict(nnx_module: nnx.Module, *, widen: bool = False) -> dict[str, np.ndarray]:
    """``nnx_module``'s parameters as ``{PyTorch state_dict name: np.ndarray}`` in PyTorch's
    layout (``nn.Linear.weight`` is ``(out, in)``), each in its own dtype; ``widen`` casts
    float16 and bfloat16 to float32 (exactly; ``torch.from_numpy`` takes no bfloat16).

    Example:
        >>> from flax import nnx
        >>> from mingru_jax import MinGRU
        >>> from mingru_jax.convert import to_state_dict
        >>> sorted(to_state_dict(MinGRU(4, 6, rngs=nnx.Rngs(0))).items())[0][1].shape
        (6,)
    """
    out = {}
    for name, (var, transpose) in torch_names(nnx_module).items():
        value = var[...]
        if widen and value.dtype in (jnp.bfloat16, jnp.float16):
            value = value.astype(jnp.float32)
        array = np.asarray(jax.device_get(value))
        out[name] = np.ascontiguousarray(array.T if transpose else array)
    return out


def from_state_dict(nnx_module: nnx.Module, state_dict: Mapping[str, Any], *,
                    source: str = "PyTorch") -> nnx.Module:
    """Copy ``{PyTorch state_dict name: array}`` (PyTorch layout; NumPy or JAX arrays) into
    ``nnx_module`` (in place; values cast to its parameter dtypes) and return it.

    Raises:
        ValueError: naming the keys that are missing or unexpected, or a shape mismatch
            (``source`` names where the arrays come from in the message).

    Example:
        >>> from flax import nnx
        >>> from mingru_jax import MinGRU
        >>> from mingru_jax.convert import from_state_dict, to_state_dict
        >>> a, b = MinGRU(4, 6, rngs=nnx.Rngs(0)), MinGRU(4, 6, rngs=nnx.Rngs(1))
        >>> b = from_state_dict(b, to_state_dict(a))
        >>> bool((a.linear_z.kernel[...] == b.linear_z.kernel[...]).all())
        True
    """
    names = torch_names(nnx_module)
    _match(names, {name: tuple(value.shape) for name, value in state_dict.items()}, source)
    for name, value in state_dict.items():
        var, transpose = names[name]
        value = jnp.asarray(value, dtype=var.dtype)
        var.set_value(value.T if transpose else value)
    return nnx_module


def _pairs(torch_module: Any, nnx_module: nnx.Module):
    """``[(torch_param, nnx_variable, transpose, name)]`` for every torch parameter, after
    checking types, settings, names and shapes (none missing, none left over)."""
    if type(torch_module).__name__ != type(nnx_module).__name__:
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

    names = torch_names(nnx_module)
    params = dict(torch_module.named_parameters())
    _match(names, {name: tuple(param.shape) for name, param in params.items()}, "PyTorch")
    return [(param, *names[name], name) for name, param in params.items()]


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

    _pairs(torch_module, nnx_module)  # settings first: a clearer error than a shape
    state_dict = {}
    for name, param in torch_module.named_parameters():
        t = param.detach().cpu()
        if t.dtype in (torch.bfloat16, torch.float16):
            t = t.float()  # numpy has no bfloat16; the widening is exact
        state_dict[name] = t.numpy()
    return from_state_dict(nnx_module, state_dict)


def nnx_to_torch(nnx_module: nnx.Module, torch_module: Any) -> Any:
    """Copy every parameter of a :mod:`mingru_jax` module into its :mod:`mingru` twin.

    Args:
        nnx_module: the Flax NNX module.
        torch_module: the PyTorch twin, built with the same constructor arguments.

    Returns:
        ``torch_module``, updated in place (values cast to its parameter dtypes and kept on
        its device).

    Raises:
        TypeError, ValueError: as :func:`torch_to_nnx` (an argument of the wrong framework;
            modules that are not twins).

    Example:
        >>> import mingru, mingru_jax
        >>> from flax import nnx
        >>> fx = mingru_jax.MinGRU(4, 6, rngs=nnx.Rngs(0))
        >>> pt = mingru_jax.nnx_to_torch(fx, mingru.MinGRU(4, 6))
    """
    _check_arguments("nnx_to_torch", torch_module, nnx_module)
    import torch

    pairs = _pairs(torch_module, nnx_module)
    state_dict = to_state_dict(nnx_module, widen=True)  # torch casts back below
    with torch.no_grad():
        for param, _, _, name in pairs:
            param.copy_(torch.from_numpy(state_dict[name]).to(param.dtype))
    return torch_module
