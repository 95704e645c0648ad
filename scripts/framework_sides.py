"""The two sides ``jax_triton_vs_torch.py`` times: the same op through PyTorch (``mingru``)
and through jax-triton (``mingru_jax``), on inputs generated once in NumPy, each timed as one
call then a device sync and as a loop of calls then one sync (:func:`timed`); plus each
framework's own cost of a synced ``x * 2`` of the same size (``trivial``).

Imported by ``scripts/jax_triton_vs_torch.py``, which sets up the environment (JAX's memory
preallocation off, ``mingru_kernels`` importable) before importing this module.
"""

from __future__ import annotations

import gc
import os
import statistics
import time
from typing import Any

import numpy as np
from compiled_kernels import summarise_compiled

# ----------------------------------------------------------------------------- inputs


def make_inputs(op: str, B: int, T: int, D: int, dtype: str, seed: int = 0) -> list[np.ndarray]:
    """The op's inputs, float32 NumPy (cast per frontend): coefficients just below 1 (running
    products stay normal numbers over 65536 steps), normal inputs."""
    rng = np.random.default_rng(seed)
    coef = rng.random((B, T, D), dtype=np.float32)
    coef *= np.float32(-1e-3)  # log a in (-1e-3, 0]
    if op != "parallel_scan_log":
        np.exp(coef, out=coef)  # a in (0.999, 1]
    second = rng.standard_normal((B, T + 1 if op == "parallel_scan_log" else T, D),
                                 dtype=np.float32)
    return [coef, second]


def cotangents(outs_shapes: list[tuple[int, ...]], seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s, dtype=np.float32) for s in outs_shapes]


def out_shapes(op: str, B: int, T: int, D: int) -> list[tuple[int, ...]]:
    return [(B, T, D), (B, T, D)] if op == "linear_scan" else [(B, T, D)]


