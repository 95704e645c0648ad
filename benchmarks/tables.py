"""Markdown tables (and a plot) from the runner's rows: what ``bench.md`` holds and what
:mod:`mingru_benchmarks.page` writes into the results page.

Ratios are ``× X`` = X's time / ours (above 1: ours is faster), every pair from one run.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from mingru_benchmarks.registry import BACKENDS, PREFILL_BACKENDS, SUITES

__all__ = ["markdown", "plot", "stamp", "table"]

Row = dict[str, Any]
PEERS = ("fla", "accelerated-scan", "minGRU-pytorch")
TITLES = {"eager": "× eager", "compile": "× torch.compile", "triton": "× triton",
          "jax": "× jax eager", "jax-triton": "× jax-triton"}
NOTES = {
    "ops": "ms per call, median; `fwd` under `no_grad`, `fwd+bwd` adds the backward of "
           "`.float().sum()`; bf16 = bf16 inputs.",
    "mixers": "Mixers with input = hidden = d; bf16 = autocast over fp32 parameters. Peers: "
              "fla / accelerated-scan on the library mixer's own projection, minGRU-pytorch's "
              "`minGRU`.",
    "train-step": "One step of a byte-level LM: Embedding(256, d) → MinGRUStack(d, d, L, "
                  "mlp_expansion=4) → Linear(d, 256), cross-entropy, AdamW (fused on CUDA), bf16 "
                  "autocast; `compile` = every block compiled on the eager path.",
    "host": "µs per call over batches of back-to-back calls with one sync (enqueue: before "
            "the sync), at a shape where the GPU time is negligible.",
    "delta": "The delta rule (chunk 64) vs fla's chunk_delta_rule (nh1) and "
             "chunk_gated_delta_product (nh2 decay); err = max |o − o₆₄| / max |o₆₄|.",
    "memory-floor": "Forward vs the bandwidth floor: bytes of inputs + outputs / copy "
                    "bandwidth measured in the same run.",
    "jax": "Wall clock with a sync per call for every column (JAX's only timer); `ours` is "
           "the PyTorch frontend.",
    "hooks": "The training step (jax_triton_compile: MinGRU fwd+bwd through jax-triton) with "
             "each private hook off and on, paired in one process; off / on = median of "
             "per-round ratios.",
    "decode": "Greedy `generate()` of a byte-level MinGRULM (vocab 256, random weights, cast "
              "with `.to(dtype)`). ms/token = (t(N + 1 new tokens) − t(1)) / N, the decode loop "
              "without the prefill, median of paired rounds, wall clock with a sync; tokens/s = "
              "batch × 1000 / ms/token. ours = CUDA-graph decoding, step loop = "
              "`cuda_graph=False`; × GPT-2 = transformers' GPT-2 of the same width and depth "
              "(heads of 64, KV cache, `generate(do_sample=False)`) per token / ours. Prefill = "
              "generate with one new token, default `prefill_chunk` / `prefill_chunk=prompt`; "
              "peak = `torch.cuda.max_memory_allocated`, weights included. JAX = "
              "`mingru_jax.MinGRULM.generate`, same recipe.",
}


def _fmt(ms: float | None, scale: float = 1.0) -> str:
    if ms is None:
        return "—"
    v = ms * scale
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def _ratio(num: float | None, den: float | None) -> str:
    return f"{num / den:.2f}×" if num and den else "—"


def stamp(results: Iterable[dict[str, Any]]) -> str:
    """One line: GPU, versions, commit, date and command of the run(s) behind a table."""
    results = list(results)
    env = results[0]["environment"]
    where = env.get("gpu") or f"CPU ({env.get('cpu')}, {env.get('cpu_count')} cores)"
    versions = " · ".join(f"{k} {env[k]}" for k in ("torch", "triton", "jax", "jax-triton", "flax",
                                                     "fla-core", "accelerated-scan",
                                                     "mingru-pytorch") if env.get(k))
    commands = "; ".join(f"`{_portable(r['command'])}`" for r in results)
    return f"{where} · {versions} · commit `{env.get('commit')}` · {env['date']} · {commands}"


def _portable(command: str) -> str:
    """The command without its output paths (``--out``, ``--json-out``): they name folders of
    the machine that ran it, not what was measured."""
    words = command.split()
    kept = [w for i, w in enumerate(words)
            if w not in ("--out", "--json-out") and (i == 0 or words[i - 1] not in ("--out", "--json-out"))]
    return " ".join(w for w in kept if not w.startswith(("--out=", "--json-out=")))


def _cells(rows: list[Row], key: tuple[str, ...]) -> dict[tuple, dict[str, Row]]:
    cells: dict[tuple, dict[str, Row]] = {}
    for r in rows:
        cells.setdefault(tuple(r[k] for k in key), {})[r["backend"]] = r
    return cells


def _notes(rows: list[Row]) -> list[str]:
    why: dict[str, list[str]] = {}
    for r in rows:
        if "ms" not in r:
            reason = f"{r['backend']}: {r.get('skipped') or r.get('error')}"
            where = f"{r['case']} {r['precision']} {r['mode']}"
            if where not in why.setdefault(reason, []):
                why[reason].append(where)
    why = {f"{reason} ({', '.join(where)})": None for reason, where in why.items()}
    return ["", "Not run: " + "; ".join(why) + "."] if why else []


def _grid(header: list[str], lines: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *["| " + " | ".join(line) + " |" for line in lines]]


def table(name: str, rows: list[Row]) -> list[str]:
    """The markdown of table ``name`` (a suite) from its rows."""
    if name == "headline":
        return _headline(rows)
    rows = [r for r in rows if r["suite"] == name]
    if name == "decode":
        return _decode(rows)
    if name == "hooks":
        lines = []
        for (hook,), cell in _cells(rows, ("case",)).items():
            on, off = cell.get("on", {}), cell.get("off", {})
            lines.append([hook, _fmt(on.get("ms")), _fmt(off.get("ms")),
                          f"{off['off_vs_on']:.3f}" if "off_vs_on" in off else "—"])
        return [*_grid(["hook", "on ms", "off ms", "off / on"], lines), *_notes(rows)]
    scale, unit = (1e3, "µs") if name == "host" else (1.0, "ms")
    backends = [b for b in BACKENDS if any(r["backend"] == b and "ms" in r for r in rows)]
    others = [b for b in backends if b != "ours"]
    header = ["case", "shape", "precision", "mode", *[f"{b} {unit}" for b in backends],
              *[TITLES.get(b, f"× {b}") for b in others]]
    if name == "host":
        header.append("ours enqueue µs")
    if name == "memory-floor":
        header += ["floor ms", "ours % of floor"]
    if name == "delta":
        header.append("err vs f64 (" + " / ".join(backends) + ")")
    lines = []
    for key, cell in _cells(rows, ("case", "shape", "precision", "mode")).items():
        ms = {b: cell.get(b, {}).get("ms") for b in backends}
        line = [*key, *[_fmt(ms[b], scale) for b in backends],
                *[_ratio(ms[b], ms.get("ours")) for b in others]]
        ours = cell.get("ours", {})
        if name == "host":
            line.append(_fmt(ours.get("enqueue_ms"), scale))
        if name == "memory-floor":
            floor = ours.get("floor_ms")
            line += [_fmt(floor), f"{100 * floor / ours['ms']:.0f} %" if floor else "—"]
        if name == "delta":
            line.append(" / ".join(f"{cell[b]['err_vs_f64']:.1e}" if "err_vs_f64" in cell.get(b, {})
                                   else "—" for b in backends))
        lines.append(line)
    return [*_grid(header, lines), *_notes(rows)]


def _ratios(times: tuple, base: tuple) -> str:
    """``fwd / fwd+bwd`` ratios ``times / base``."""
    return " / ".join(_ratio(t, b) for t, b in zip(times, base, strict=True))


def _pair(cell: dict[tuple, dict[str, Row]], key: tuple, backend: str) -> tuple:
    return tuple(cell.get((*key, m), {}).get(backend, {}).get("ms") for m in ("fwd", "fwd+bwd"))


def _decode(rows: list[Row]) -> list[str]:
    """Per model, batch, prompt and precision: ours per token, against the step loop, GPT-2
    (measured once per shape and precision) and JAX, and the prefill chunked / unchunked."""
    gpt2 = {(r["shape"], r["precision"]): r.get("ms") for r in rows if r["backend"] == "gpt2"}
    lines = []
    for (case, shape, precision), cell in _cells(rows, ("case", "shape", "precision")).items():
        dims = {word[0]: word[1:] for word in shape.split()}  # B, P, N, d, L
        ms = {b: cell.get(b, {}).get("ms") for b in ("ours", "step-loop", "jax", *PREFILL_BACKENDS)}
        speed = cell.get("ours", {}).get("tokens_per_s")
        peaks = [cell.get(b, {}).get("peak_gb") for b in PREFILL_BACKENDS]
        lines.append([f"{case} d{dims['d']} L{dims['L']}", dims["B"], dims["P"], dims["N"],
                      precision, _fmt(ms["ours"]), f"{speed:,.0f}" if speed else "—",
                      _ratio(ms["step-loop"], ms["ours"]),
                      _ratio(gpt2.get((shape, precision)), ms["ours"]),
                      " / ".join(_fmt(ms[b]) for b in PREFILL_BACKENDS),
                      " / ".join("—" if p is None else f"{p:.2f}" for p in peaks),
                      _fmt(ms["jax"])])
    header = ["model", "batch", "prompt", "new tokens", "precision", "ours ms/token", "tokens/s",
              "× step loop", "× GPT-2", "prefill ms chunked / unchunked",
              "prefill peak GB chunked / unchunked", "JAX ms/token"]
    return [*_grid(header, lines), *_notes(rows)]


def _headline(rows: list[Row]) -> list[str]:
    """Ops and mixers (ours fwd and fwd+bwd, × eager, × torch.compile, × peers), the training
    step, and the JAX frontend (jax-triton against the PyTorch frontend and JAX's eager path)."""
    out: list[str] = []
    kernel = [r for r in rows if r["suite"] in ("ops", "mixers")]
    if kernel:
        cells = _cells(kernel, ("case", "shape", "precision", "mode"))
        lines = []
        for key in dict.fromkeys(k[:3] for k in cells):
            ours = _pair(cells, key, "ours")
            pairs = {b: _pair(cells, key, b) for b in ("eager", "compile", *PEERS)}
            peers = [f"{_ratios(pairs[b], ours)} ({b})" for b in PEERS if any(pairs[b])]
            lines.append([*key, _fmt(ours[0]), _fmt(ours[1]), _ratios(pairs["eager"], ours),
                          _ratios(pairs["compile"], ours), "; ".join(peers) or "—"])
        out += _grid(["case", "shape", "precision", "ours fwd ms", "ours fwd+bwd ms",
                      "× eager (fwd / fwd+bwd)", "× torch.compile", "× peer"], lines)
    step = [r for r in rows if r["suite"] == "train-step"]
    if step:
        lines = [[*key[:3], _fmt(c.get("ours", {}).get("ms")),
                  _ratio(c.get("eager", {}).get("ms"), c.get("ours", {}).get("ms")),
                  _ratio(c.get("compile", {}).get("ms"), c.get("ours", {}).get("ms"))]
                 for key, c in _cells(step, ("case", "shape", "precision")).items()]
        out += ["", *_grid(["training step (mixer)", "shape", "precision", "ours ms/step",
                            "× eager", "× torch.compile"], lines)]
    jax = [r for r in rows if r["suite"] == "jax"]
    if jax:
        cells = _cells(jax, ("case", "shape", "precision", "mode"))
        lines = []
        for key in dict.fromkeys(k[:3] for k in cells):
            ours, jt, xla = (_pair(cells, key, b) for b in ("ours", "jax-triton", "jax"))
            lines.append([*key[:2], " / ".join(map(_fmt, ours)),
                          _ratios(jt, ours), _ratios(xla, ours)])
        out += ["", *_grid(["JAX frontend", "shape", "PyTorch frontend ms (fwd / fwd+bwd)",
                            "× jax-triton", "× jax eager"], lines)]
    return [*out, *_notes(rows)]


def markdown(result: dict[str, Any]) -> str:
    """``bench.md``: the stamp, then one table per suite of the run."""
    lines = [stamp([result]), ""]
    for name in result["suites"]:
        lines += [f"### {name}", "", NOTES.get(name, "Ratios: × X = X's time / ours."), "",
                  *table(name, result["rows"]), ""]
    return "\n".join(lines).rstrip()


def plot(result: dict[str, Any], path: Path) -> bool:
    """Bars of every backend's time per case (log scale), one panel per suite; ``False``
    without matplotlib or rows."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    suites = [s for s in SUITES if any(r["suite"] == s and "ms" in r for r in result["rows"])]
    if not suites:
        return False
    fig, axes = plt.subplots(len(suites), 1, figsize=(12, 3.5 * len(suites)), squeeze=False)
    for ax, suite in zip(axes[:, 0], suites, strict=True):
        rows = [r for r in result["rows"] if r["suite"] == suite and "ms" in r]
        key = lambda r: (r["case"], r["shape"], r["precision"], r["mode"])
        keys = list(dict.fromkeys(map(key, rows)))
        names = list(dict.fromkeys(r["backend"] for r in rows))
        width = 0.8 / len(names)
        for i, b in enumerate(names):
            ms = {key(r): r["ms"] for r in rows if r["backend"] == b}
            ax.bar([j + i * width for j in range(len(keys))], [ms.get(k, 0) for k in keys],
                   width, label=b)
        ax.set_xticks([j + 0.4 for j in range(len(keys))], ["\n".join(k) for k in keys],
                      fontsize=5)
        ax.set(yscale="log", ylabel="ms (log)", title=suite)
        ax.legend(fontsize=6, ncol=min(len(names), 5))
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True
