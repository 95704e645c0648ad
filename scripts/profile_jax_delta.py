"""Where the jax-triton delta rule's wall time goes: GPU kernels against everything else.

For each shape, direction (``fwd``, ``fwd+bwd``) and frontend, the script times one jitted
call plus a device sync (wall clock, median), the same calls back to back with one sync at
the end (``loop``: host work overlapped), and, for JAX, one ``jax.profiler`` trace of
``--repeats`` calls read back with ``jax.profiler.ProfileData``: the device time of every GPU
event per call (kernels, copies, memsets), so wall minus GPU-busy is the host's share; the
GPU span per call (first kernel's start to last kernel's end: the idle time between one call's
kernels); and the host's largest events per call by name (``--host-events``). It
also counts the optimized HLO's instructions by opcode (custom calls, fusions, copies): what
XLA runs besides the Triton kernels. With ``--torch`` the PyTorch launcher is timed on the
same inputs in the same run (``torch`` rows). First, each framework's floor: one tiny call
plus a sync (``jit(x + 1)``, ``x + 1``) and one small Triton kernel through each launcher.

    PYTHONPATH=/tmp/site:$PYTHONPATH python3 scripts/profile_jax_delta.py \\
        --shapes 128,256,4,16 128,256,4,64 [--dtype bfloat16] [--nh 1] [--decay] [--torch]
"""

from __future__ import annotations

import argparse
import collections
import glob
import os
import re
import statistics
import tempfile
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import mingru_jax  # noqa: E402
from mingru_jax.scans import _delta_rule  # noqa: E402


