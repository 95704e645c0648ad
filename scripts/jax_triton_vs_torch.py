"""The same Triton kernels through jax-triton (``mingru_jax``) and through PyTorch (``mingru``):
wall-clock time per call with a device sync, side by side, plus what each side compiled.

For each op (``linear_recurrence``, ``linear_scan``, ``parallel_scan_log``), mode (forward;
forward + backward) and shape, the script times

* ``torch``: ``mingru.<op>`` under ``mingru.use_backend("triton")``, synchronised with
  ``torch.cuda.synchronize()``;
* ``jax``: ``jax.jit`` of ``mingru_jax.<op>`` traced under ``use_backend("triton")``, with
  ``block_until_ready`` (compiled by this repository's hook, ``mingru_jax/_launch/_compile.py``);
* ``jax-stock`` (``--stock``): the same, lowered with jax-triton's own compile (no
  divisibility hint on runtime ints: the A/B of the hook);
* ``xla``: the jitted XLA eager twin (``use_backend("eager")``),

on the same inputs (generated once in NumPy), median of many calls after warm-up. ``ms`` is
one call then a sync; ``loop`` is ``--loop`` calls then one sync, per call (launch overhead
overlapped). Every row checks that the jax outputs match torch's (a strided sample) and that
the jitted HLO holds ``triton_kernel_call`` custom calls. The table is printed and written as
JSON (``ratio`` = jax / torch per row).

``--call-floor`` adds, per shape, a jitted ``x * 2`` on a ``(B, T, D)`` array against PyTorch's,
timed the same way: what a synced call of that size costs each framework with no kernel of
ours in it. Its jax − torch difference is the part of an op's ratio no launcher can change.

``--dump DIR`` writes what both sides compiled: per kernel variant the constexprs, which
runtime ints were specialised as divisible by 16, ``num_warps`` / ``num_stages``, shared
memory, and the PTX (files plus a count of 128-bit ``ld/st.global.v4`` against 32-bit
accesses) — from the hook's records on the jax side and from each ``JITFunction``'s
``device_caches`` on the torch side. With ``--stock`` jax-triton's own compile is dumped by
jax-triton itself (``JAX_TRITON_DUMP_DIR``, set before it is imported).

``--ptx`` runs without a GPU (and without jax-triton or torch): it traces the jax launchers
with ``jax.make_jaxpr`` (nothing runs), compiles every launch for ``sm_90`` twice — as
jax-triton 0.3.1 does and as PyTorch's launcher does — and prints the PTX's vector-access
counts for both, so the specialisation difference is visible offline.

GPU (from the repository root; jax-triton on ``PYTHONPATH``)::

    PYTHONPATH=/tmp/site:$PYTHONPATH python3 scripts/jax_triton_vs_torch.py --stock \\
        --json $OUT/jax_triton_vs_torch.json --dump $OUT/jt_dump

Offline::

    python3 scripts/jax_triton_vs_torch.py --ptx
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gc
import json
import os
import platform
import sys
import traceback
from pathlib import Path
from typing import Any

# Both frameworks share one GPU: JAX must not take 75% of it up front.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _ensure_mingru_kernels() -> None:
    """``kernels/`` is installed as ``mingru_kernels``; without an install, map it by hand."""
    import importlib.util

    if importlib.util.find_spec("mingru_kernels") is not None:
        return
    spec = importlib.util.spec_from_file_location(
        "mingru_kernels", ROOT / "kernels" / "__init__.py",
        submodule_search_locations=[str(ROOT / "kernels")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["mingru_kernels"] = module
    spec.loader.exec_module(module)


_ensure_mingru_kernels()

import numpy as np  # noqa: E402
from compiled_kernels import (  # noqa: E402
    offline_ptx,
    print_kernels,
    write_dump,
)
from framework_sides import (  # noqa: E402
    JaxSide,
    TorchSide,
    cotangents,
    make_inputs,
    out_shapes,
    rel,
)

OPS = ("linear_recurrence", "linear_scan", "parallel_scan_log")
DEFAULT_SHAPES = "8x65536x1536:fwd,16x16384x128,16x1024x64"

# ----------------------------------------------------------------------------- main


def parse_shapes(spec: str) -> list[tuple[int, int, int, tuple[str, ...]]]:
    """``BxTxD[:fwd]`` items, comma-separated; without ``:fwd`` both modes run."""
    out = []
    for item in spec.split(","):
        dims, _, modes = item.strip().partition(":")
        B, T, D = (int(v) for v in dims.lower().split("x"))
        out.append((B, T, D, ("fwd",) if modes == "fwd" else ("fwd", "fwd+bwd")))
    return out


def _fmt(v: Any, width: int = 8, digits: int = 3) -> str:
    if v is None:
        return f"{'-':>{width}}"
    if isinstance(v, str):
        return f"{v[:width]:>{width}}"
    return f"{v:>{width}.{digits}f}"



def parse_plan(text: str) -> dict[str, int | str]:
    """``'strategy=lookback,block_t=16'`` → ``{'strategy': 'lookback', 'block_t': 16}``."""
    plan: dict[str, int | str] = {}
    for item in filter(None, text.split(",")):
        key, _, value = item.partition("=")
        if not value:
            raise argparse.ArgumentTypeError(f"--plan: expected key=value, got {item!r}")
        plan[key.strip()] = int(value) if value.strip().lstrip("-").isdigit() else value.strip()
    return plan

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ops", default=",".join(OPS), type=lambda s: s.split(","))
    p.add_argument("--shapes", default=DEFAULT_SHAPES, help=f"default {DEFAULT_SHAPES}")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    p.add_argument("--iters", type=int, default=100, help="timed calls per row (at most)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--loop", type=int, default=10, help="calls per sync for the loop column")
    p.add_argument("--budget", type=float, default=2.0, help="seconds of timed calls per cell")
    p.add_argument("--stock", action="store_true",
                   help="also time jax-triton's own compile (the hook off)")
    p.add_argument("--no-eager", action="store_true", help="skip the XLA eager twin")
    p.add_argument("--call-floor", action="store_true",
                   help="per shape, also time x * 2 on a (B, T, D) array in both frameworks, "
                        "synced per call: each framework's own cost of such a call, the part "
                        "of a jax / torch ratio no kernel or launcher can change")
    p.add_argument("--no-torch", action="store_true")
    p.add_argument("--plan", default="", type=parse_plan,
                   help="force launch-plan choices on both sides, e.g. 'strategy=lookback' or "
                        "'block_t=16,block_d=128,num_warps=1' (mingru_kernels.launch.switches)")
    p.add_argument("--json", default=None, help="write the rows here (default: $OUT or .)")
    p.add_argument("--dump", default=None, help="folder for the compiled kernels of both sides")
    p.add_argument("--ptx", action="store_true",
                   help="offline: compile the jax launches for sm_90 both ways, no GPU")
    p.add_argument("--smoke", action="store_true",
                   help="run the timing flow on CPU through Triton's interpreter (tiny shapes; "
                        "checks the script, the times mean nothing)")
    args = p.parse_args()
    if args.ptx:
        return offline_ptx(parse_shapes(args.shapes), args.ops, args.dtype, args.json)
    if args.smoke:
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports triton
        os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if args.json is None:
        args.json = str(Path(os.environ.get("OUT", ".")) / "jax_triton_vs_torch.json")
    dump = Path(args.dump) if args.dump else None

    from mingru_kernels.launch import switches  # after --smoke has chosen the interpreter

    torch_side = jax_side = None
    errors: dict[str, str] = {}
    if not args.no_torch:
        try:
            torch_side = TorchSide(args.smoke)
        except Exception as exc:
            errors["torch"] = f"{type(exc).__name__}: {exc}"
            print(f"skipping torch: {errors['torch']}")
    try:
        jax_side = JaxSide(str(dump / "jax_triton_stock") if dump and args.stock else None,
                           args.smoke)
    except Exception as exc:
        errors["jax"] = f"{type(exc).__name__}: {exc}"
        print(f"skipping jax: {errors['jax']}")
    if torch_side is None and jax_side is None:
        print("nothing to time", file=sys.stderr)
        return 1

    env = dict(python=platform.python_version())
    for mod in ("jax", "jaxlib", "jax_triton", "triton", "torch"):
        try:
            env[mod] = __import__(mod).__version__
        except Exception:
            env[mod] = None
    if torch_side is not None and torch_side.device == "cuda":
        env["device"] = torch_side.torch.cuda.get_device_name()
    elif jax_side is not None:
        env["device"] = str(jax_side.jax.devices()[0].device_kind)
    print(json.dumps(env))

    variants = [("jax", "triton", False)]
    if args.stock:
        variants.append(("jax_stock", "triton", True))
    if not args.no_eager:
        variants.append(("xla", "eager", False))

    rows = []
    header = (f"{'op':<18} {'shape':<14} {'mode':<8} {'torch ms':>9} {'jax ms':>9} "
              f"{'ratio':>6} " + (f"{'stock ms':>9} {'ratio':>6} " if args.stock else "")
              + ("" if args.no_eager else f"{'xla ms':>9} {'ratio':>6} ")
              + f"{'loop t/j':>15} {'max rel':>8} {'tk':>3}")
    print(header)
    for B, T, D, modes in parse_shapes(args.shapes):
        if args.call_floor and torch_side is not None and jax_side is not None:
            host = np.random.default_rng(0).standard_normal((B, T, D), dtype=np.float32)
            row = dict(op="x * 2", shape=[B, T, D], mode="fwd", dtype=str(host.dtype),
                       torch=torch_side.trivial(host, args), jax=jax_side.trivial(host, args))
            row["jax"]["ratio_vs_torch"] = row["jax"]["ms"] / row["torch"]["ms"]
            row["jax"]["extra_ms_per_synced_call"] = row["jax"]["ms"] - row["torch"]["ms"]
            rows.append(row)
            t, j = row["torch"], row["jax"]
            print(f"{'x * 2':<18} {f'{B}x{T}x{D}':<14} {'fwd':<8} {_fmt(t['ms'], 9)} "
                  f"{_fmt(j['ms'], 9)} {_fmt(j['ratio_vs_torch'], 6, 2)}   loop "
                  f"{_fmt(t['loop_ms'], 7)}/{_fmt(j['loop_ms'], 7)}", flush=True)
        for op in args.ops:
            host = make_inputs(op, B, T, D, args.dtype)
            # Forced choices are read when a launch is planned: while torch calls and while
            # jax traces, both inside this block.
            forced = (functools.partial(switches.forced, op, **args.plan) if args.plan
                      else contextlib.nullcontext)
            for mode in modes:
                cts = cotangents(out_shapes(op, B, T, D)) if mode != "fwd" else []
                row: dict[str, Any] = dict(op=op, shape=[B, T, D], mode=mode, dtype=args.dtype)
                ref = None
                if torch_side is not None:
                    try:
                        with forced():
                            r = torch_side.run(op, mode, host, cts, args.dtype, args)
                        ref = r.pop("sample")
                        row["torch"] = r
                    except Exception as exc:
                        row["torch"] = dict(error=f"{type(exc).__name__}: {exc}")
                        traceback.print_exc()
                if jax_side is not None:
                    for label, backend, stock in variants:
                        try:
                            with forced():
                                r = jax_side.run(op, mode, host, cts, args.dtype, args, backend,
                                                 stock)
                            r["max_rel_vs_torch"] = rel(r.pop("sample"), ref)
                            row[label] = r
                        except Exception as exc:
                            msg = f"{type(exc).__name__}: {exc}"
                            row[label] = dict(error="OOM" if "RESOURCE_EXHAUSTED" in msg
                                              or "out of memory" in msg.lower() else msg[:500])
                            if row[label]["error"] != "OOM":
                                traceback.print_exc()
                t_ms = row.get("torch", {}).get("ms")
                for label, _, _ in variants:
                    cell = row.get(label, {})
                    if t_ms and cell.get("ms"):
                        cell["ratio_vs_torch"] = cell["ms"] / t_ms
                        cell["loop_ratio_vs_torch"] = cell["loop_ms"] / row["torch"]["loop_ms"]
                rows.append(row)
                j, s, x, t = (row.get(k, {}) for k in ("jax", "jax_stock", "xla", "torch"))
                line = (f"{op:<18} {f'{B}x{T}x{D}':<14} {mode:<8} {_fmt(t.get('ms'), 9)} "
                        f"{_fmt(j.get('ms') or j.get('error'), 9)} "
                        f"{_fmt(j.get('ratio_vs_torch'), 6, 2)} ")
                if args.stock:
                    line += (f"{_fmt(s.get('ms') or s.get('error'), 9)} "
                             f"{_fmt(s.get('ratio_vs_torch'), 6, 2)} ")
                if not args.no_eager:
                    line += (f"{_fmt(x.get('ms') or x.get('error'), 9)} "
                             f"{_fmt(x.get('ratio_vs_torch'), 6, 2)} ")
                loops = f"{_fmt(t.get('loop_ms'), 7)}/{_fmt(j.get('loop_ms'), 7)}"
                mr = j.get("max_rel_vs_torch")
                mr_s = f"{mr:8.1e}" if mr is not None else f"{'-':>8}"
                line += f"{loops:>15} {mr_s} {j.get('triton_calls_in_hlo', '-'):>3}"
                print(line, flush=True)
            del host
            gc.collect()

    result: dict[str, Any] = dict(env=env, errors=errors, rows=rows,
                                  note="ms: one call then a device sync (median); loop_ms: "
                                       f"{args.loop} calls then one sync, per call; ratio = "
                                       "jax / torch")
    if dump is not None:
        dump.mkdir(parents=True, exist_ok=True)
        if jax_side is not None:
            kernels = write_dump(dump, "jax", jax_side.compiled())
            print_kernels("jax (hook)", kernels)
            result["jax_compiled"] = kernels
            if args.stock:
                result["jax_triton_stock_cache_keys"] = jax_side.stock_cache_keys()
                print(f"\njax-triton's own compile: {len(result['jax_triton_stock_cache_keys'])} "
                      f"variants; its files are under {dump / 'jax_triton_stock'}")
        if torch_side is not None:
            kernels = write_dump(dump, "torch", torch_side.compiled())
            print_kernels("torch", kernels)
            result["torch_compiled"] = kernels
    ratios = [r["jax"]["ratio_vs_torch"] for r in rows
              if "ratio_vs_torch" in r.get("jax", {}) and r["op"] in args.ops]
    if ratios:
        result["worst_ratio"] = max(ratios)
        print(f"\nworst jax/torch ratio {max(ratios):.2f} (target <= 1.15)")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(result, indent=1, default=repr))
    print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
