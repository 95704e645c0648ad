"""The JAX frontend's one use of private internals: jax-triton's compile step, replaced.

jax-triton compiles a kernel in ``jax_triton.triton_lib.get_or_create_triton_kernel`` (at
lowering time, once per process per cache key), with its own specialisation rule (no
divisibility hint on runtime ints: see :mod:`mingru_jax._launch._compile`), its own compile
stages and options, and no on-disk cache (it blanks ``TRITON_CACHE_DIR`` when imported and keeps
compiled kernels in an in-memory dict, so every process recompiles every variant). The hook
``"jax_triton_compile"`` (:mod:`mingru_kernels._compat`) wraps that private function: the
kernels launched through :func:`mingru_jax._launch._common.launch` (and only those, see
:func:`use_pytorch_compile`) are compiled with ``triton.compile(ASTSource(fn, signature,
constexprs, attrs))``, the attrs built as PyTorch's launcher builds them (arrays 16-aligned as
jax-triton assumes and checks at launch; ints ``% 16 == 0`` marked unless in
``do_not_specialize``), the options the launcher did not set left to the backend's defaults (as
PyTorch does; jax-triton fills its own), and through Triton's on-disk cache. The wrapper hands
jax-triton the same ``(TritonKernel, attrs)`` pair its own function returns, built from
jaxlib's ``gpu_triton`` module, which jax-triton exposes as ``triton_kernel_call_lib``. (XLA
assembles the PTX with its own ``ptxas`` on the first launch in each process; that part is
jaxlib's and stays.)

The wrapper is installed once, when a jax-triton inside the hook's version range first lowers
one of our kernels; at each lowering it compiles here only while the hook is active, so
``mingru_kernels._compat.hooks_disabled("jax_triton_compile")`` takes jax-triton's own compile
for functions traced inside the block (a fresh ``jax.jit``: a function already traced keeps its
compiled kernels). Any compile failure falls back to jax-triton's own compile (one warning), so
the route never breaks, only slows.
"""

from __future__ import annotations

import functools
import os
import threading
import types
from collections.abc import Sequence
from typing import Any

from mingru_jax._launch._compile import scalar_tag
from mingru_kernels._compat import Hook, fall_back, hook_active, hook_available, register

__all__ = ["JAX_TRITON_COMPILE", "compile_offline", "use_pytorch_compile"]

JAX_TRITON_COMPILE = register(Hook(
    name="jax_triton_compile", dependency="jax-triton", minimum=(0, 3, 1), below=(0, 4),
    public_path="jax-triton's own compile (no divisibility hint on runtime ints)"))
"""The hook: ``get_or_create_triton_kernel``'s signature and its ``(TritonKernel, attrs)``
result as in jax-triton 0.3.1; 0.4 replaced the function."""

_NAME = JAX_TRITON_COMPILE.name
_TMEM_MAX_SIZE = 512  # jax-triton's guard (b/447434580), kept
_ours: set[Any] = set()  # JITFunctions launched through launch(): compiled here
_compiled: dict[tuple, dict[str, Any]] = {}  # cache key -> record
_offline: dict[tuple, dict[str, Any]] = {}  # compile_offline's records (stand-in kernels)
_lock = threading.Lock()
_failures: set[str] = set()


def use_pytorch_compile(kernel: Any) -> None:
    """Have jax-triton's lowering compile ``kernel`` with PyTorch's specialisation, while the
    hook is active (nothing when it cannot run in this process)."""
    if _install():
        _ours.add(kernel)


@functools.cache
def _install() -> bool:
    """Wrap jax-triton's ``get_or_create_triton_kernel`` (once); ``False`` when the hook cannot
    run here (switched off, a jax-triton outside its range, the function missing)."""
    if not hook_available(_NAME):
        return False
    try:
        from jax_triton import triton_lib as jtl
    except ImportError:
        return False
    original = getattr(jtl, "get_or_create_triton_kernel", None)
    if original is None or not hasattr(jtl, "triton_kernel_call_lib"):
        fall_back(_NAME, "jax_triton.triton_lib has no get_or_create_triton_kernel / "
                  "triton_kernel_call_lib")
        return False
    if getattr(original, "_mingru_hook", False):
        return True
    if os.environ.get("TRITON_CACHE_DIR") == "":  # jax-triton's import blanks it: Triton's
        del os.environ["TRITON_CACHE_DIR"]  # default cache again (triton.compile needs one)

    def get_or_create_triton_kernel(backend_init_func, platform, fn, arg_dtypes, scalar_args,
                                    **kwargs):
        if platform == "cuda" and fn in _ours and hook_active(_NAME):
            try:
                record = _compile_record(jtl, backend_init_func, fn, arg_dtypes, scalar_args,
                                         **kwargs)
                return record["kernel"], record["attrs"]
            except Exception as exc:  # never worse than jax-triton's own compile
                _warn_failure(fn, exc)
        return original(backend_init_func, platform, fn, arg_dtypes, scalar_args, **kwargs)

    get_or_create_triton_kernel._mingru_hook = True
    get_or_create_triton_kernel.__wrapped__ = original
    jtl.get_or_create_triton_kernel = get_or_create_triton_kernel
    return True


