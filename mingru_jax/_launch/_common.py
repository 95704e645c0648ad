"""Plumbing the jax-triton launchers share: support checks, the one launch primitive with its
two routes, and the vmap rule that folds a batch axis into the kernels' leading ``B``.

Each launcher writes its launch sequence once, as calls of :func:`launch` on the SAME kernels
from :mod:`mingru_kernels`. :func:`launch` picks the route at trace time:

* **GPU** (a jax GPU backend): ``jax_triton.triton_call``. jax-triton is imported lazily,
  inside this route only (it cannot be imported on CPU-only jax, and importing it changes
  Triton's cache settings). Its compile step is replaced for these kernels by
  :mod:`mingru_jax._compat` (a private hook): the specialisation PyTorch's launcher gives the
  same kernel (runtime ints divisible by 16 marked so, ``do_not_specialize`` honoured) and
  Triton's on-disk cache.
* **Interpreter** (``TRITON_INTERPRET=1``, arrays on the host): a :func:`jax.pure_callback`
  that runs the kernel through Triton's interpreter on NumPy buffers (:class:`_HostTensor`
  gives them the few tensor methods the interpreter reads). No PyTorch is involved, so
  CPU-only CI tests the JAX launch sequences themselves, torch-free, under :func:`jax.jit`.

Outputs of the interpreter route are NaN-filled before the kernel runs
(:func:`mingru_kernels.launch.switches.poison_outputs`), so an element a kernel forgets to
write fails the comparison. Neither route is differentiable or batchable by itself: each
launcher wraps its forward and backward launch sequences with :func:`batched` (a
``custom_vmap`` rule) and combines them in a ``jax.custom_vjp`` that saves inputs and outputs
only.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mingru_jax import _compat
from mingru_jax._launch import _compile
from mingru_jax._platform import platform_of
from mingru_jax._vma import as_varying, varying_axes
from mingru_kernels._seam import interpreter_mode
from mingru_kernels.launch import FP_FUSION
from mingru_kernels.launch._elementwise import DEFAULT_SM_COUNT
from mingru_kernels.launch.switches import poison_outputs

KERNEL_DTYPES = (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16), jnp.dtype(jnp.float16))


def on_gpu(*arrays: jax.Array) -> bool:
    """True when a call on ``arrays`` runs on a jax GPU (the jax-triton route): the dispatch
    seam's rule (:func:`mingru_jax._platform.platform_of`), so both agree on where it runs."""
    return platform_of(arrays) == "gpu"


def unsupported_dtype_or_device(x: jax.Array) -> str | None:
    """The common part of ``unsupported_reason``: the dtype and where the call runs."""
    dtype = jnp.dtype(x.dtype)
    if dtype not in KERNEL_DTYPES:
        return f"dtype {dtype} runs eager (the kernels take float32, bfloat16, float16)"
    if on_gpu(x) or interpreter_mode():
        return None
    return "no GPU backend in jax (the kernels need a GPU, or TRITON_INTERPRET=1)"


# ----------------------------------------------------------------------------- shard_map


class custom_vjp:  # noqa: N801 - a drop-in for ``jax.custom_vjp``
    """``jax.custom_vjp`` whose array arguments enter typed varying along every mesh axis any
    of them varies along (inside ``jax.shard_map`` with ``check_vma=True``; a no-op
    elsewhere): the kernels' outputs, cotangents included, are typed so (:func:`launch`),
    and a cotangent must be typed like its argument. A launcher's own placeholders (zeros
    for an absent state) need no care. Use it as ``jax.custom_vjp``: a decorator, with
    ``nondiff_argnums``, then ``defvjp(fwd, bwd)``."""

    def __init__(self, fn: Callable[..., Any], nondiff_argnums: tuple[int, ...] = ()) -> None:
        self._op = jax.custom_vjp(fn, nondiff_argnums=nondiff_argnums)
        functools.update_wrapper(self, fn)

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> None:
        self._op.defvjp(fwd, bwd)

    def __call__(self, *args: Any) -> Any:
        axes = varying_axes(*args)
        return self._op(*(as_varying(a, axes) for a in args))


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