def sample(x: Any) -> np.ndarray:
    """A strided sample of a (B, T, D) array as float64 NumPy (a few thousand elements)."""
    B, T, D = x.shape
    s = x[:, :: max(1, T // 64), :: max(1, D // 16)]
    if hasattr(s, "detach"):
        s = s.detach().float().cpu().numpy()
    return np.asarray(s, dtype=np.float64)


def rel(got: np.ndarray | None, want: np.ndarray | None) -> float | None:
    if got is None or want is None:
        return None
    scale = max(float(np.abs(want).max()), 1e-30)
    return float(np.abs(got - want).max() / scale)


# ----------------------------------------------------------------------------- timing


def timed(call, sync, iters: int, warmup: int, loop: int, budget_s: float) -> dict[str, Any]:
    """Median wall time of ``call(); sync()`` (ms) and of ``loop`` calls then one sync, per
    call. Warm-up first (compiles); ``iters`` shrinks so a row stays within ``budget_s``."""
    t0 = time.perf_counter()
    out = call()
    sync(out)
    first = time.perf_counter() - t0
    for _ in range(max(0, warmup - 1)):
        sync(call())
    t0 = time.perf_counter()
    sync(call())
    one = time.perf_counter() - t0
    n = int(max(5, min(iters, budget_s / max(one, 1e-6))))
    samples = []
    for _ in range(n):
        t0 = time.perf_counter()
        sync(call())
        samples.append(time.perf_counter() - t0)
    loops = []
    for _ in range(max(3, n // max(loop, 1))):
        t0 = time.perf_counter()
        for _ in range(loop):
            last = call()
        sync(last)
        loops.append((time.perf_counter() - t0) / loop)
    return dict(ms=1e3 * statistics.median(samples), loop_ms=1e3 * statistics.median(loops),
                first_call_s=first, n=n, out=out)


# ----------------------------------------------------------------------------- torch side


class TorchSide:
    def __init__(self, smoke: bool = False) -> None:
        import torch

        import mingru

        self.torch, self.mingru = torch, mingru
        self.device = "cpu" if smoke else "cuda"
        status = mingru.available()
        if status is not True or not (smoke or torch.cuda.is_available()):
            raise RuntimeError(f"PyTorch Triton path unavailable: {status}")

    def sync(self, _out=None) -> None:
        if self.device == "cuda":
            self.torch.cuda.synchronize()

    def run(self, op, mode, host_inputs, host_cts, dtype, args) -> dict[str, Any]:
        torch, mingru = self.torch, self.mingru
        tdt = getattr(torch, dtype)
        xs = [torch.from_numpy(x).to(self.device, tdt) for x in host_inputs]
        fn = getattr(mingru, op)
        if mode == "fwd":
            def call():
                with mingru.use_backend("triton"), torch.no_grad():
                    return fn(*xs)
        else:
            for x in xs:
                x.requires_grad_(True)
            cts = [torch.from_numpy(c).to(self.device, tdt) for c in host_cts]

            def call():
                with mingru.use_backend("triton"):
                    outs = fn(*xs)
                    outs = outs if isinstance(outs, tuple) else (outs,)
                    return torch.autograd.grad(outs, xs, cts)
        try:
            res = timed(call, self.sync, args.iters, args.warmup, args.loop, args.budget)
            out = res.pop("out")
            first = out[0] if isinstance(out, tuple) else out
            res["sample"] = sample(first)
            return res
        finally:
            xs.clear()  # free the device copies before the next cell
            gc.collect()
            if self.device == "cuda":
                torch.cuda.empty_cache()

    def trivial(self, host: np.ndarray, args) -> dict[str, Any]:
        """``x * 2`` on ``host``'s size (one elementwise kernel), timed like an op: the
        framework's own cost of a synced call of that size."""
        x = self.torch.from_numpy(host).to(self.device)
        res = timed(lambda: x * 2, self.sync, args.iters, args.warmup, args.loop, args.budget)
        res.pop("out")
        return res

    def compiled(self) -> list[dict[str, Any]]:
        """Every CompiledKernel in the device caches of the kernels these ops launch."""
        import importlib

        found = []
        for mod_name in ("mingru_kernels.linear_recurrence", "mingru_kernels.linear_scan",
                         "mingru_kernels.parallel_scan_log", "mingru_kernels._scan_common"):
            mod = importlib.import_module(mod_name)
            for name in dir(mod):
                fn = getattr(mod, name)
                caches = getattr(fn, "device_caches", None)
                if not caches or getattr(fn, "__module__", mod_name) != mod_name:
                    continue
                for entry in caches.values():
                    kcache = entry[0] if isinstance(entry, tuple) else entry
                    for ck in getattr(kcache, "values", lambda: [])():
                        if hasattr(ck, "asm"):
                            found.append(summarise_compiled(name, ck))
        return found


# ----------------------------------------------------------------------------- jax side


class JaxSide:
    def __init__(self, want_stock_dump: str | None, smoke: bool = False) -> None:
        if want_stock_dump:  # read by jax-triton at import
            os.environ.setdefault("JAX_TRITON_DUMP_DIR", want_stock_dump)
        import jax

        import mingru_jax
        from mingru_jax._launch import _compile

        self.jax, self.mingru_jax, self.hook = jax, mingru_jax, _compile
        status = mingru_jax.available()
        if status is not True or not (smoke or jax.default_backend() == "gpu"):
            raise RuntimeError(f"jax-triton path unavailable: {status} "
                               f"(jax backend {jax.default_backend()})")

    def sync(self, out) -> None:
        self.jax.block_until_ready(out)

    def trivial(self, host: np.ndarray, args) -> dict[str, Any]:
        """The jitted ``x * 2`` on ``host``'s size, timed like an op (see ``TorchSide``)."""
        x = self.jax.device_put(host)
        double = self.jax.jit(lambda v: v * 2)
        try:
            res = timed(lambda: double(x), self.sync, args.iters, args.warmup, args.loop,
                        args.budget)
            res.pop("out")
            return res
        finally:
            x.delete()

    def function(self, op: str, mode: str, backend: str):
        jax, mingru_jax = self.jax, self.mingru_jax
        fn = getattr(mingru_jax, op)

        def forward(*xs):
            with mingru_jax.use_backend(backend):  # read at trace time: baked into the jit
                return fn(*xs)

        if mode == "fwd":
            return jax.jit(forward)

        def fwd_bwd(xs, cts):
            outs, vjp = jax.vjp(forward, *xs)
            return vjp(tuple(cts) if isinstance(outs, tuple) else cts[0])

        return jax.jit(fwd_bwd)

    def run(self, op, mode, host_inputs, host_cts, dtype, args, backend="triton",
            stock=False) -> dict[str, Any]:
        jax = self.jax
        jdt = getattr(jax.numpy, dtype)
        xs = [jax.device_put(x).astype(jdt) for x in host_inputs]
        cts = [jax.device_put(c).astype(jdt) for c in host_cts] if mode != "fwd" else []
        self.hook.ENABLED = not stock
        try:
            f = self.function(op, mode, backend)
            call_args = (tuple(xs),) if mode == "fwd" else (tuple(xs), tuple(cts))
            if mode == "fwd":
                call = lambda: f(*call_args[0])
                hlo = f.lower(*call_args[0]).as_text()
            else:
                call = lambda: f(*call_args)
                hlo = f.lower(*call_args).as_text()
            res = timed(call, self.sync, args.iters, args.warmup, args.loop, args.budget)
            out = res.pop("out")
            first = out[0] if isinstance(out, (tuple, list)) else out
            res["sample"] = sample(first)
            res["triton_calls_in_hlo"] = hlo.count("triton_kernel_call")
            return res
        finally:
            self.hook.ENABLED = True
            for x in [*xs, *cts]:
                x.delete()
            gc.collect()

    def compiled(self) -> list[dict[str, Any]]:
        out = []
        for r in self.hook.compiled_kernels():
            s = summarise_compiled(r["fn"].__name__, r["compiled"])
            s.update(options=r["options"], ints_divisible_16=r["divisible_16"])
            out.append(s)
        return out

    def stock_cache_keys(self) -> list[str]:
        """jax-triton's own cache keys (signature, specialization, constants, warps, stages)."""
        try:
            from jax_triton import triton_lib
        except ImportError:
            return []
        keys = []
        for key in getattr(triton_lib, "_COMPILED_KERNEL_CACHE", {}):
            fn, *rest = key
            keys.append(f"{getattr(fn, '__name__', fn)} {rest}")
        return keys
