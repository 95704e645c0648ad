"""Plumbing the jax-triton launchers share: support checks, the two execution routes, and the
vmap rule that folds a batch axis into the kernels' leading ``B``.

Each launcher runs the SAME kernels from :mod:`mingru_kernels` through one of two routes,
chosen at trace time:

* **GPU** (a jax GPU backend): :func:`gpu_call` launches a kernel with
  ``jax_triton.triton_call``. jax-triton is imported lazily, inside that route only (it cannot
  be imported on CPU-only jax, and importing it changes Triton's cache settings).
* **Interpreter** (``TRITON_INTERPRET=1``, arrays on the host): :func:`host_call` is a
  :func:`jax.pure_callback` into the PyTorch launcher's custom op on CPU tensors, which runs the
  identical launch sequence through Triton's interpreter. This is how CPU-only CI tests the
  JAX launchers; it works under :func:`jax.jit`.

Neither route is differentiable or batchable by itself: each launcher wraps its forward and
backward launch sequences with :func:`batched` (a ``custom_vmap`` rule) and combines them in a
``jax.custom_vjp`` that saves inputs and outputs only.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mingru_jax.dispatch import interpreter_mode

KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def on_gpu() -> bool:
    """True when this trace targets a jax GPU backend (the jax-triton route)."""
    return jax.default_backend() in ("gpu", "cuda", "rocm")


def unsupported_dtype_or_device(x: jax.Array) -> str | None:
    """The common part of ``unsupported_reason``: the dtype and where the call runs."""
    dtype = jnp.dtype(x.dtype)
    if dtype not in KERNEL_DTYPES:
        return f"dtype {dtype} runs eager (the kernels take float32, bfloat16, float16)"
    if on_gpu() or interpreter_mode():
        return None
    return "no GPU backend in jax (the kernels need a GPU, or TRITON_INTERPRET=1)"


# ----------------------------------------------------------------------------- vmap


def batched(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Make ``fn`` (arrays with a leading batch dim ``B`` in, a tuple of such arrays out)
    vmappable by folding the vmapped axis into ``B``.

    ``None`` arguments (absent optional inputs) pass through untouched. Unbatched array
    arguments are broadcast along the vmapped axis first.
    """

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fn(*args)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        flat = []
        for x, is_b in zip(args, in_batched, strict=True):
            if x is None:
                flat.append(None)
                continue
            if not is_b:
                x = jnp.broadcast_to(x, (axis_size, *x.shape))
            flat.append(x.reshape(axis_size * x.shape[1], *x.shape[2:]))
        outs = wrapped(*flat)
        outs = tuple(o.reshape(axis_size, o.shape[0] // axis_size, *o.shape[1:]) for o in outs)
        return outs, tuple(True for _ in outs)

    return wrapped


# ----------------------------------------------------------------------------- interpreter route


def affine_scan_vjp(
    forward: Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]],
    backward: Callable[..., tuple[jax.Array, jax.Array]],
) -> Callable[[jax.Array, jax.Array], tuple[jax.Array, jax.Array]]:
    """``jax.custom_vjp`` for an affine scan ``(a, b) -> (P, Z)`` whose backward kernel takes
    ``(a, P, Z, dP, dZ)`` and returns ``(da, db)``: only inputs and outputs are saved.

    Shared by the linear and block-matrix scans, whose launch sequences differ but whose
    autodiff wiring is the same.
    """

    @jax.custom_vjp
    def op(a, b):
        return forward(a, b)

    def op_fwd(a, b):
        P, Z = forward(a, b)
        return (P, Z), (a, P, Z)

    def op_bwd(res, cts):
        return backward(*res, *cts)

    op.defvjp(op_fwd, op_bwd)
    return op


def _to_torch(x: np.ndarray | None):
    import torch

    if x is None:
        return None
    x = np.asarray(x)
    if x.dtype == jnp.bfloat16:  # numpy has no bfloat16: move the bits
        return torch.from_numpy(x.view(np.uint16).copy()).view(torch.bfloat16)
    return torch.from_numpy(x.copy())


def _to_numpy(t, dtype) -> np.ndarray:
    import torch

    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(jnp.bfloat16)
    return t.numpy().astype(dtype, copy=False)


def host_call(
    torch_op: Callable[..., Any],
    out_specs: Sequence[jax.ShapeDtypeStruct],
    *args: jax.Array | None,
) -> tuple[jax.Array, ...]:
    """Run the PyTorch launcher op ``torch_op`` on host copies of ``args`` (``None`` kept).

    ``torch_op`` returns one tensor or a tuple; its first ``len(out_specs)`` results are
    returned as arrays of ``out_specs``.
    """
    present = [i for i, a in enumerate(args) if a is not None]

    def host(*arrays):
        import torch

        full: list[Any] = [None] * len(args)
        for i, arr in zip(present, arrays, strict=True):
            full[i] = _to_torch(arr)
        with torch.no_grad():
            res = torch_op(*full)
        res = res if isinstance(res, tuple) else (res,)
        return tuple(
            _to_numpy(r, s.dtype) for r, s in zip(res[: len(out_specs)], out_specs, strict=True)
        )

    return tuple(
        jax.pure_callback(host, tuple(out_specs), *(args[i] for i in present))
    )


# ----------------------------------------------------------------------------- GPU route


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the default GPU (132, an H100/H200, when jax cannot say)."""
    try:
        return int(jax.devices("gpu")[0].core_count)
    except Exception:
        return 132


def gpu_call(
    kernel: Any,
    grid: tuple[int, ...],
    inputs: Sequence[jax.Array],
    outputs: Sequence[jax.ShapeDtypeStruct],
    scalars: Sequence[int] = (),
    **meta: Any,
) -> tuple[jax.Array, ...]:
    """One jax-triton launch of an adapter ``kernel(*inputs, *scalars, *outputs, **meta)``.

    ``meta`` holds the constexprs and ``num_warps`` / ``num_stages``. The adapters (one per
    kernel, in each launcher module) reorder parameters into this layout and call the kernel
    from :mod:`mingru_kernels` unchanged.
    """
    from mingru_jax.dispatch import import_jax_triton

    jt = import_jax_triton()  # lazily: the GPU route only

    out = jt.triton_call(
        *inputs, *scalars, kernel=kernel, out_shape=tuple(outputs), grid=grid, **meta
    )
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def f32(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """An fp32 scratch buffer spec."""
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def like(x: jax.Array | jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """An output spec with ``x``'s shape and dtype."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype)
