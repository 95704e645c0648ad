"""How the jax-triton route compiles our kernels: with the specialisation PyTorch's launcher
gives the same kernel, and through :func:`triton.compile` (so through Triton's on-disk cache).

jax-triton 0.3.1 compiles a kernel in ``jax_triton.triton_lib.get_or_create_triton_kernel``
(at lowering time, once per process per cache key) and there differs from ``JITFunction.run``,
the route PyTorch takes, in ways that cost time:

* **Runtime integer arguments get no divisibility hint.** jax-triton marks every *array* as
  16-byte aligned (``alignments = [16] * len(arg_dtypes)``) but then sets
  ``alignments[i] = 0`` for every scalar, so ``native_specialize_impl`` never returns the
  ``"D"`` (``tt.divisibility = 16``) key for one. PyTorch's launcher gives it to every int
  argument that is a multiple of 16 and not in ``do_not_specialize``. Without it the
  ``row * D + col`` addresses of a ``(B, T, D)`` tile are not provably 16-byte aligned and
  Triton emits 32-bit loads and stores instead of 128-bit ones (``ld.global.v4``): about 2×
  on the bandwidth-bound scans at large shapes (``scripts/jax_triton_vs_torch.py --ptx``
  shows it offline).
* **``do_not_specialize`` is ignored** (it never reads the kernel's own list); instead every
  scalar equal to 1 becomes a constexpr (``constants.update({...: 1 ... if v == 1})``) and
  its lowering drops that parameter from the launch. That part is kept here (the lowering
  depends on it): ``T == 1`` compiles its own variant, as PyTorch's ``== 1`` rule would for a
  specialised argument. A size that is 1 in the common case must therefore not reach an
  adapter as 1: the elementwise scans' adapters take ``n_chunks + 1``
  (:func:`mingru_jax._launch._elementwise.dims`), since the walk's constant ``n_chunks = 1``
  cost its ``linear_recurrence`` kernel 82 more registers than PyTorch's compile.
* **No on-disk cache.** jax-triton sets ``TRITON_CACHE_DIR=""`` when imported (restored by
  :func:`mingru_jax._launch.import_jax_triton`) and runs the stages itself (``ast_to_ttir``,
  ``make_ttir`` … ``make_ptx``), so every process recompiles every kernel variant; its cache
  is an in-memory dict. (XLA then assembles the PTX with its own ``ptxas`` on the first
  launch in each process; that part is jaxlib's and stays.)
* Defaults: jax-triton fills ``num_warps=4``, ``num_stages=3``, ``enable_fp_fusion=True``
  when not given; PyTorch's launcher takes the backend's defaults (the same values on Triton
  3.6). Here an option the launcher did not set is left to the backend, as PyTorch does.

:func:`install` replaces ``get_or_create_triton_kernel`` with a wrapper that compiles the
kernels launched through :func:`mingru_jax._launch._common.launch` (and only those, see
:func:`register`) with ``triton.compile(ASTSource(fn, signature, constexprs, attrs))`` — the
attrs built as PyTorch would (arrays 16-aligned as jax-triton assumes and checks at launch;
integers ``% 16 == 0`` marked unless in ``do_not_specialize``) — and hands jax-triton the same
``(TritonKernel, attrs)`` pair its own function returns. Any failure falls back to
jax-triton's own compile (with one warning), so the route never breaks, only slows.

:func:`scalar_tags` is the specialisation rule itself, pure Python: both routes record it
(:func:`recorded_variants`), so CPU tests can check that every ``T`` of a shape class shares
one compiled variant.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["compiled_kernels", "install", "note", "recorded_variants", "register",
           "scalar_tags"]

_TMEM_MAX_SIZE = 512  # jax-triton's guard (b/447434580), kept
_ours: set[Any] = set()  # JITFunctions launched through launch(): compiled here
_compiled: dict[tuple, dict[str, Any]] = {}  # cache key -> record (see compiled_kernels)
_lock = threading.Lock()
_recorders: list[set] = []
_launch_logs: list[list] = []
_offline: dict[tuple, dict[str, Any]] = {}  # compile_offline's records (stand-in kernels)

ENABLED = os.environ.get("MINGRU_JAX_TRITON_COMPILE", "pytorch") != "jax-triton"
"""Whether lowerings from now on compile here (``True``, the default) or with jax-triton's own
``get_or_create_triton_kernel`` (``MINGRU_JAX_TRITON_COMPILE=jax-triton``, or set this to
``False``: for A/B timings, ``scripts/jax_triton_vs_torch.py --stock``). Read when a
function is lowered, so re-trace (a new ``jax.jit``) after changing it."""


# ----------------------------------------------------------------------------- the rule


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
                scalars: Sequence[Any], meta: dict[str, Any]) -> tuple:
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


@contextlib.contextmanager
def recorded_launches() -> Iterator[list[dict[str, Any]]]:
    """Collect every launch traced inside the block as a dict (``kernel``, ``grid``,
    ``inputs`` / ``outputs`` (dtype names), ``scalars``, ``meta``): what jax-triton would be
    given. Tracing alone (``jax.make_jaxpr``) is enough; nothing has to run."""
    log: list[dict[str, Any]] = []
    _launch_logs.append(log)
    try:
        yield log
    finally:
        _launch_logs.remove(log)


def note(kernel: Any, inputs: Sequence[Any], outputs: Sequence[Any],
         scalars: Sequence[Any], meta: dict[str, Any], grid: Any = None) -> None:
    """Record a launch with every active :func:`recorded_variants` / :func:`recorded_launches`."""
    if _recorders:
        key = variant_key(kernel, inputs, outputs, scalars, meta)
        for seen in _recorders:
            seen.add(key)
    for log in _launch_logs:
        log.append(dict(kernel=kernel, grid=grid, inputs=[str(x.dtype) for x in inputs],
                        outputs=[str(o.dtype) for o in outputs], scalars=tuple(scalars),
                        meta=dict(meta)))


# ----------------------------------------------------------------------------- the hook


def register(kernel: Any) -> None:
    """Compile ``kernel`` here (PyTorch's specialisation) when jax-triton lowers it."""
    if install():
        _ours.add(kernel)


@functools.cache
def install() -> bool:
    """Wrap jax-triton's ``get_or_create_triton_kernel`` (once); ``False`` (with a warning)
    when this jax-triton does not have the function this relies on."""
    try:
        from jax_triton import triton_lib as jtl
    except ImportError:
        return False
    original = getattr(jtl, "get_or_create_triton_kernel", None)
    if original is None or not hasattr(jtl, "triton_kernel_call_lib"):
        warnings.warn("mingru_jax: this jax-triton has no get_or_create_triton_kernel; its own "
                      "compile runs (runtime ints without the divisibility-16 hint: slower)",
                      RuntimeWarning, stacklevel=2)
        return False
    if getattr(original, "_mingru_hook", False):
        return True
    if os.environ.get("TRITON_CACHE_DIR") == "":  # jax-triton's import blanks it: Triton's
        del os.environ["TRITON_CACHE_DIR"]  # default cache again (triton.compile needs one)

    def get_or_create_triton_kernel(backend_init_func, platform, fn, arg_dtypes, scalar_args,
                                    **kwargs):
        if ENABLED and platform == "cuda" and fn in _ours:
            try:
                return _compile(jtl, backend_init_func, fn, arg_dtypes, scalar_args, **kwargs)
            except Exception as exc:  # never worse than jax-triton's own compile
                _warn_fallback(fn, exc)
        return original(backend_init_func, platform, fn, arg_dtypes, scalar_args, **kwargs)

    get_or_create_triton_kernel._mingru_hook = True
    get_or_create_triton_kernel.__wrapped__ = original
    jtl.get_or_create_triton_kernel = get_or_create_triton_kernel
    return True


_warned: set[str] = set()


def _warn_fallback(fn: Any, exc: Exception) -> None:
    msg = f"{type(exc).__name__}: {exc}"
    if msg not in _warned:
        _warned.add(msg)
        warnings.warn(f"mingru_jax: compiling {fn.__name__} as PyTorch does failed ({msg}); "
                      "jax-triton's own compile runs instead (slower kernels)",
                      RuntimeWarning, stacklevel=3)


def _compile(jtl, backend_init_func, fn, arg_dtypes, scalar_args, **kwargs):
    """jax-triton's ``get_or_create_triton_kernel`` (0.3.1), with PyTorch's specialisation
    and compiled by ``triton.compile``. Returns ``(TritonKernel, attrs)`` as it does."""
    record = _compile_record(jtl, backend_init_func, fn, arg_dtypes, scalar_args, **kwargs)
    return record["kernel"], record["attrs"]


def _compile_record(jtl, backend_init_func, fn, arg_dtypes, scalar_args, *, num_warps,
                    num_stages, num_ctas, compute_capability, enable_fp_fusion, metaparams,
                    dump, int_hints=True, store=None):
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
    if not int_hints:  # jax-triton's own rule (only for comparisons: compile_offline)
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
    if not enable_fp_fusion:  # jax-triton's default is True: only an explicit False counts
        options["enable_fp_fusion"] = False
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


def compiled_kernels() -> list[dict[str, Any]]:
    """What the hook compiled in this process, one record per variant: ``fn`` (the adapter),
    ``compiled`` (the ``CompiledKernel``: ``.asm``, ``.metadata``), ``constexprs``,
    ``options`` and ``divisible_16`` (the runtime ints marked divisible by 16)."""
    with _lock:
        return [{k: v for k, v in r.items() if k != "kernel"} for r in _compiled.values()]


def compile_offline(fn: Any, arg_dtypes: Sequence[str], scalar_args: Sequence[tuple],
                    metaparams: dict[str, Any], *, compute_capability: int = 90,
                    num_warps: int | None = None, num_stages: int | None = None,
                    int_hints: bool = True) -> dict[str, Any]:
    """Compile ``fn`` as the GPU route would, without a GPU or jax-triton (for inspection:
    ``scripts/jax_triton_vs_torch.py --ptx`` and the tests). ``fn`` must be a JITFunction
    (``TRITON_INTERPRET`` unset); ``scalar_args`` are jax-triton's ``(index, type, value)``.
    ``int_hints=False`` compiles as jax-triton 0.3.1 itself does (no divisibility hint on
    runtime ints). Returns the record :func:`compiled_kernels` lists."""
    import types

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