def batched_by_map(fn: Callable[..., Any]) -> Callable[..., Any]:
    """:func:`batched` for launches of ONE row (packed sequences, ``B = 1``, whose per-step
    sequence index has no batch axis): the vmapped calls run one after another
    (:func:`jax.lax.map`). ``None`` arguments pass through; unbatched arrays are broadcast."""

    @jax.custom_batching.custom_vmap
    def wrapped(*args):
        return fn(*args)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        full = tuple(
            x if x is None or is_b else jnp.broadcast_to(x, (axis_size, *x.shape))
            for x, is_b in zip(args, in_batched, strict=True)
        )
        outs = jax.lax.map(lambda xs: wrapped(*xs), full)
        return tuple(outs), tuple(True for _ in outs)

    return wrapped


def packed_state_grad(dh0: jax.Array, seq_id: jax.Array, has_h0: bool) -> jax.Array:
    """``dh_0 (N, D)`` of a packed backward launch: the kernels write it at each sequence's
    first step only, so an empty sequence's row is never written (uninitialised memory on a
    GPU): zero it with ``where``, which never lets that garbage through. All zeros when there
    is no state (``has_h0`` False: ``dh0`` belongs to a placeholder)."""
    if not has_h0:
        return jnp.zeros_like(dh0)
    nonempty = jnp.zeros((dh0.shape[0],), bool).at[seq_id].set(True)
    return jnp.where(nonempty[:, None], dh0, jnp.zeros_like(dh0))


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

    @custom_vjp
    def op(a, b):
        return forward(a, b)

    def op_fwd(a, b):
        P, Z = forward(a, b)
        return (P, Z), (a, P, Z)

    def op_bwd(res, cts):
        return backward(*res, *cts)

    op.defvjp(op_fwd, op_bwd)
    return op


class _HostStorage:
    def __init__(self, array: np.ndarray) -> None:
        self.array = array

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def cpu(self) -> _HostStorage:
        return self

    def copy_(self, other: _HostStorage) -> None:
        # The interpreter "copies back" from its host view; ours IS the buffer.
        return None


