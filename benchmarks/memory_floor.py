"""The memory-floor benchmark of the elementwise scans, on a CUDA GPU, in one run.

For each (op, shape): our PyTorch Triton path, our JAX Triton path (jax-triton), JAX eager
(XLA's scan of the eager twin, jitted) and accelerated-scan where it solves the same problem.
The floor is the bytes the op must move (inputs read once, outputs written once) at the
device-to-device copy bandwidth measured in the same run.

Every backend is timed two ways: by wall clock (median of ``--repeats`` calls, each followed
by a device sync; the only timer that treats PyTorch and JAX alike) and, for PyTorch, by
``triton.testing.do_bench`` (CUDA events, L2 flushed) — both through the harness's
:func:`mingru_cli.bench.time_call`, with its :func:`~mingru_cli.bench.copy_bandwidth`. Writes ``memory_floor.json`` and
``memory_floor.md`` to ``--out``.

    python benchmarks/memory_floor.py --out out
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import torch  # noqa: E402

from mingru_cli.bench import copy_bandwidth, time_call  # noqa: E402

SHAPES = {"long": (16, 1024, 64), "16k": (16, 16384, 128), "big": (8, 65536, 1536)}
# A size ladder at B16 D128 (65 k to 67 M state elements), for where each frontend's ``auto``
# should switch from its eager path to the kernels (--ladder): T = 2^5 ... 2^15.
LADDER = {f"T{T}": (16, T, 128) for T in (32, 128, 512, 2048, 8192, 32768)}
SHAPES.update(LADDER)
LADDER_OPS = ("parallel_scan_log", "linear_recurrence", "mingru_cell", "signed_mingru_cell")
CASES = [  # (op, shape, modes)
    # fwd+bwd at the big shape too: the memory-floor issue asks for <= 0.5x JAX eager there.
    ("parallel_scan_log", "big", ("fwd", "fwd+bwd")),
    ("parallel_scan_log", "16k", ("fwd", "fwd+bwd")),
    ("parallel_scan_log", "long", ("fwd", "fwd+bwd")),
    ("linear_recurrence", "big", ("fwd",)),
    ("linear_recurrence", "16k", ("fwd", "fwd+bwd")),
    ("linear_recurrence", "long", ("fwd", "fwd+bwd")),
    ("linear_scan", "big", ("fwd",)),
    ("linear_scan", "16k", ("fwd", "fwd+bwd")),
    ("mingru_cell", "big", ("fwd",)),
    ("mingru_cell", "16k", ("fwd", "fwd+bwd")),
    ("mingru_cell", "long", ("fwd", "fwd+bwd")),
    ("signed_mingru_cell", "big", ("fwd",)),
    ("signed_mingru_cell", "16k", ("fwd", "fwd+bwd")),
]
# The fused cells read their pre-activations k (B, T, n·D) and h_0 (B, D).
CELL_GATES = {"mingru_cell": 2, "signed_mingru_cell": 3}


def wall_ms(fn: Callable[[], Any], repeats: int) -> float:
    return time_call(fn, "cuda", warmup=3, repeats=repeats, wall=True)


def events_ms(fn: Callable[[], Any]) -> float:
    return time_call(fn, "cuda", warmup=3, repeats=1)


def floor_bytes(op: str, B: int, T: int, D: int) -> int:
    n = B * T * D * 4
    return {"parallel_scan_log": 3 * n, "linear_recurrence": 3 * n, "linear_scan": 4 * n,
            "mingru_cell": 3 * n, "signed_mingru_cell": 4 * n}[op]


def torch_inputs(op: str, B: int, T: int, D: int, grad: bool):
    g = torch.Generator(device="cuda").manual_seed(0)
    if op in CELL_GATES:
        xs = (torch.randn(B, T, CELL_GATES[op] * D, device="cuda", generator=g),
              torch.rand(B, D, device="cuda", generator=g) + 0.1)
    elif op == "parallel_scan_log":
        xs = (-torch.rand(B, T, D, device="cuda", generator=g),
              torch.randn(B, T + 1, D, device="cuda", generator=g))
    else:
        xs = (torch.rand(B, T, D, device="cuda", generator=g),
              torch.randn(B, T, D, device="cuda", generator=g))
    return tuple(x.requires_grad_(grad) for x in xs)


def torch_runner(op: str, mode: str, xs, backend: str = "triton") -> Callable[[], Any]:
    import mingru

    fn = getattr(mingru, op)

    def fwd():
        with torch.no_grad(), mingru.use_backend(backend):
            return fn(*xs)

    def fwd_bwd():
        with mingru.use_backend(backend):
            out = fn(*xs)
        out = out if isinstance(out, tuple) else (out,)
        sum(o.float().sum() for o in out).backward()

    return fwd if mode == "fwd" else fwd_bwd


def acc_runner(op: str, mode: str, B: int, T: int, D: int) -> Callable[[], Any] | None:
    if op != "linear_recurrence":
        return None
    try:
        from accelerated_scan.scalar import scan
    except Exception:
        return None
    a, b = (x.detach().transpose(1, 2).contiguous().requires_grad_(mode != "fwd")
            for x in torch_inputs(op, B, T, D, False))

    def fwd():
        with torch.no_grad():
            return scan(a, b)

    def fwd_bwd():
        scan(a, b).sum().backward()

    return fwd if mode == "fwd" else fwd_bwd


def jax_runners(op: str, mode: str, xs) -> dict[str, Callable[[], Any]]:
    import jax
    import jax.numpy as jnp

    import mingru_jax

    arrays = [jnp.asarray(x.detach().cpu().numpy()) for x in xs]
    fn = getattr(mingru_jax, op)

    def loss(*a):
        out = fn(*a)
        out = out if isinstance(out, tuple) else (out,)
        return sum(o.astype(jnp.float32).sum() for o in out)

    out = {}
    for backend in ("jax-eager", "jax-triton"):
        with mingru_jax.use_backend("eager" if backend == "jax-eager" else "triton"):
            # A fresh function per backend: jax.jit caches traces by function, and the backend
            # is read at trace time, so a second jax.jit(fn) would replay the first trace.
            f = (jax.jit(lambda *a: fn(*a)) if mode == "fwd"
                 else jax.jit(jax.grad(loss, argnums=(0, 1))))
            jax.block_until_ready(f(*arrays))  # compile inside the backend's context
        out[backend] = lambda f=f: jax.block_until_ready(f(*arrays))
    return out


def versions() -> dict[str, str]:
    import triton

    v = {"torch": torch.__version__, "triton": triton.__version__,
         "python": platform.python_version(), "gpu": torch.cuda.get_device_name()}
    for name in ("jax", "jax_triton", "accelerated_scan"):
        try:
            v[name] = __import__(name).__version__
        except Exception as exc:  # not installed, or no __version__
            v[name] = f"n/a ({type(exc).__name__})"
    # MINGRU_COMMIT names the commit when the tree was copied without its git metadata.
    v["commit"] = os.environ.get("MINGRU_COMMIT", "")
    if not v["commit"]:
        try:
            v["commit"] = subprocess.check_output(["git", "rev-parse", "--short", "HEAD"],
                                                  text=True).strip()
        except Exception:
            v["commit"] = "unknown"
    return v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="out")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--ops", default="", help="comma-separated ops (default: all)")
    parser.add_argument("--shapes", default="",
                        help="comma-separated shape names of the fixed cases (default: all)")
    parser.add_argument("--no-jax", action="store_true")
    parser.add_argument("--ladder", action="store_true",
                        help="instead of the fixed cases: every op at every LADDER shape, fwd "
                             "and fwd+bwd")
    args = parser.parse_args()
    ops = {o for o in args.ops.split(",") if o}
    shapes = {s for s in args.shapes.split(",") if s}
    cases = CASES
    if args.ladder:
        cases = [(op, shape, ("fwd", "fwd+bwd")) for op in LADDER_OPS for shape in LADDER]
    bw = copy_bandwidth("cuda") / 1e3  # bytes per ms
    rows = []
    for op, shape, modes in cases:
        if (ops and op not in ops) or (shapes and shape not in shapes):
            continue
        B, T, D = SHAPES[shape]
        for mode in modes:
            xs = torch_inputs(op, B, T, D, mode != "fwd")
            runs = {"torch-triton": torch_runner(op, mode, xs)}
            if args.ladder:  # where PyTorch's auto should switch: its eager path beside
                runs["torch-eager"] = torch_runner(op, mode, xs, "eager")
            acc = acc_runner(op, mode, B, T, D)
            if acc is not None:
                runs["accelerated-scan"] = acc
            if not args.no_jax:
                try:
                    runs.update(jax_runners(op, mode, xs))
                except Exception as exc:
                    print(f"jax skipped for {op} {shape} {mode}: {type(exc).__name__}: {exc}")
            row = {"op": op, "shape": shape, "B": B, "T": T, "D": D, "mode": mode}
            for name, fn in runs.items():
                try:
                    row[f"{name} wall"] = wall_ms(fn, args.repeats)
                    if not name.startswith("jax"):
                        row[f"{name} events"] = events_ms(fn)
                except Exception as exc:
                    row[f"{name} error"] = f"{type(exc).__name__}: {exc}"[:200]
            if mode == "fwd":
                floor = floor_bytes(op, B, T, D) / bw
                row["floor ms"] = floor
                if "torch-triton events" in row:
                    row["% of floor"] = 100 * floor / row["torch-triton events"]
            rows.append(row)
            print(json.dumps(row), flush=True)
            del xs, runs
            torch.cuda.empty_cache()
    result = {"versions": versions(), "copy TB/s": bw / 1e9, "rows": rows}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "memory_floor.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "memory_floor.md").write_text(to_markdown(result) + "\n")
    print(to_markdown(result))
    return 0


def to_markdown(result: dict) -> str:
    cols = ["torch-triton events", "torch-triton wall", "torch-eager events", "torch-eager wall",
            "jax-triton wall", "jax-eager wall",
            "accelerated-scan events", "accelerated-scan wall", "floor ms", "% of floor"]
    lines = [f"copy bandwidth {result['copy TB/s']:.2f} TB/s; " + ", ".join(
        f"{k} {v}" for k, v in result["versions"].items()), "",
        "| op | shape | mode | " + " | ".join(cols) + " | jax-triton / torch-triton (wall) |",
        "|" + "---|" * (len(cols) + 4)]
    for r in result["rows"]:
        cells = [f"{r[c]:.3f}" if isinstance(r.get(c), float) else "—" for c in cols]
        ratio = "—"
        if isinstance(r.get("jax-triton wall"), float) and isinstance(r.get("torch-triton wall"), float):
            ratio = f"{r['jax-triton wall'] / r['torch-triton wall']:.2f}"
        lines.append(f"| {r['op']} | {r['shape']} | {r['mode']} | " + " | ".join(cells)
                     + f" | {ratio} |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
