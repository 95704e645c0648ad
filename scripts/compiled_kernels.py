"""What Triton compiled for each frontend, for ``scripts/jax_triton_vs_torch.py``: the PTX's
global-access widths, per-variant summaries and dumps of both sides' compiled kernels, and the
offline ``--ptx`` comparison (every jax launch compiled for sm_90 as jax-triton does and as
PyTorch's launcher does, no GPU needed).
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path
from typing import Any

_LD = re.compile(r"\bld\.global((?:\.[\w:]+)*)")
_ST = re.compile(r"\bst\.global((?:\.[\w:]+)*)")


def ptx_stats(ptx: str) -> dict[str, int]:
    """Global loads / stores by width: 128-bit (``.v4`` of 32-bit), 64-bit, scalar."""
    out = dict(ptx_lines=ptx.count("\n"))
    for what, rx in (("ld", _LD), ("st", _ST)):
        mods = [m.group(1) for m in rx.finditer(ptx)]
        out[f"{what}_v4"] = sum(".v4" in m for m in mods)
        out[f"{what}_v2"] = sum(".v2" in m for m in mods)
        out[f"{what}_scalar"] = sum(".v4" not in m and ".v2" not in m for m in mods)
    return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {str(k): (v if isinstance(v, (int, float, str, bool, type(None))) else repr(v))
            for k, v in d.items()}


def summarise_compiled(kernel: str, ck: Any) -> dict[str, Any]:
    md = ck.metadata
    s: dict[str, Any] = dict(kernel=kernel, name=getattr(md, "name", "?"),
                             num_warps=getattr(md, "num_warps", None),
                             num_stages=getattr(md, "num_stages", None),
                             shared=getattr(md, "shared", None),
                             enable_fp_fusion=getattr(md, "enable_fp_fusion", None))
    src = getattr(ck, "src", None)
    if src is not None:
        names = list(getattr(src.fn, "arg_names", []))
        attrs = getattr(src, "attrs", {}) or {}
        s["divisible_16"] = [names[k[0]] if k and k[0] < len(names) else str(k)
                             for k, v in attrs.items() if "tt.divisibility" in str(v)]
        s["constexprs"] = {names[k[0]] if isinstance(k, tuple) and k and k[0] < len(names)
                           else str(k): repr(v) for k, v in getattr(src, "constants", {}).items()}
    try:
        s.update(ptx_stats(ck.asm["ptx"]))
    except Exception:
        pass
    s["_asm"] = ck.asm
    return s


def write_dump(dump: Path, side: str, kernels: list[dict[str, Any]]) -> list[dict[str, Any]]:
    folder = dump / side
    folder.mkdir(parents=True, exist_ok=True)
    clean = []
    for i, k in enumerate(kernels):
        asm = k.pop("_asm", {})
        for ext in ("ttir", "ttgir", "llir", "ptx"):
            try:
                text = asm[ext]
            except Exception:
                continue
            if isinstance(text, str):
                (folder / f"{i:03d}_{k['kernel']}.{ext}").write_text(text)
        k["files"] = f"{side}/{i:03d}_{k['kernel']}.*"
        clean.append(k)
    (folder / "kernels.json").write_text(json.dumps(clean, indent=1, default=repr))
    return clean


def print_kernels(side: str, kernels: list[dict[str, Any]]) -> None:
    print(f"\n{side}: {len(kernels)} compiled variants")
    for k in kernels:
        cx = k.get("constexprs", {})
        mode = {n: cx[n] for n in ("MODE", "BLOCK_T", "BLOCK_D", "BLOCK_N") if n in cx}
        print(f"  {k['kernel']:<32} {str(mode):<44} div16={k.get('divisible_16')} "
              f"warps={k.get('num_warps')} stages={k.get('num_stages')} "
              f"ld v4/v2/s={k.get('ld_v4')}/{k.get('ld_v2')}/{k.get('ld_scalar')} "
              f"st v4/v2/s={k.get('st_v4')}/{k.get('st_v2')}/{k.get('st_scalar')}")


# ----------------------------------------------------------------------------- offline (--ptx)


_TRITON_TYPE = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64",
                "int32": "i32", "int64": "i64"}


def _int_type(v: int) -> str:  # jax-triton's get_triton_type for ints
    if -(2**31) <= v < 2**31:
        return "i32"
    if 2**31 <= v < 2**32:
        return "u32"
    return "i64"


def offline_ptx(shapes: list[tuple[int, int, int, tuple[str, ...]]], ops: list[str], dtype: str,
                json_path: str | None) -> int:
    """``--ptx``: every launch of ``ops`` at ``shapes`` compiled for sm_90 as jax-triton 0.3.1
    does and as PyTorch's launcher does; prints (and with ``json_path`` writes) the PTX's
    vector-access counts of both."""
    if os.environ.get("TRITON_INTERPRET"):
        print("--ptx needs compiled kernels: unset TRITON_INTERPRET", file=sys.stderr)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import importlib

    import jax
    import jax.numpy as jnp

    from mingru_jax._launch import _compile

    rows = []
    for B, T, D, modes in shapes:
        for op in ops:
            launcher = importlib.import_module(f"mingru_jax._launch.{op}")
            shapes = [(B, T, D), (B, T + 1, D) if op == "parallel_scan_log" else (B, T, D)]
            avals = [jax.ShapeDtypeStruct(s, getattr(jnp, dtype)) for s in shapes]
            for mode in modes:
                def traced(*xs, mode=mode, launcher=launcher):
                    if mode == "fwd":
                        return launcher.run(*xs)
                    out, vjp = jax.vjp(launcher.run, *xs)
                    return vjp(out)

                with _compile.recorded_launches() as log:
                    jax.make_jaxpr(traced)(*avals)
                seen = set()
                for rec in log:
                    meta = dict(rec["meta"])
                    nw, ns = meta.pop("num_warps", None), meta.pop("num_stages", None)
                    key = (rec["kernel"], repr(sorted(meta.items())), rec["scalars"])
                    if key in seen:
                        continue
                    seen.add(key)
                    n_in = len(rec["inputs"])
                    arg_dtypes = ([f"*{_TRITON_TYPE[d]}" for d in rec["inputs"]]
                                  + [_int_type(v) for v in rec["scalars"]]
                                  + [f"*{_TRITON_TYPE[d]}" for d in rec["outputs"]])
                    scalar_args = [(n_in + i, _int_type(v), v) for i, v in enumerate(rec["scalars"])]
                    row = dict(op=op, shape=[B, T, D], mode=mode,
                               kernel=rec["kernel"].__name__, grid=rec["grid"],
                               constexprs=_jsonable(meta), num_warps=nw, num_stages=ns)
                    for label, hints in (("jax-triton", False), ("pytorch", True)):
                        try:
                            r = _compile.compile_offline(rec["kernel"], arg_dtypes, scalar_args,
                                                         meta, num_warps=nw, num_stages=ns,
                                                         int_hints=hints)
                            row[label] = dict(divisible_16=r["divisible_16"],
                                              **ptx_stats(r["compiled"].asm["ptx"]))
                        except Exception as exc:
                            row[label] = dict(error=f"{type(exc).__name__}: {exc}")
                    rows.append(row)
    print(f"{'op':<18} {'shape':<16} {'mode':<7} {'kernel':<20} {'consts':<48} "
          f"{'jax-triton ld v4/s  st v4/s':<28} {'pytorch-rule ld v4/s  st v4/s':<30} div16")
    for r in rows:
        def cell(d):
            if "error" in d:
                return d["error"][:26]
            return f"{d['ld_v4']:>4}/{d['ld_scalar']:<4}  {d['st_v4']:>4}/{d['st_scalar']:<4}"
        consts = {k: v for k, v in r["constexprs"].items() if k in ("MODE", "BLOCK_T", "BLOCK_D",
                                                                   "REVERSE", "BLOCK_N")}
        print(f"{r['op']:<18} {'x'.join(map(str, r['shape'])):<16} {r['mode']:<7} "
              f"{r['kernel']:<20} {str(consts):<48} {cell(r['jax-triton']):<28} "
              f"{cell(r['pytorch']):<30} {r['pytorch'].get('divisible_16')}")
    if json_path:
        Path(json_path).parent.mkdir(parents=True, exist_ok=True)
        Path(json_path).write_text(json.dumps(dict(offline_ptx=rows), indent=1, default=repr))
        print(f"wrote {json_path}")
    return 0