class _HostTensor:
    """A NumPy buffer seen as the tensor Triton's interpreter expects (the methods it calls
    to find the memory and its element type; the interpreter then works on raw pointers)."""

    _TRITON_DTYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16",
                     "float64": "fp64", "int32": "i32", "int64": "i64"}

    def __init__(self, array: np.ndarray | None) -> None:
        self.array = array

    @property
    def dtype(self) -> str:
        return self._TRITON_DTYPE[self.array.dtype.name]

    def data_ptr(self) -> int:
        return self.array.ctypes.data

    def untyped_storage(self) -> _HostStorage:
        return _HostStorage(self.array)

    def storage_offset(self) -> int:
        return 0

    def size(self) -> tuple[int, ...]:
        return self.array.shape

    def stride(self) -> tuple[int, ...]:
        return tuple(s // self.array.itemsize for s in self.array.strides)

    def new_empty(self, *args: Any, **kwargs: Any) -> _HostTensor:
        return _HostTensor(None)

    def set_(self, storage: _HostStorage, *args: Any) -> _HostTensor:
        self.array = storage.array
        return self

    def copy_(self, other: Any) -> None:
        return None


# Triton's interpreter patches module-level state while a kernel runs: one kernel at a time
# (XLA runs the callbacks of several CPU devices, e.g. under shard_map, on parallel threads).
_INTERPRETER = threading.Lock()


def _host_launch(kernel, grid, inputs, *, outputs, scalars, meta, zeroed=()):
    """The interpreter route of :func:`launch`: a pure callback running ``kernel`` on host
    buffers (outputs NaN-filled first when the poison switch is on, except ``zeroed``)."""
    poisoned = poison_outputs()

    def host(*arrays):
        ins = [_HostTensor(np.ascontiguousarray(a)) for a in arrays]
        outs = [np.full(o.shape, np.nan, o.dtype) if poisoned and i not in zeroed
                else np.zeros(o.shape, o.dtype) for i, o in enumerate(outputs)]
        with _INTERPRETER:
            kernel[grid](*ins, *scalars, *(_HostTensor(o) for o in outs), **meta)
        return tuple(outs)

    return tuple(jax.pure_callback(host, tuple(outputs), *inputs))


# ----------------------------------------------------------------------------- GPU route


@functools.cache
def sm_count() -> int:
    """Streaming multiprocessors of the default GPU (the planner's default,
    :data:`~mingru_kernels.launch._elementwise.DEFAULT_SM_COUNT`, when jax cannot say)."""
    try:
        return int(jax.devices("gpu")[0].core_count)
    except Exception:
        return DEFAULT_SM_COUNT


def launch(
    kernel: Any,
    grid: tuple[int, ...],
    inputs: Sequence[jax.Array],
    outputs: Sequence[jax.ShapeDtypeStruct],
    scalars: Sequence[int] = (),
    *,
    zeroed: Sequence[int] = (),
    **meta: Any,
) -> tuple[jax.Array, ...]:
    """One launch of an adapter ``kernel(*inputs, *scalars, *outputs, **meta)``: through
    jax-triton on a GPU backend, else through Triton's interpreter (see the module docstring).
    The outputs at the indices ``zeroed`` are zero-filled before the kernel runs (the
    look-back strategy's status words).

    ``meta`` holds the constexprs and ``num_warps`` / ``num_stages``. The adapters (one per
    kernel, in each launcher module) reorder parameters into this layout and call the kernel
    from :mod:`mingru_kernels` unchanged.

    ``scalars`` are runtime arguments (plain ints; NumPy ints are converted, since jax-triton
    would take them for arrays), never constexprs: on the GPU route an int that is a multiple
    of 16 is compiled as divisible by 16 unless the adapter lists it in ``do_not_specialize``,
    and one equal to 1 as a constexpr (:mod:`mingru_jax._launch._compile`), so each ``T`` of a
    shape class reuses one compiled kernel, as under PyTorch.
    """
    scalars = tuple(int(s) if isinstance(s, np.integer) else s for s in scalars)
    _compile.note(kernel, inputs, outputs, scalars=scalars, meta=meta)
    axes = varying_axes(*inputs)  # inside shard_map: type the outputs as the inputs vary
    if not on_gpu(*inputs):
        out = _host_launch(kernel, grid, inputs, outputs=outputs, scalars=scalars, meta=meta,
                           zeroed=tuple(zeroed))
        return tuple(as_varying(o, axes) for o in out)
    from mingru_jax._launch._jax_triton import import_jax_triton

    jt = import_jax_triton()  # lazily: the GPU route only
    _compat.use_pytorch_compile(kernel)  # PyTorch's specialisation (see _compat)

    if zeroed:
        meta = {**meta, "zeroed_outputs": tuple(zeroed)}
    out = jt.triton_call(
        *inputs, *scalars, kernel=kernel, out_shape=tuple(outputs), grid=grid,
        enable_fp_fusion=FP_FUSION, **meta
    )
    return tuple(as_varying(o, axes) for o in (out if isinstance(out, (tuple, list)) else (out,)))


def f32(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """An fp32 scratch buffer spec."""
    return jax.ShapeDtypeStruct(shape, jnp.float32)


def i32(shape: tuple[int, ...]) -> jax.ShapeDtypeStruct:
    """An int32 scratch buffer spec."""
    return jax.ShapeDtypeStruct(shape, jnp.int32)


def like(x: jax.Array | jax.ShapeDtypeStruct) -> jax.ShapeDtypeStruct:
    """An output spec with ``x``'s shape and dtype."""
    return jax.ShapeDtypeStruct(x.shape, x.dtype)