def _inputs(B: int, T: int, H: int, d: int, nh: int, decay: bool, seed: int = 0):
    rng = np.random.default_rng(seed)
    k = rng.standard_normal((B, T, nh, H, d), dtype=np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    xs = [rng.standard_normal((B, T, H, d), dtype=np.float32), k,
          rng.standard_normal((B, T, nh, H, d), dtype=np.float32),
          rng.random((B, T, nh, H), dtype=np.float32)]
    if decay:
        xs.append(np.log(rng.uniform(0.5, 1.0, (B, T, H))).astype(np.float32))
    return xs


def _jax_fns(n_args: int):
    def traced(*xs):
        with mingru_jax.use_backend("triton"):
            q, k, v, beta, *lg = xs
            return _delta_rule(q, k, v, beta, lg[0] if lg else None, None, 64)

    def loss(*xs):
        o, h = traced(*xs)
        return jnp.sum(o.astype(jnp.float32)) + jnp.sum(h.astype(jnp.float32))

    return {"fwd": jax.jit(traced),
            "fwd+bwd": jax.jit(jax.grad(loss, argnums=tuple(range(n_args))))}


def _torch_fns(n_args: int):
    import torch

    from mingru import dispatch
    from mingru.scans import _delta_rule as torch_delta

    def fwd(*xs):
        with dispatch.use_backend("triton"):
            q, k, v, beta, *lg = xs
            return torch_delta(q, k, v, beta, lg[0] if lg else None, None, 64)

    def fwd_bwd(*xs):
        xs = [x.detach().requires_grad_() for x in xs]
        o, h = fwd(*xs)
        (o.float().sum() + h.float().sum()).backward()
        return xs[0].grad

    return {"fwd": fwd, "fwd+bwd": fwd_bwd}, torch.cuda.synchronize


def _wall(call, sync, warmup: int, repeats: int, loop: int) -> tuple[float, float]:
    """(median ms of one call + sync, ms per call of ``loop`` calls then one sync).
    ``sync(out)`` waits for ``call()``'s result (and everything before it)."""
    for _ in range(warmup):
        sync(call())
    once = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sync(call())
        once.append((time.perf_counter() - t0) * 1e3)
    t0 = time.perf_counter()
    for _ in range(loop):
        out = call()
    sync(out)
    return statistics.median(once), (time.perf_counter() - t0) * 1e3 / loop


def _floors(repeats: int, loop: int, with_torch: bool) -> None:
    """Each framework's own latency for one tiny call plus a sync, measured the same way:
    the part of a wall time no kernel can remove (XLA's dispatch of a jitted program; a
    PyTorch launch), and the same for one small Triton kernel through each launcher."""
    x = jnp.ones((1, 8, 4), jnp.float32)
    add = jax.jit(lambda x: x + 1)
    wall, per = _wall(lambda: add(x), jax.block_until_ready, 5, repeats, loop)
    print(f"floor: jax jit(x + 1)            wall {wall:.3f} ms, loop {per:.3f} ms/call")

    def chained(n: int):
        # n dependent small launches in one program: how the latency grows per custom call.
        def scans(a, b):
            with mingru_jax.use_backend("triton"):
                for _ in range(n):
                    a, b = mingru_jax.linear_scan(a, b)
            return a, b

        return jax.jit(scans)

    for n in (1, 2, 4):
        fn = chained(n)
        wall, per = _wall(lambda fn=fn: fn(x, x), jax.block_until_ready, 5, repeats, loop)
        print(f"floor: jax-triton linear_scan x{n} wall {wall:.3f} ms, loop {per:.3f} ms/call "
              f"(HLO: {_hlo_opcodes(fn, (x, x))})")
    if with_torch:
        import torch

        import mingru

        t = torch.ones(1, 8, 4, device="cuda")
        sync = lambda _out: torch.cuda.synchronize()  # noqa: E731
        wall, per = _wall(lambda: t + 1, sync, 5, repeats, loop)
        print(f"floor: torch x + 1               wall {wall:.3f} ms, loop {per:.3f} ms/call")
        with mingru.use_backend("triton"):
            wall, per = _wall(lambda: mingru.linear_scan(t, t), sync, 5, repeats, loop)
        print(f"floor: torch triton linear_scan  wall {wall:.3f} ms, loop {per:.3f} ms/call")


def _trace(call, repeats: int) -> tuple[dict[str, float], float, dict[str, float]]:
    """One ``jax.profiler`` trace of ``repeats`` synchronised calls, read back: ms per call of
    every event on the GPU streams; the mean span per call from its first kernel's start to
    its last kernel's end (span minus kernel time = the GPU idling between this call's
    kernels); and ms per call of the host's events by name (where the host time goes)."""
    from jax.profiler import ProfileData

    call()
    folder = tempfile.mkdtemp(prefix="jaxprof")
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0  # Python frames would slow the calls and nest the events
    with jax.profiler.trace(folder, profiler_options=options):
        for _ in range(repeats):
            call()
    files = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
    device: dict[str, float] = collections.defaultdict(float)
    host: dict[str, float] = collections.defaultdict(float)
    kernels: list[tuple[float, float]] = []
    for path in files:
        for plane in ProfileData.from_file(path).planes:
            if plane.name.startswith("/host:"):
                for line in plane.lines:
                    for event in line.events:
                        host[event.name[:80]] += event.duration_ns / 1e6
                continue
            if not plane.name.startswith("/device:GPU"):
                continue
            names = [line.name for line in plane.lines]
            if not any(name.startswith("Stream") for name in names):
                print(f"    (no stream lines on {plane.name}: {names})")
            for line in plane.lines:
                # The stream lines hold the kernels; XLA's per-op and per-module lines repeat them.
                if not line.name.startswith("Stream"):
                    continue
                for event in line.events:
                    device[f"{line.name[:12]} {event.name[:70]}"] += event.duration_ns / 1e6
                    kernels.append((event.start_ns, event.start_ns + event.duration_ns))
    kernels.sort()
    per_call = len(kernels) // repeats if repeats else 0
    spans = [(kernels[i + per_call - 1][1] - kernels[i][0]) / 1e6
             for i in range(0, per_call * repeats, per_call)] if per_call else [0.0]
    return ({name: ms / repeats for name, ms in device.items()}, statistics.mean(spans),
            {name: ms / repeats for name, ms in host.items()})


def _hlo_opcodes(fn, xs) -> str:
    text = fn.lower(*xs).compile().as_text()
    ops = collections.Counter()
    for line in text.splitlines():
        # "%name = type opcode(operands)"; a tuple type holds spaces but no "word(".
        found = " = " in line and re.search(r"\s([a-z][a-z0-9-]*)\(", line.split(" = ", 1)[1])
        if found and "ENTRY" not in line:
            ops[found.group(1)] += 1
    keep = ("custom-call", "fusion", "copy", "transpose", "convert", "broadcast",
            "dynamic-update-slice", "pad", "slice", "reshape", "bitcast")
    return ", ".join(f"{op} {ops[op]}" for op in keep if ops[op])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", nargs="+", default=["128,256,4,16", "128,256,4,64"],
                    help="B,T,H,d per shape")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--nh", type=int, default=1)
    ap.add_argument("--decay", action="store_true")
    ap.add_argument("--repeats", type=int, default=20, help="profiled and timed calls")
    ap.add_argument("--loop", type=int, default=50, help="calls per back-to-back timing")
    ap.add_argument("--torch", action="store_true", help="time PyTorch's launcher too")
    ap.add_argument("--host-events", type=int, default=15,
                    help="how many of the trace's host events to list (largest first)")
    args = ap.parse_args()
    print(f"jax {jax.__version__} on {jax.devices()[0].device_kind}, {args.dtype}, nh {args.nh}"
          f"{', decay' if args.decay else ''}")
    _floors(args.repeats, args.loop, args.torch)
    for spec in args.shapes:
        B, T, H, d = map(int, spec.split(","))
        host = _inputs(B, T, H, d, args.nh, args.decay)
        xs = [jnp.asarray(x, dtype=args.dtype if i < 4 else jnp.float32)
              for i, x in enumerate(host)]
        for mode, fn in _jax_fns(len(xs)).items():
            call = lambda fn=fn, xs=xs: jax.block_until_ready(fn(*xs))  # noqa: E731
            call()
            wall, loop = _wall(lambda fn=fn, xs=xs: fn(*xs), jax.block_until_ready, 5,
                               args.repeats, args.loop)
            events, span, host_events = _trace(call, args.repeats)
            busy = sum(events.values())
            print(f"\n[{B},{T},{H},{d}] {mode:7s} jax   wall {wall:.3f} ms, loop {loop:.3f} ms/call,"
                  f" GPU events {busy:.3f} ms/call, host share {wall - busy:.3f} ms,"
                  f" GPU span {span:.3f} ms/call")
            print(f"    optimized HLO: {_hlo_opcodes(fn, xs)}")
            for name, ms in sorted(events.items(), key=lambda kv: -kv[1]):
                print(f"    {ms:8.4f} ms  {name}")
            print("    host events (ms per call, nested events each counted):")
            for name, ms in sorted(host_events.items(), key=lambda kv: -kv[1])[:args.host_events]:
                print(f"    {ms:8.4f} ms  {name}")
        if args.torch:
            import torch

            from mingru_cli.bench_profile import cuda_kernel_times

            dtype = getattr(torch, args.dtype)
            txs = [torch.as_tensor(x, device="cuda").to(dtype if i < 4 else torch.float32)
                   for i, x in enumerate(host)]
            fns, sync = _torch_fns(len(txs))
            for mode, fn in fns.items():
                wall, loop = _wall(lambda fn=fn, txs=txs: fn(*txs), lambda _out, sync=sync: sync(), 5,
                                   args.repeats, args.loop)
                kernels = cuda_kernel_times(lambda fn=fn, txs=txs: fn(*txs), args.repeats)
                print(f"[{B},{T},{H},{d}] {mode:7s} torch wall {wall:.3f} ms, "
                      f"loop {loop:.3f} ms/call, GPU events {sum(kernels.values()):.3f} ms/call")
                for name, ms in sorted(kernels.items(), key=lambda kv: -kv[1]):
                    print(f"    {ms:8.4f} ms  {name[:60]}")


if __name__ == "__main__":
    main()