def _warn_failure(fn: Any, exc: Exception) -> None:
    """One warning per distinct failure; the kernel takes jax-triton's own compile."""
    import warnings

    msg = f"{type(exc).__name__}: {exc}"
    if msg not in _failures:
        _failures.add(msg)
        warnings.warn(f"mingru_jax: compiling {fn.__name__} as PyTorch does failed ({msg}); "
                      "jax-triton's own compile runs instead (slower kernels)",
                      RuntimeWarning, stacklevel=3)


def _compile_record(jtl, backend_init_func, fn, arg_dtypes, scalar_args, *, num_warps,
                    num_stages, num_ctas, compute_capability, enable_fp_fusion, metaparams,
                    dump, int_hints=True, store=None):
    """jax-triton's ``get_or_create_triton_kernel`` with PyTorch's specialisation, compiled by
    ``triton.compile``: the record holds ``kernel`` and ``attrs`` (what jax-triton's function
    returns), ``compiled`` (the ``CompiledKernel``), ``constexprs``, ``options`` and
    ``divisible_16`` (the runtime ints marked divisible by 16)."""
    import triton
    from triton.compiler import ASTSource

    lib = jtl.triton_kernel_call_lib
    device = 0  # as jax-triton: device 0's capability
    cc = compute_capability if compute_capability is not None else (
        lib.get_compute_capability(device))
    if num_ctas > 1 and cc < 90:
        raise ValueError("num_ctas > 1 unsupported before Hopper.")
    backend = backend_init_func(device, cc)
    names = fn.arg_names
    signature = {names[i]: t for i, t in enumerate(arg_dtypes)}
    constexprs = dict(metaparams)
    aligned = backend.parse_attr("D")
    attrs: dict[tuple[int], Any] = {}
    tags = {i: scalar_tag(fn, i, v) for i, _, v in scalar_args}
    if not int_hints:  # jax-triton's own rule (for comparisons: compile_offline)
        tags = {i: "1" if t == "1" else "" for i, t in tags.items()}
    for i in range(len(arg_dtypes)):
        tag = tags.get(i)
        if tag is None:  # an array: 16-byte aligned, as jax-triton assumes (checked at launch)
            attrs[(i,)] = aligned
        elif tag == "1":
            constexprs[names[i]] = 1
        elif tag == "None":
            constexprs[names[i]] = None
        elif tag == "D":
            attrs[(i,)] = aligned
    for name in constexprs:
        signature[name] = "constexpr"
    # Options: what the launcher set; the rest is the backend's default, as for PyTorch.
    options: dict[str, Any] = {"num_ctas": num_ctas}
    if num_warps is not None:
        options["num_warps"] = num_warps
    if num_stages is not None:
        options["num_stages"] = num_stages
    if dump:
        options["debug"] = True
    options["enable_fp_fusion"] = bool(enable_fp_fusion)  # stated, as PyTorch's launches
    key = (fn, tuple(signature.items()), tuple(sorted(constexprs.items(), key=lambda kv: kv[0])),
           tuple(sorted(attrs)), tuple(sorted(options.items())), cc, int_hints)
    store = _compiled if store is None else store
    with _lock:
        hit = store.get(key)
    if hit is not None:
        return hit
    src = ASTSource(fn, signature=signature, constexprs=constexprs, attrs=attrs)
    compiled = triton.compile(src, target=backend.target, options=options)
    md = compiled.metadata
    if getattr(md, "tmem_size", 0) > _TMEM_MAX_SIZE:
        raise ValueError(f"TMEM size {md.tmem_size} exceeds limit {_TMEM_MAX_SIZE}.")
    try:
        ttir = compiled.asm["ttir"]
    except KeyError:
        ttir = ""
    n_warps = int(getattr(md, "num_warps", num_warps or 4))
    kernel = lib.TritonKernel(md.name, n_warps, num_ctas, int(md.shared), compiled.asm["ptx"],
                              ttir, cc)
    record = dict(kernel=kernel, attrs=attrs, compiled=compiled, fn=fn,
                  constexprs=dict(constexprs), options=dict(options),
                  divisible_16=[names[i] for (i,) in sorted(attrs) if i in tags])
    with _lock:
        store[key] = record
    return record


def compile_offline(fn: Any, arg_dtypes: Sequence[str], scalar_args: Sequence[tuple],
                    metaparams: dict[str, Any], *, compute_capability: int = 90,
                    num_warps: int | None = None, num_stages: int | None = None,
                    int_hints: bool = True) -> dict[str, Any]:
    """Compile ``fn`` as the hook would, without a GPU or jax-triton (for tests that inspect
    the PTX). ``fn`` must be a JITFunction (``TRITON_INTERPRET`` unset); ``scalar_args`` are
    jax-triton's ``(index, type, value)``. ``int_hints=False`` compiles with jax-triton's own
    rule (no divisibility hint on runtime ints). Returns the record of :func:`_compile_record`
    (its ``kernel`` a stand-in tuple)."""
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import CUDABackend

    lib = types.SimpleNamespace(
        TritonKernel=lambda *args: ("TritonKernel", *args[:4]),
        get_compute_capability=lambda device: compute_capability)
    fake = types.SimpleNamespace(triton_kernel_call_lib=lib)
    return _compile_record(
        fake, lambda device, cc: CUDABackend(GPUTarget("cuda", cc, 32)), fn, list(arg_dtypes),
        tuple(scalar_args), num_warps=num_warps, num_stages=num_stages, num_ctas=1,
        compute_capability=compute_capability, enable_fp_fusion=True,
        metaparams=dict(metaparams), dump=False, int_hints=int_hints, store=_offline)
